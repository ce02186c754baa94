"""Errors a user can meet, importable without the heavier kernel modules."""

from __future__ import annotations

from pathlib import Path


class ConfigError(Exception):
    """A problem with the config: which file, which key, what was expected."""

    def __init__(self, message: str, *, path: Path | None = None, key: str | None = None):
        self.path = path
        self.key = key
        self.message = message
        where = ": ".join(str(part) for part in (path, key) if part)
        super().__init__(f"{where}: {message}" if where else message)
