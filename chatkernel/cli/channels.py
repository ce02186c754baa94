"""``chatkernel channels``: the configured accounts and the installed channel types,
and probing them."""

from __future__ import annotations

import sys
from typing import Any

import click

from chatkernel.cli import cli
from chatkernel.cli.client import ask_gateway, presence
from chatkernel.cli.local import load_config, read_config_quietly, read_local_snapshot
from chatkernel.cli.options import config_option
from chatkernel.cli.render import redactor, show
from chatkernel.cli.status import EXIT_UNHEALTHY


@cli.group()
@config_option
def channels() -> None:
    """Channel accounts: list them, probe them."""


def channel_types() -> list[dict[str, str]]:
    from importlib.metadata import packages_distributions

    from chatkernel.cli import _plugin_manager
    from chatkernel.core.plugins import collect_channels

    distributions = packages_distributions()
    found = []
    for name, channel_type in sorted(collect_channels(_plugin_manager()).items()):
        package = channel_type.__module__.split(".")[0]
        source = "built-in" if package == "chatkernel" else \
            (distributions.get(package) or [package])[0]
        found.append({"name": name, "source": source})
    return found


@channels.command("list")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def channels_list(as_json: bool, config_file: str | None) -> None:
    """Configured accounts (state from the running gateway, or the config) and the
    installed channel types."""
    _, raw, config, config_error = read_config_quietly(config_file)
    info, answer, error = ask_gateway("/control/health", {"client": presence("channels")}, 15)
    redact = redactor(raw, info)
    if answer is not None:
        snapshot = answer
    elif config is None:
        raise click.ClickException(redact(config_error or "the config cannot be read"))
    else:
        snapshot, _ = read_local_snapshot(config)
    types = channel_types()
    from chatkernel.core.health.report import accounts_of, render_channels

    data = {"gateway": snapshot.get("gateway"), "channel_types": types,
            "accounts": [{key: account.get(key) for key in
                          ("key", "channel", "account", "enabled", "state", "quiet", "probe")}
                         for account in accounts_of(snapshot)]}
    show(data, None if as_json else render_channels(snapshot, types), redact, as_json)


@channels.command("probe")
@click.argument("target", required=False, metavar="[CHANNEL[:ACCOUNT]]")
@click.option("--timeout", "timeout_ms", type=click.IntRange(min=1), default=10_000,
              show_default=True, metavar="MS", help="How long each probe may take.")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def channels_probe(target: str | None, timeout_ms: int, as_json: bool,
                   config_file: str | None) -> None:
    """Probe accounts now (all, a channel's, or one): through the running gateway, or
    from here when none runs. Exit status 1 if any probe fails or times out."""
    _, raw, _, _ = read_config_quietly(config_file)
    info, answer, error = ask_gateway(
        "/control/channels/probe", {"target": target, "timeout_ms": timeout_ms,
                                    "client": presence("channels probe")},
        timeout_ms / 1000 + 1)
    redact = redactor(raw, info)
    if answer is None and info is not None:
        raise click.ClickException(redact(error))
    if answer is None:
        answer = _probe_directly(config_file, target, timeout_ms / 1000)
    else:
        answer["via"] = "gateway"
    from chatkernel.core.health.report import render_probes

    show(answer, None if as_json else render_probes(answer), redact, as_json)
    sys.exit(0 if answer.get("ok") else EXIT_UNHEALTHY)


def _probe_directly(config_file: str | None, target: str | None, timeout: float
                    ) -> dict[str, Any]:
    import anyio

    from chatkernel.cli import _plugin_manager
    from chatkernel.core import logs

    config, config_path = load_config(config_file)
    logs.configure(config.gateway.log_format, "error")
    pm = _plugin_manager()

    async def probe():
        from chatkernel.core.health.probes import ProbeInfo, select_accounts
        from chatkernel.core.kernel import Kernel

        async with Kernel(config, config_path=config_path, pm=pm, recover=False) as kernel:
            try:
                accounts = select_accounts(kernel.accounts.values(), target)
            except LookupError as exc:
                raise click.ClickException(str(exc)) from None
            results = await kernel.health.probe(accounts, timeout=timeout)
        probes = {key: ProbeInfo.of(result, None).model_dump(mode="json")  # type: ignore
                  for key, result in results.items()}
        return {"ok": all(p["ok"] for p in probes.values()), "probes": probes, "via": "direct"}

    return anyio.run(probe)
