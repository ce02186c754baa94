"""Errors the kit and the kernel share, importable without any heavier module.

The store raises :class:`StoreError` and :class:`LeaseLost` (re-exported by
:mod:`chatkernel.core.store`); the kit's receive loops catch them without
importing a store. The kernel's receiver raises :class:`Backlogged` to a webhook
whose request it cannot take in time.
"""

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


class StoreError(Exception):
    """The state store cannot be used: unreadable, unreachable, too new, not open..."""


class LeaseLost(StoreError):
    """A fenced write was refused: this process no longer holds the account's lease
    with the token it was fenced with (another process took the account over).
    Nothing was written."""

    def __init__(self, message: str, *, lease: str | None = None) -> None:
        super().__init__(message)
        self.lease = lease


class Backlogged(Exception):
    """The kernel holds as many accepted messages as it queues (its accept backlog)
    and none went through within a webhook's wait: nothing of the request was
    journaled. A webhook answers 503 with ``Retry-After`` (:attr:`retry_after`
    seconds), and the platform sends the request again, rather than the request
    being held past the platform's own timeout."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    @property
    def headers(self) -> dict[str, str]:
        """The headers of the ``503`` the refused request is answered with."""
        return {"Retry-After": str(self.retry_after)}
