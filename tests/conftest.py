"""Shared fixtures and helpers for the kernel's own tests.

The ``chatkernel_home`` fixture comes from the kernel's test kit
(``chatkernel.testing.plugin``, loaded by pytest through its ``pytest11``
entry point).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator

import pytest

from chatkernel.core.plugins import PluginManager, reset_plugin_manager

#: Environment variables that change how the kernel loads plugins or finds its
#: config. A developer's shell must not leak them into the tests.
KERNEL_ENV = (
    "CHATKERNEL_LOAD_PLUGINS",
    "CHATKERNEL_DISABLE_PLUGINS",
    "CHATKERNEL_TRACE_PLUGINS",
    "CHATKERNEL_STRICT_PLUGINS",
    "CHATKERNEL_CONFIG",
)


@pytest.fixture(autouse=True)
def _clean_kernel_env(monkeypatch: pytest.MonkeyPatch, chatkernel_home) -> Iterator[None]:
    """No CHATKERNEL_* variable from outside and no process-wide manager left over; the
    kit's ``chatkernel_home`` gives the test a CHATKERNEL_HOME of its own."""
    for name in KERNEL_ENV:
        monkeypatch.delenv(name, raising=False)
    reset_plugin_manager()
    yield
    reset_plugin_manager()


@pytest.fixture
def pm() -> PluginManager:
    """A fresh plugin manager with the built-ins only (no installed plugin)."""
    return PluginManager().load(only=[], disabled=[], strict=True)


@pytest.fixture
def temp_plugin() -> Iterator[Callable[..., object]]:
    """Register temporary plugins under known names; all are unregistered after the test.

    Usage: ``temp_plugin(pm, plugin_object, "test-name")``.
    """
    done: list[tuple[PluginManager, str]] = []

    def register(manager: PluginManager, plugin: object, name: str) -> object:
        manager.register(plugin, name=name)
        done.append((manager, name))
        return plugin

    yield register
    for manager, name in reversed(done):
        if manager.get_plugin(name) is not None:
            manager.unregister(name=name)


@pytest.fixture
def fail_next_commit() -> Callable[[object], None]:
    """``fail_next_commit(store)``: the SQLite store's next COMMIT fails once, as a
    full disk would make it; everything else goes to the real connection."""
    import sqlite3

    def arm(store) -> None:
        original = store._conn

        class FailingCommit:
            def __getattr__(self, name):
                return getattr(original, name)

            def execute(self, sql, *args):
                if sql == "COMMIT":
                    store._conn = original
                    raise sqlite3.OperationalError("database or disk is full")
                return original.execute(sql, *args)

        store._conn = FailingCommit()

    return arm


class FullDisk:
    """Every COMMIT of an SQLite store fails while ``full`` is set, as a full disk makes
    it (SQLite then rolls the transaction back, which the store does here)."""

    def __init__(self, store) -> None:
        import sqlite3

        self.full = True
        self.failed = 0
        original = store._conn
        disk = self

        class Connection:
            def __getattr__(self, name):
                return getattr(original, name)

            def execute(self, sql, *args):
                if sql == "COMMIT" and disk.full:
                    disk.failed += 1
                    raise sqlite3.OperationalError("database or disk is full")
                return original.execute(sql, *args)

        store._conn = Connection()


@pytest.fixture
def full_disk() -> Callable[[object], FullDisk]:
    """``disk = full_disk(store)``: the store's commits fail until ``disk.full = False``
    (a real full disk: tests/test_disk_full.py)."""
    return FullDisk


@pytest.fixture
def anyio_backend() -> str:
    """The kernel runs on asyncio (aiohttp needs it), so async tests do too."""
    return "asyncio"


@pytest.fixture
def browser():
    """A headless Chromium driven by selenium through Debian's chromedriver."""
    chromium = shutil.which("chromium")
    driver_path = shutil.which("chromedriver")
    if not (chromium and driver_path):
        pytest.fail("Chromium and ChromeDriver are needed: scripts/system-packages installs "
                    "Debian's chromium and chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    profile = tempfile.mkdtemp(prefix="chatkernel-chromium-")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def outbox_left_mid_send() -> Callable[[object], object]:
    """``entries = await outbox_left_mid_send(tmp_path)``: a state database as a gateway
    left it when it stopped mid-send: reply r1's first part ``sending``, its second
    ``pending``, reply r2 ``pending`` (all for ``memory:main:chat-9``)."""
    from chatkernel.sdk.models import OutboundPayload, Route
    from chatkernel.core.store.base import OutboxEntry
    from chatkernel.core.store.sqlite import SQLiteStore

    async def make(home) -> list[OutboxEntry]:
        store = SQLiteStore.at(home / "state.db")
        await store.open()
        route = Route("memory", "main", "chat-9")
        entries = [OutboxEntry(0, reply, "memory:main:chat-9", "s1", "memory", "main", route,
                               OutboundPayload(text=text, chunk_index=i, chunk_count=n),
                               "pending", None, 0.0)
                   for reply, text, i, n in [("r1", "was in flight", 1, 2),
                                              ("r1", "after the unknown one", 2, 2),
                                              ("r2", "never attempted", 1, 1)]]
        await store.outbox_add(entries)
        await store.outbox_mark(entries[0].id, "sending", durable=True)
        await store.close()
        return entries

    return make


@pytest.fixture
def disk(small_disk):
    """A 4 MiB file system of the test's own to fill (the kit's ``small_disk``)."""
    return small_disk


# -- one test on each store backend ---------------------------------------------------------


@pytest.fixture(params=["sqlite", "redis"])
def backend(request) -> str:
    """Each store backend in turn (Redis: the test session's redis-server)."""
    return request.param


@pytest.fixture
def new_store(backend, tmp_path, request):
    """Makes unopened stores of the backend, all on the same state (one database file,
    or one key prefix on the test session's redis-server)."""
    from chatkernel.core.store.redis import RedisStore
    from chatkernel.core.store.sqlite import SQLiteStore

    if backend == "sqlite":
        path = tmp_path / "state" / "state.db"
        return lambda **options: SQLiteStore.at(path, **options)
    url = request.getfixturevalue("redis_server")
    prefix = request.getfixturevalue("redis_prefix")
    return lambda **options: RedisStore.at(url, prefix=prefix, **options)


@pytest.fixture
async def any_store(new_store):
    """An opened store of each backend in turn, closed after the test."""
    store = new_store()
    await store.open()
    yield store
    await store.close()


# -- the gateway, run in this process ---------------------------------------------------------


class GatewayRun:
    """One run of the gateway in this process: ``async with GatewayRun(config) as base``,
    ``base`` its URL once it listens; it stops when the block ends (again for a restart)."""

    def __init__(self, config) -> None:
        self.config = config

    async def __aenter__(self) -> str:
        import anyio

        from chatkernel.testing.gateway import run_gateway

        self._tg = await anyio.create_task_group().__aenter__()
        ready, self.stop, where = anyio.Event(), anyio.Event(), {}

        def on_ready(listening):
            where["url"] = listening.url
            ready.set()

        self._tg.start_soon(lambda: run_gateway(self.config, on_ready=on_ready,
                                                stop=self.stop))
        with anyio.fail_after(10):
            await ready.wait()
        return where["url"]

    async def __aexit__(self, *exc_info) -> None:
        self.stop.set()
        await self._tg.__aexit__(*exc_info)


@pytest.fixture
def gateway_run():
    """:class:`GatewayRun`: ``async with gateway_run(config) as base``."""
    return GatewayRun
