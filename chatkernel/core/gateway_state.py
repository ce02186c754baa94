"""``$CHATKERNEL_HOME/gateway.json``: the running gateway's pid, URL and control token.

The gateway writes it once it listens (mode 0600: the token is a secret) and removes it
when it stops; the CLI reads it to find the gateway, and a store that finds its database
held reads it to say where the holder serves. A stale file (its pid gone) reads as none.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

STATE_FILE = "gateway.json"


@dataclass(slots=True)
class GatewayInfo:
    """What ``gateway.json`` says about the running gateway."""

    pid: int
    url: str
    token: str
    started_at: float

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def state_path(home: Path) -> Path:
    return home / STATE_FILE


def write_state(home: Path, url: str, token: str) -> Path:
    """Record the running gateway (mode 0600: the token is a secret)."""
    home.mkdir(parents=True, exist_ok=True)
    path = state_path(home)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({"pid": os.getpid(), "url": url, "token": token,
                   "started_at": time.time()}, handle)
    os.replace(tmp, path)
    return path


def remove_state(home: Path) -> None:
    path = state_path(home)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if data.get("pid") == os.getpid():  # never remove another gateway's file
        path.unlink(missing_ok=True)


def read_state(home: Path) -> GatewayInfo | None:
    """The running gateway, or None (no file, a stale file, an unreadable one)."""
    try:
        data = json.loads(state_path(home).read_text())
        info = GatewayInfo(int(data["pid"]), str(data["url"]), str(data["token"]),
                           float(data.get("started_at", 0)))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info if info.alive() else None
