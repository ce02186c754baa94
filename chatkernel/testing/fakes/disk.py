"""A small real file system that a test fills and frees: a full disk, not a mock.

``SmallDisk`` mounts a tmpfs of a few megabytes (root only, Linux), so what the
gateway writes there meets ``ENOSPC`` from the kernel exactly as on a full
disk: SQLite's commits fail with ``SQLITE_FULL``. :meth:`SmallDisk.fill`
takes every free byte with a file of its own, :meth:`SmallDisk.free` removes it.
Where mounting is not permitted, :meth:`SmallDisk.mount` raises
:class:`DiskUnavailable` with the reason (a test skips on it)::

    with SmallDisk(tmp_path / "disk") as disk:
        store = SQLiteStore.at(disk.path / "state.db")
        ...
        disk.fill()
        ...
        disk.free()
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["DiskUnavailable", "SmallDisk"]

FILLER = ".filler"


class DiskUnavailable(Exception):
    """A small file system cannot be mounted here (not root, not Linux, not allowed)."""


class SmallDisk:
    """A tmpfs of ``size_mb`` megabytes at ``path``, mounted for a ``with`` block."""

    def __init__(self, path: str | os.PathLike[str], size_mb: int = 8) -> None:
        self.path = Path(path)
        self.size_mb = size_mb
        self.mounted = False

    def mount(self) -> None:
        if not sys.platform.startswith("linux"):
            raise DiskUnavailable(f"tmpfs mounts need Linux, not {sys.platform}")
        if os.geteuid() != 0:
            raise DiskUnavailable("mounting a tmpfs needs root")
        self.path.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0700", "tmpfs",
             str(self.path)], capture_output=True, text=True, timeout=30, check=False)
        if result.returncode != 0:
            raise DiskUnavailable(f"mount -t tmpfs failed: {result.stderr.strip()}")
        self.mounted = True

    def unmount(self) -> None:
        if self.mounted:
            # Lazy: a file a test left open does not keep the mount.
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True, timeout=30,
                           check=False)
            self.mounted = False

    def __enter__(self) -> "SmallDisk":
        self.mount()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.unmount()

    @property
    def free_bytes(self) -> int:
        stats = os.statvfs(self.path)
        return stats.f_bavail * stats.f_frsize

    def fill(self) -> int:
        """Take every free byte (appending to the filler); returns how many were taken."""
        taken = 0
        block = b"\0" * 65536
        fd = os.open(self.path / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for size in (65536, 4096, 512, 1):  # then the last partial blocks
                while True:
                    try:
                        taken += os.write(fd, block[:size])
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
        finally:
            os.close(fd)
        return taken

    def free(self) -> None:
        """Give the space the filler took back."""
        try:
            (self.path / FILLER).unlink()
        except FileNotFoundError:
            pass
