"""The SQLite store's file: created 0600, claimed by one process, and, when it cannot
be opened, why in words a person acts on."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import sqlite3
from pathlib import Path
from typing import Any

from chatkernel.core.store.base import StoreUnavailable

__all__ = ["DatabaseFile"]

log = logging.getLogger("chatkernel.store")


def _in_use_message(path: Path, holder: dict[str, Any]) -> str:
    """A claimed database's holder, in one line: who, of which home, where it serves."""
    from chatkernel.core.gateway_state import read_state

    pid = holder.get("pid") if isinstance(holder.get("pid"), int) else None
    role = str(holder.get("role") or "another process")
    who = f"{role} pid {pid}" if pid else role
    home = holder.get("home")
    where = ""
    if isinstance(home, str):
        info = read_state(Path(home))
        served = f", at {info.url}" if info is not None and info.pid == pid else ""
        where = f" (home {home}{served})"
    return (f"the state database {path} is in use by {who}{where}: one process per "
            "database. Two homes whose store.path lead to one file would answer the same "
            "messages twice; give each home its own store.path, or stop that one first")


def _user_name() -> str:
    """Who this process runs as, for error messages."""
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError, AttributeError):  # Windows, or a uid with no name
        return f"uid {os.geteuid()}" if hasattr(os, "geteuid") else "this user"


def _read_only_file_system(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


class DatabaseFile:
    """The database file of ``SQLiteStore``: its directory and mode, its lock, and what
    to say when it cannot be opened."""

    path: Path
    memory: bool
    _claim_fd: int | None

    def _unavailable(self, exc: OSError | sqlite3.Error, existed: bool) -> StoreUnavailable:
        """Why the database cannot be opened (or created): the file, the reason, what to
        do. SQLite says "unable to open database file" or "attempt to write a readonly
        database" whatever the cause; the file system says which it is."""
        path, directory = self.path, self.path.parent
        user = _user_name()
        what = f"cannot {'open' if existed else 'create'} the state database {path}"
        elsewhere = "or set store.path to a file in a writable directory"
        if _read_only_file_system(directory):
            return StoreUnavailable(
                f"{what}: {directory} is on a read-only file system. Set store.path (or "
                "CHATKERNEL_HOME) to a place on a writable one.")
        if directory.is_dir() and not os.access(directory, os.W_OK | os.X_OK):
            why = f"the directory {directory} is not writable by {user}"
            # The file is there: what SQLite could not make is its write-ahead log.
            missing = [file for file in (Path(f"{path}-wal"), Path(f"{path}-shm"))
                       if existed and not file.exists()]
            if missing:
                why = f"SQLite must create {missing[0]} next to it (its write-ahead log), and {why}"
            return StoreUnavailable(f"{what}: {why}. Make {directory} writable for {user} "
                                    f"(chown or chmod), {elsewhere}.")
        for file in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            if file.exists() and not os.access(file, os.R_OK | os.W_OK):
                return StoreUnavailable(
                    f"{what}: {file} is not readable and writable by {user}. Give {user} "
                    f"read and write access to it (chown or chmod), {elsewhere}.")
        blocker = next((parent for parent in path.parents if parent.exists()), None)
        if blocker is not None and not blocker.is_dir():
            return StoreUnavailable(f"{what}: {blocker} is a file, not a directory. Set "
                                    "store.path to a file in a directory.")
        if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc):
            return StoreUnavailable(
                f"{what}: the file is not an SQLite database, or it is damaged. Move it "
                "aside to start afresh (what it held is lost to the gateway), or set "
                "store.path to another file.")
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return StoreUnavailable(f"{what}: {reason}. Check the file, {elsewhere}.")

    @property
    def lock_path(self) -> Path:
        """The file :meth:`claim` locks: beside the database, ``state.db.lock``."""
        return self.path.with_name(self.path.name + ".lock")

    def claim(self, holder: dict[str, Any]) -> None:
        """An exclusive ``flock`` on :attr:`lock_path`, held until :meth:`close`: one
        process writes a SQLite store, whichever home's ``store.path`` leads to it (the
        home's own lock cannot see a second home). The operating system releases it when
        the process ends, so a crash leaves no stale lock; the file keeps the holder."""
        if self.memory or self._claim_fd is not None:
            return
        path = self.lock_path
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StoreUnavailable(f"cannot lock the state database {self.path}: cannot "
                                   f"open {path} ({exc.strerror or exc})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                other = json.loads(os.read(fd, 4096) or b"{}")
            except (OSError, ValueError):
                other = {}
            os.close(fd)
            raise StoreUnavailable(_in_use_message(self.path, other)) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        self._claim_fd = fd

    def _release_claim(self) -> None:
        fd, self._claim_fd = self._claim_fd, None
        if fd is not None:
            os.close(fd)

    def _prepare_file(self) -> None:
        """The parent directory (0700 when created) and the file, 0600 from the start."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        os.close(fd)
        # The file may predate us; SQLite gives -wal and -shm the file's mode.
        for file in (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm")):
            try:
                if file.stat().st_mode & 0o777 != 0o600:
                    os.chmod(file, 0o600)
            except FileNotFoundError:
                pass
            except PermissionError:
                log.warning("%s: cannot set mode 0600 (not the owner?)", file)
