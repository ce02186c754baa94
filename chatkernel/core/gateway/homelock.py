"""One kernel per home: an exclusive lock on ``$CHATKERNEL_HOME/gateway.lock``.

``chatkernel run`` takes the lock before it opens the state database and holds
it for as long as it runs; so does the kernel ``chatkernel send`` starts when no
gateway runs. A second gateway on the same home would replay the first one's
unfinished work (its in-flight sends reported lost), poll the same platform
accounts (Telegram answers both with 409s) and overwrite ``gateway.json``; with
the lock it stops at once and says who holds the home.

The lock is ``flock`` on the home directory, opened read-only: the operating
system releases it when the process ends, however it ends, so a crash never
leaves a stale lock behind, and it needs no write access. ``gateway.lock`` beside
it holds the pid and the role of the holder, for a second holder's message.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

LOCK_FILE = "gateway.lock"


class HomeInUse(Exception):
    """Another process holds the home: ``pid`` and ``role`` say who, ``url`` where it
    serves (None when it is not listening yet, or is not a gateway)."""

    def __init__(self, home: Path, pid: int | None, role: str, url: str | None) -> None:
        self.home, self.pid, self.role, self.url = home, pid, role, url
        who = f"{role} pid {pid}" if pid else role
        where = f" at {url}" if url else (" (starting: not listening yet)"
                                          if role == "gateway" else "")
        super().__init__(f"home in use by {who}{where}: {home} (one gateway per "
                         "CHATKERNEL_HOME; stop it first, or use another home)")


class HomeLock:
    """The exclusive lock on a home, for one process (``with HomeLock(home):``)."""

    def __init__(self, home: Path, role: str = "gateway") -> None:
        self.home = home
        #: Who holds it, as the error message of a second holder names it.
        self.role = role
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        return self.home / LOCK_FILE

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> "HomeLock":
        """Take the lock now, or raise :class:`HomeInUse` (never waits)."""
        if self._fd is not None:
            return self
        try:
            self.home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file in the way, a parent this user cannot write
            from chatkernel.core.config import ConfigError, os_reason

            raise ConfigError(f"the home {self.home} cannot be created: "
                              f"{os_reason(exc, self.home)} (CHATKERNEL_HOME names it)"
                              ) from None
        # The lock is on the home directory itself, which needs no write access: a home
        # the gateway cannot write still gets to the error that names what cannot be
        # written (the state database, gateway.json), not to one about the lock.
        fd = os.open(self.home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise self._in_use(_read_holder(self.path)) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        try:  # who holds it, for a second holder's error message
            _write_holder(self.path, {"pid": os.getpid(), "role": self.role})
        except OSError:
            pass  # a read-only home: the start fails next, naming the file it cannot write
        return self

    def release(self) -> None:
        """Let go (closing the directory releases the lock; the holder file stays)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def _in_use(self, holder: dict) -> HomeInUse:
        from chatkernel.core.gateway_state import read_state

        pid = holder.get("pid") if isinstance(holder.get("pid"), int) else None
        role = str(holder.get("role") or "another process")
        info = read_state(self.home)
        url = info.url if info is not None and info.pid == pid else None
        return HomeInUse(self.home, pid, role, url)

    def __enter__(self) -> "HomeLock":
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def _read_holder(path: Path) -> dict:
    try:
        data = json.loads(path.read_bytes() or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_holder(path: Path, holder: dict) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, json.dumps(holder).encode())
    finally:
        os.close(fd)
