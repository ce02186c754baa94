"""Durable state: the :class:`Store` interface and the choice of its backend.

``open_store(config)`` builds the backend named by ``[store] backend``, one of
:data:`BACKENDS` (``sqlite``, the default, or ``redis``); the caller then awaits
``store.open()``. Importing this package imports no backend.

The backends are the kernel's own, not an extension point: the store's interface
is internal, and what rests on it (the journal's dedupe, the outbox, leases and
fencing) are guarantees the kernel makes, not a contract a plugin could keep.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from chatkernel.core.store.base import (
    HeartbeatState,
    JournalEntry,
    LogEntry,
    OutboxEntry,
    SessionRecord,
    Store,
    StoreError,
    StoreUnavailable,
)
from chatkernel.sdk.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

    from chatkernel.core.config import KernelConfig

__all__ = ["BACKENDS", "HeartbeatState", "JournalEntry", "LogEntry", "OutboxEntry",
           "SessionRecord", "Store", "StoreError", "StoreUnavailable", "open_store"]

#: The store backends by name: the module and class of each, imported when chosen
#: (``redis`` needs the ``chatkernel[redis]`` extra, and says so when it is missing).
BACKENDS: dict[str, tuple[str, str]] = {
    "redis": ("chatkernel.core.store.redis", "RedisStore"),
    "sqlite": ("chatkernel.core.store.sqlite", "SQLiteStore"),
}


def open_store(config: KernelConfig, *, config_path: Path | None = None,
               read_only: bool = False) -> Store:
    """The store backend ``config.store.backend``, constructed with ``config`` (not opened).

    ``read_only=True`` asks the backend to open without creating or changing
    anything (``chatkernel status``); it raises on open when there is nothing yet.

    Raises :class:`~chatkernel.core.config.ConfigError` (key ``store.backend``,
    and ``config_path`` as its file when given) when no backend has that name or
    the backend fails to load.
    """
    name = config.store.backend
    if name not in BACKENDS:
        raise ConfigError(f"unknown store backend {name!r} (the backends: "
                          f"{', '.join(sorted(BACKENDS))})",
                          path=config_path, key="store.backend")
    module, attribute = BACKENDS[name]
    try:
        backend = getattr(importlib.import_module(module), attribute)
        return backend(config, **({"read_only": True} if read_only else {}))
    except ConfigError:  # the backend's own: the redis package missing, a bad URL
        raise
    except Exception as exc:
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise ConfigError(f"store backend {name!r} failed to load: {detail}",
                          path=config_path, key="store.backend") from None
