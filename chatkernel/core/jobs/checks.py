"""The start-up checks of ``[jobs.*]`` and ``[triggers.*]`` beyond their own values (which
their models check): every ``deliver_to`` names an installed channel and one of its
configured accounts, every ``agent`` one of the config's agents. ``config validate``, ``run``
and a reload refuse a config that fails them, naming the key."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from chatkernel.core.config import ConfigError, KernelConfig, did_you_mean, unknown_channel
from chatkernel.core.config.jobs import parse_target


def check_jobs(config: KernelConfig, channel_types: Mapping[str, Any],
               accounts: Iterable[tuple[str, str]], *, path: Path | None = None) -> None:
    """Raise ConfigError for the first job or trigger whose targets or agent do not exist
    (``accounts``: every configured ``(channel, account)``, switched off ones too)."""
    known = set(accounts)
    agents = config.named_agents()
    tables = [("jobs", name, table) for name, table in config.jobs.items()]
    tables += [("triggers", name, table) for name, table in config.triggers.items()]
    for section, name, table in tables:
        if table.agent is not None and table.agent not in agents:
            raise ConfigError(f"no agent {table.agent!r} in the config (agents: "
                              f"{', '.join(sorted(agents)) or 'none'})"
                              f"{did_you_mean(table.agent, agents)}", path=path,
                              key=f"{section}.{name}.agent")
        for i, target in enumerate(table.deliver_to):
            key = f"{section}.{name}.deliver_to[{i}]"
            channel, account, _ = parse_target(target)
            if channel not in channel_types:
                raise unknown_channel(channel, channel_types, path=path, key=key)
            if (channel, account) not in known:
                mine = sorted(a for c, a in known if c == channel)
                raise ConfigError(f"channel {channel!r} has no account {account!r} "
                                  f"(accounts: {', '.join(mine) or 'none'})"
                                  f"{did_you_mean(account, mine)}", path=path, key=key)
