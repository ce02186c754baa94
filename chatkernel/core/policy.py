"""The default media-path policy (SPEC §5).

A ``full`` account may send any readable file; every other level only files
under the workspace or the system temporary directory. The path is resolved
(symlinks, ``..``, relative to the workspace) before the check, so a link out
of the workspace is judged by where it points.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from chatkernel.core.models import Verdict


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
