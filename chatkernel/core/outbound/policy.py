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

    def __init__(self, default: str = "allow", rules: list[dict] | None = None) -> None:
        self.default = default
        self.rules = list(rules or [])

    @classmethod
    def from_config(cls, config) -> "SendPolicy":
        return cls(config.default, [rule.model_dump() for rule in config.rules])

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
            return self._verdict(rule["action"], f"send_policy.rules[{index}]")
        return self._verdict(self.default, "send_policy.default")

    @staticmethod
    @functools.lru_cache(maxsize=256)  # a handful of (action, source) pairs; checked per payload
    def _verdict(action: str, source: str) -> Verdict:
        if action == "allow":
            return Verdict.allow(source)
        return Verdict.deny(f"blocked by the send policy ({source})")
