"""What the CLI reads itself, without a gateway: the config, the state database."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any


#: The ``${ENV}`` references a command that reads the state database resolves: the
#: store's (a Redis URL and its password). A channel's token, the control token or an
#: agent's key is for talking to others: a shell without them still reads the state.
STORE = ("store",)


def load_config(config_file: str | None, *, uses: bool | Collection[str] = True):
    """``(config, path)``: the config file parsed (a ConfigError names what is wrong).
    ``uses``: the keys whose ``${ENV}`` references must resolve (True: all of them, as
    for a command that talks to the platforms), as ``cfg.parse``'s ``strict_env``."""
    from chatkernel.core import config as cfg

    path = cfg.config_path(config_file)
    return cfg.parse(cfg.read_raw(path), path=path, strict_env=uses), path


def read_config_quietly(config_file: str | None):
    """``(path, raw, config or None, error or None)``: never raises for a bad file."""
    from chatkernel.core import config as cfg

    path = cfg.config_path(config_file)
    try:
        raw = cfg.read_raw(path)
        return path, raw, cfg.parse(raw, path=path, strict_env=False), None
    except cfg.ConfigError as exc:
        return path, {}, None, str(exc)


def with_store(config_file: str | None, action):
    """``action(store)``'s answer, on the config's state database opened for it (only
    the store's ``${ENV}`` references need resolve)."""
    import anyio

    from chatkernel.core.store import open_store

    config, path = load_config(config_file, uses=STORE)

    async def run():
        store = open_store(config, config_path=path)
        await store.open()
        try:
            return await action(store)
        finally:
            await store.close()

    return anyio.run(run)


def read_local_snapshot(config, *, with_store_counts: bool = False):
    """The snapshot from the config and the state database, opened read-only."""
    import anyio

    from chatkernel.core.health.probes import local_snapshot
    from chatkernel.core.store import open_store

    async def read():
        counts: dict[str, Any] = {}
        store = None
        try:
            store = open_store(config, read_only=True)
            await store.open()
        except Exception as exc:  # no database yet, or one we cannot read: say so
            counts["state"] = str(exc)
            store = None
        try:
            snapshot = await local_snapshot(config, store)
            if store is not None and with_store_counts:
                counts["unfinished inbound messages"] = len(await store.unfinished_inbound())
                counts["unsent outbox entries"] = len(await store.outbox_unfinished())
        finally:
            if store is not None:
                await store.close()
        return snapshot.model_dump(mode="json"), counts

    return anyio.run(read)
