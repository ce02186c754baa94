"""Durable state: the :class:`Store` interface and the choice of its backend.

``open_store(config)`` builds the backend named by ``[store] backend`` from
the stevedore driver group ``chatkernel.stores`` (``sqlite`` is built in); the
caller then awaits ``store.open()``. Importing this package imports no backend.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from pathlib import Path

    from chatkernel.core.config import KernelConfig

__all__ = ["NAMESPACE", "HeartbeatState", "JournalEntry", "LogEntry", "OutboxEntry",
           "SessionRecord", "Store", "StoreError", "StoreUnavailable", "installed_backends",
           "open_store"]

#: The entry-point group of store backends.
NAMESPACE = "chatkernel.stores"


def installed_backends() -> list[str]:
    """The names of the installed store backends, sorted (nothing is imported)."""
    return sorted({ep.name for ep in entry_points(group=NAMESPACE)})


def open_store(config: KernelConfig, *, config_path: Path | None = None,
               read_only: bool = False) -> Store:
    """The store backend ``config.store.backend``, constructed with ``config`` (not opened).

    ``read_only=True`` asks the backend to open without creating or changing
    anything (``chatkernel status``); it raises on open when there is nothing yet.

    Raises :class:`~chatkernel.core.config.ConfigError` (key ``store.backend``,
    and ``config_path`` as its file when given) when no installed backend has
    that name or the backend fails to load.
    """
    from stevedore.driver import DriverManager
    from stevedore.exception import MultipleMatches, NoMatches

    from chatkernel.sdk.errors import ConfigError

    name = config.store.backend
    installed = installed_backends()

    def unknown() -> ConfigError:
        names = ", ".join(installed) or "none"
        return ConfigError(f"unknown store backend {name!r} (installed backends: {names})",
                           path=config_path, key="store.backend")

    if name not in installed:  # checked first: stevedore would log a warning too
        raise unknown()

    def on_failure(_manager: Any, _entry_point: Any, exc: BaseException) -> None:
        if isinstance(exc, ConfigError):
            raise exc
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise ConfigError(f"store backend {name!r} failed to load: {detail}",
                          path=config_path, key="store.backend") from None

    try:
        manager = DriverManager(namespace=NAMESPACE, name=name, invoke_on_load=True,
                                invoke_args=(config,),
                                invoke_kwds={"read_only": True} if read_only else {},
                                on_load_failure_callback=on_failure)
    except NoMatches:
        raise unknown() from None
    except MultipleMatches:
        raise ConfigError(f"several installed packages provide the store backend {name!r}; "
                          "uninstall all but one",
                          path=config_path, key="store.backend") from None
    store = manager.driver
    if not isinstance(store, Store):
        raise ConfigError(f"store backend {name!r} is not a chatkernel Store "
                          f"(got {type(store).__name__})",
                          path=config_path, key="store.backend")
    return store
