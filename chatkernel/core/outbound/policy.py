"""The default media-path policy (docs/hooks.md, ``media_path_allowed``).

A ``full`` account may send any readable file; every other level only files
under the workspace or the system temporary directory. The path is resolved
(symlinks, ``..``, relative to the workspace) before the check, so a link out
of the workspace is judged by where it points.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

from chatkernel.sdk.models import Verdict


def resolve_media_path(path: str | os.PathLike[str], workspace: Path) -> Path:
    """The absolute, symlink-free path a ``MEDIA:`` line names (relative to the workspace)."""
    candidate = Path(path).expanduser()
    if not candidate.is_absolute():
        candidate = workspace / candidate
    return candidate.resolve()


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def allowed_roots(workspace: Path) -> tuple[Path, ...]:
    return (workspace.resolve(), Path(tempfile.gettempdir()).resolve())


def default_media_policy(path: Path, workspace: Path, access_level: str) -> Verdict:
    """Decide on an already resolved path."""
    if not path.is_file():
        return Verdict.deny("not a readable file" if path.exists() else "no such file")
    if not os.access(path, os.R_OK):
        return Verdict.deny("not a readable file")
    if access_level == "full":
        return Verdict.allow()
    if any(_within(path, root) for root in allowed_roots(workspace)):
        return Verdict.allow()
    return Verdict.deny(f"outside the workspace (access level {access_level!r} "
                        "may only send files under the workspace or the temp dir)")


# -- the send policy -------------------------------------------------------------------------


class SendPolicy:
    """Who the gateway may send to, checked on every outbound payload.

    A session's own override (``allow`` / ``deny``, set with ``/send`` or
    ``chatkernel sessions policy``) wins; then the first matching rule of
    ``[send_policy]`` (by channel and chat type); then its ``default``.
    """

    def __init__(self, default: str = "allow", rules: list[dict] | None = None, *,
                 where: str = "send_policy") -> None:
        self.default = default
        self.rules = list(rules or [])
        self.where = where  # the table's key, which a verdict names

    @classmethod
    def from_config(cls, config, *, where: str = "send_policy") -> "SendPolicy":
        return cls(config.default, [rule.model_dump() for rule in config.rules], where=where)

    def check(self, route, session=None) -> Verdict:
        override = (session.settings.get("send") if session is not None else None)
        if override in ("allow", "deny"):
            return self._verdict(override, "this session's send setting")
        chat_type = "group" if route.is_group else "direct"
        for index, rule in enumerate(self.rules):
            if rule.get("channel", "*") not in ("*", route.channel):
                continue
            if rule.get("chat_type", "any") not in ("any", chat_type):
                continue
            return self._verdict(rule["action"], f"{self.where}.rules[{index}]")
        return self._verdict(self.default, f"{self.where}.default")

    @staticmethod
    @functools.lru_cache(maxsize=256)  # a handful of (action, source) pairs; checked per payload
    def _verdict(action: str, source: str) -> Verdict:
        if action == "allow":
            return Verdict.allow(source)
        return Verdict.deny(f"blocked by the send policy ({source})")


class SendPolicies:
    """The send policy of each session: its agent's ``send_policy`` table where the
    agent has one (``[agents.<name>.send_policy]``), else ``[send_policy]``."""

    def __init__(self, default: SendPolicy, by_agent: dict[str, SendPolicy] | None = None
                 ) -> None:
        self.default = default
        self.by_agent = dict(by_agent or {})

    @classmethod
    def from_config(cls, config) -> "SendPolicies":
        """From a whole :class:`~chatkernel.core.config.KernelConfig`."""
        by_agent = {name: SendPolicy.from_config(agent.send_policy,
                                                 where=config.agent_key(name, "send_policy"))
                    for name, agent in config.named_agents().items()
                    if agent.send_policy is not None}
        return cls(SendPolicy.from_config(config.send_policy), by_agent)

    def for_agent(self, agent: str | None) -> SendPolicy:
        return self.by_agent.get(agent or "default", self.default)

    def check(self, route, session=None) -> Verdict:
        """:meth:`SendPolicy.check` with the policy of ``session``'s agent."""
        agent = getattr(session, "agent", None)
        return self.for_agent(agent).check(route, session)

