"""The SQLite store backend and the choice of backend (``open_store``).

What every backend does is tested in test_store.py, on SQLite and Redis alike."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from chatkernel.core.config import ConfigError, KernelConfig, StoreConfig
from chatkernel.sdk.models import InboundMessage, OutboundPayload, Route
from chatkernel.core.store import (
    BACKENDS,
    SessionRecord,
    Store,
    open_store,
)
from chatkernel.core.store.sqlite import commit as sqlite_commit
from chatkernel.core.store.sqlite import schema as sqlite_schema
from chatkernel.sdk.codec import (
    encode_message,
    encode_payload,
    encode_route,
)
from chatkernel.core.store.sqlite import MIGRATIONS, SQLiteStore, StoreError
from chatkernel.testing.contract import wait_until

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "state" / "state.db"


@pytest.fixture
async def store(db_path):
    store = SQLiteStore.at(db_path)
    await store.open()
    yield store
    await store.close()


def msg(message_id: str = "m1", *, channel: str = "telegram", account: str = "main",
        **fields) -> InboundMessage:
    fields.setdefault("chat_id", "chat-1")
    fields.setdefault("sender_id", "user-1")
    return InboundMessage(channel=channel, account=account, message_id=message_id, **fields)


def session(key: str, last_active_at: float, **fields) -> SessionRecord:
    values = dict(key=key, session_id=f"{key}-s1", channel="telegram", account="main",
                  chat_id="chat-1", thread_id=None, created_at=1000.0,
                  last_active_at=last_active_at)
    values.update(fields)
    return SessionRecord(**values)


# -- opening, files, migrations -------------------------------------------------------------


@pytest.mark.anyio
async def test_fresh_database_is_migrated_with_wal_and_pragmas(store, db_path):
    assert store.name == "sqlite"
    assert isinstance(store, Store)
    assert store.schema_version == len(MIGRATIONS) >= 1
    db = store._db
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert db.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
    with sqlite3.connect(db_path) as other:
        assert other.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)


@pytest.mark.anyio
async def test_parent_directories_created_and_files_private(tmp_path):
    path = tmp_path / "a" / "b" / "state.db"
    store = SQLiteStore.at(path)
    await store.open()
    try:
        await store.journal_inbound(msg())
        for file in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    finally:
        await store.close()


@pytest.mark.anyio
async def test_existing_file_with_loose_mode_is_made_private(tmp_path):
    path = tmp_path / "state.db"
    sqlite3.connect(path).close()
    os.chmod(path, 0o644)
    async with SQLiteStore.at(path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.anyio
async def test_database_newer_than_the_code_is_refused(db_path):
    db_path.parent.mkdir(parents=True)
    with sqlite3.connect(db_path) as db:
        db.execute("CREATE TABLE future (x)")
        db.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    store = SQLiteStore.at(db_path)
    with pytest.raises(StoreError) as info:
        await store.open()
    text = str(info.value)
    assert str(db_path) in text
    assert f"schema version {len(MIGRATIONS) + 1}" in text
    assert "newer chatkernel" in text
    assert info.value.__cause__ is None and info.value.__context__ is None
    with sqlite3.connect(db_path) as db:  # untouched
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) + 1
        assert db.execute("SELECT name FROM sqlite_master WHERE name = 'sessions'").fetchone() \
            is None
    with pytest.raises(StoreError, match="not open"):
        await store.get_cursor("a", "b")


@pytest.mark.anyio
async def test_new_migration_upgrades_an_existing_database(db_path, monkeypatch):
    async with SQLiteStore.at(db_path) as store:
        await store.save_session(session("k", 5.0))
    monkeypatch.setattr(sqlite_schema, "MIGRATIONS", [
        *MIGRATIONS,
        "-- 2: a note per session\nALTER TABLE sessions ADD COLUMN note TEXT;\n"
        "CREATE INDEX sessions_note ON sessions (note);",
    ])
    async with SQLiteStore.at(db_path) as store:
        assert store.schema_version == len(MIGRATIONS) + 1
        columns = [row[1] for row in store._db.execute("PRAGMA table_info(sessions)")]
        assert "note" in columns
        assert (await store.get_session("k")).last_active_at == 5.0


def database_at_version(db_path: Path, version: int) -> sqlite3.Connection:
    """A database migrated by hand to ``version`` (as an older chatkernel left it)."""
    db_path.parent.mkdir(parents=True)
    db = sqlite3.connect(db_path, isolation_level=None)
    for script in MIGRATIONS[:version]:
        for statement in sqlite_schema._statements(script):
            db.execute(statement)
    db.execute(f"PRAGMA user_version = {version}")
    return db


@pytest.mark.anyio
async def test_migration_4_rebuilds_journal_and_outbox_keeping_rows_and_ids(db_path):
    db = database_at_version(db_path, 3)
    for n in range(1, 5):
        db.execute("INSERT INTO inbound_journal (channel, account, message_id, message, status,"
                   " received_at) VALUES ('telegram', 'main', ?, ?, ?, 1.0)",
                   (f"m{n}", encode_message(msg(f"m{n}")), "done" if n < 3 else "received"))
        db.execute("INSERT INTO outbox (reply_id, session_key, session_id, channel, account,"
                   " route, payload, status, created_at, updated_at)"
                   " VALUES ('r', 'k', 's', 'telegram', 'main', ?, ?, ?, 1.0, 1.0)",
                   (encode_route(Route("telegram", "main", "chat-1")),
                    encode_payload(OutboundPayload(text=f"t{n}")),
                    "sent" if n < 3 else "pending"))
    # the newest rows gone (pruned): the next ids must still not reuse theirs
    db.execute("DELETE FROM inbound_journal WHERE seq = 4")
    db.execute("DELETE FROM outbox WHERE id = 4")
    db.close()

    async with SQLiteStore.at(db_path) as store:
        assert store.schema_version == len(MIGRATIONS) >= 4
        assert [(e.seq, e.message.message_id) for e in await store.unfinished_inbound()] == \
            [(3, "m3")]
        assert await store.journal_inbound(msg("m5")) == 5
        assert await store.journal_inbound(msg("m1")) is None  # dedupe keys kept
        assert [(e.id, e.payload.text) for e in await store.outbox_unfinished()] == [(3, "t3")]
        (new,) = await store.outbox_add(outbox_entries(1))
        assert new == 5
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            store._db.execute("UPDATE outbox SET status = 'lost' WHERE id = 3")
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            store._db.execute("UPDATE inbound_journal SET status = 'lost' WHERE seq = 3")
        # what the migration is for: no temporary b-tree per row for the status CHECK
        for sql in (SQLiteStore._JOURNAL_INSERT,
                    "UPDATE outbox SET status = 'sent' WHERE id = 1"):
            ops = [row[1] for row in store._db.execute(
                "EXPLAIN " + sql, ("c", "a", "m", "{}", 1.0) if "?" in sql else ())]
            assert "OpenEphemeral" not in ops, sql
        indexes = {row[0] for row in store._db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")}
        assert {"inbound_journal_unfinished", "outbox_unfinished"} <= indexes
        tables = {row[0] for row in store._db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert not any(name.endswith("_v4") for name in tables)


@pytest.mark.anyio
async def test_migration_5_drops_the_queued_status_keeping_rows_ids_and_dedupe_keys(db_path):
    db = database_at_version(db_path, 4)
    statuses = ["done", "rejected", "queued", "received", "done", "done"]
    for n, status in enumerate(statuses, start=1):
        db.execute("INSERT INTO inbound_journal (channel, account, message_id, message, status,"
                   " received_at) VALUES ('telegram', 'main', ?, ?, ?, 1.0)",
                   (f"m{n}", encode_message(msg(f"m{n}")), status))
    db.execute("DELETE FROM inbound_journal WHERE seq = 6")  # the newest row pruned
    db.close()

    async with SQLiteStore.at(db_path) as store:
        assert store.schema_version == len(MIGRATIONS) >= 5
        # a row an older version left "queued" is unfinished still, now as "received"
        assert [(e.seq, e.message.message_id, e.status)
                for e in await store.unfinished_inbound()] == \
            [(3, "m3", "received"), (4, "m4", "received")]
        assert await store.journal_inbound(msg("m7")) == 7  # after the old high-water mark
        for n in range(1, 6):  # dedupe keys kept, finished or not
            assert await store.journal_inbound(msg(f"m{n}")) is None
        await store.flush()
        db = store._db
        assert [row[0] for row in db.execute(
            "SELECT status FROM inbound_journal ORDER BY seq")] == \
            ["done", "rejected", "received", "received", "done", "received"]
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            db.execute("UPDATE inbound_journal SET status = 'queued' WHERE seq = 3")
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            db.execute("INSERT INTO inbound_journal (channel, account, message_id, message,"
                       " status, received_at) VALUES ('c', 'a', 'x', '{}', 'queued', 1.0)")
        with pytest.raises(ValueError, match="journal status"):
            await store.set_journal_status(3, "queued")
        # no temporary b-tree per row for the status CHECK, as after migration 4
        for sql, params in ((SQLiteStore._JOURNAL_INSERT, ("c", "a", "m", "{}", 1.0)),
                            ("UPDATE inbound_journal SET status = ? WHERE seq = ?",
                             ("done", 3))):
            ops = [row[1] for row in db.execute("EXPLAIN " + sql, params)]
            assert "OpenEphemeral" not in ops, sql
        # the partial index of unfinished rows is back, and recovery reads through it
        (index_sql,) = db.execute("SELECT sql FROM sqlite_master"
                                  " WHERE name = 'inbound_journal_unfinished'").fetchone()
        assert index_sql.endswith("WHERE status = 'received'")
        plan = " ".join(row[-1] for row in db.execute(
            "EXPLAIN QUERY PLAN SELECT seq, message, status, received_at FROM inbound_journal"
            " WHERE status = 'received' ORDER BY seq"))
        assert "inbound_journal_unfinished" in plan
        tables = {row[0] for row in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert not any(name.endswith("_v5") for name in tables)


@pytest.mark.anyio
async def test_failed_migration_rolls_back_entirely(db_path, monkeypatch):
    async with SQLiteStore.at(db_path):
        pass
    monkeypatch.setattr(sqlite_schema, "MIGRATIONS", [
        *MIGRATIONS, "CREATE TABLE half_done (x);\nINSERT INTO nowhere VALUES (1);",
    ])
    with pytest.raises(StoreError, match=f"schema migration {len(MIGRATIONS) + 1} failed"):
        await SQLiteStore.at(db_path).open()
    with sqlite3.connect(db_path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        assert db.execute(
            "SELECT name FROM sqlite_master WHERE name = 'half_done'").fetchone() is None


@pytest.mark.anyio
async def test_a_file_that_is_not_a_database_fails_clearly(tmp_path):
    path = tmp_path / "state.db"
    path.write_bytes(b"this is not sqlite, just a text file that happens to be here\n" * 20)
    with pytest.raises(StoreError, match="cannot open the state database"):
        await SQLiteStore.at(path).open()


@pytest.mark.anyio
async def test_uncreatable_location_fails_clearly(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError, match="cannot create the state database"):
        await SQLiteStore.at(blocker / "sub" / "state.db").open()

def test_constructor_needs_a_config_or_a_path():
    with pytest.raises(TypeError):
        SQLiteStore()
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteStore.at(":memory:", synchronous="sometimes")


@pytest.mark.anyio
async def test_synchronous_full_option(db_path):
    async with SQLiteStore.at(db_path, synchronous="full") as store:
        assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 2


@pytest.mark.anyio
async def test_in_memory_store():
    async with SQLiteStore.at(":memory:") as store:
        assert await store.journal_inbound(msg()) == 1
        assert store.schema_version == len(MIGRATIONS)


# -- inbound journal ---------------------------------------------------------------------------


# -- a real crash --------------------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import os, sys, time
    import anyio
    from chatkernel.sdk.models import InboundMessage
    from chatkernel.core.store.sqlite import SQLiteStore

    path, count, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]

    async def main():
        store = SQLiteStore.at(path)
        await store.open()
        for i in range(count):
            seq = await store.journal_inbound(InboundMessage(
                "telegram", "main", "chat-1", f"m{i}", "user-1", text=f"message {i}"))
            if i == 0:
                await store.set_journal_status(seq, "rejected")
            if mode == "stream":
                print(f"m{i}", flush=True)
        print("journaled", flush=True)
        if mode == "exit":
            os._exit(1)  # no close, no atexit, no flush of anything
        time.sleep(60)  # real time: the parent kills us

    anyio.run(main)
""")


def run_child(path: Path, count: int, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(count), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO)


async def assert_all_journaled(path: Path, ids: list[str]) -> None:
    async with SQLiteStore.at(path) as store:
        assert store._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        entries = await store.unfinished_inbound()
        found = {e.message.message_id: e for e in entries}
        assert set(ids) - {"m0"} <= set(found)
        assert "m0" not in found  # its status change survived too
        assert found[ids[-1]].message.text == f"message {ids[-1][1:]}"
        for message_id in ids:  # redeliveries after the restart are recognized
            assert await store.journal_inbound(msg(message_id, chat_id="chat-1",
                                                   sender_id="user-1")) is None


@pytest.mark.slow
@pytest.mark.anyio
async def test_crash_with_os_exit_loses_nothing_journaled(db_path):
    count = 200
    child = run_child(db_path, count, "exit")
    out, err = child.communicate(timeout=60)
    assert child.returncode == 1, err
    assert out.splitlines() == ["journaled"], err
    assert Path(f"{db_path}-wal").exists()  # no clean close: the data is in the WAL
    await assert_all_journaled(db_path, [f"m{i}" for i in range(count)])


@pytest.mark.slow
@pytest.mark.anyio
async def test_sigkill_after_journaling_loses_nothing(db_path):
    count = 200
    child = run_child(db_path, count, "wait")
    try:
        line = child.stdout.readline()
        assert line == "journaled\n", child.stderr.read() if not line else line
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL
    await assert_all_journaled(db_path, [f"m{i}" for i in range(count)])


@pytest.mark.slow
@pytest.mark.anyio
async def test_sigkill_mid_stream_loses_no_acknowledged_message(db_path):
    """Killed while writing: every message whose journal_inbound returned is there."""
    child = run_child(db_path, 1_000_000, "stream")
    acknowledged: list[str] = []
    try:
        while len(acknowledged) < 500:
            line = child.stdout.readline()
            assert line, child.stderr.read()
            acknowledged.append(line.strip())
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL
    await assert_all_journaled(db_path, acknowledged)


# -- cursors -------------------------------------------------------------------------------------


# -- sessions and routes ---------------------------------------------------------------------------


# -- account state -----------------------------------------------------------------------------


# -- session logs --------------------------------------------------------------------------------


# -- open_store ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_open_store_picks_sqlite_by_name(tmp_path):
    assert "sqlite" in BACKENDS
    config = KernelConfig(store=StoreConfig(backend="sqlite", path=tmp_path / "x" / "s.db"))
    store = open_store(config)
    assert isinstance(store, SQLiteStore) and store.name == "sqlite"
    assert store.path == tmp_path / "x" / "s.db"
    assert not store.path.exists()  # built, not opened: the caller opens it
    await store.open()
    try:
        assert await store.journal_inbound(msg()) == 1
    finally:
        await store.close()


def test_open_store_default_path_is_in_the_home(chatkernel_home):
    store = open_store(KernelConfig())
    assert isinstance(store, SQLiteStore)
    assert store.path == chatkernel_home / "state.db"


def test_open_store_unknown_backend_fails_clearly():
    # A config read from a file cannot name one (StoreConfig refuses it); one built
    # in code without validation still gets a clear error.
    with pytest.raises(ConfigError) as info:
        open_store(KernelConfig(store=StoreConfig.model_construct(backend="postgres")))
    error = info.value
    assert error.key == "store.backend"
    assert "store.backend" in str(error)
    assert "'postgres'" in str(error) and "redis, sqlite" in str(error)
    assert error.__cause__ is None and error.__context__ is None

    file = Path("/etc/chatkernel/config.toml")
    with pytest.raises(ConfigError) as info:
        open_store(KernelConfig(store=StoreConfig.model_construct(backend="postgres")),
                   config_path=file)
    assert info.value.path == file and str(info.value).startswith(f"{file}: store.backend: ")


def test_open_store_backend_that_fails_to_load(monkeypatch):
    def broken(self, config):
        raise RuntimeError("no driver for you")

    monkeypatch.setattr(SQLiteStore, "__init__", broken)
    with pytest.raises(ConfigError, match="'sqlite' failed to load: RuntimeError: no driver") \
            as info:
        open_store(KernelConfig())
    assert info.value.key == "store.backend"
    assert info.value.__suppress_context__


# -- group commit ----------------------------------------------------------------------------------

@pytest.mark.anyio
async def test_a_lone_writer_is_committed_on_the_next_loop_turn(store, monkeypatch):
    # One webhook request at a time: waiting for company that is not coming would add
    # the interval to every answer (the interval here would hold the test an hour).
    monkeypatch.setattr(sqlite_commit, "COMMIT_INTERVAL", 3600.0)
    with anyio.fail_after(30):
        for name in ("first", "second", "third"):
            await store.journal_inbound(msg(name))
    assert store.commits == 3


@pytest.mark.anyio
async def test_a_webhook_request_alone_commits_at_once_and_requests_together_share(
        store, monkeypatch):
    # Alone (nothing under way, the last commit carried one message): committed before
    # the call returns, without waiting a loop turn for company.
    assert await store.journal_inbound_shared([msg("alone")]) == [1]
    assert store.commits == 1 and not store._commit_scheduled
    # Together (in one turn of the loop): the first commits at once, the others see it
    # came with company and share one commit.
    async with anyio.create_task_group() as tg:
        for name in ("second", "third", "fourth"):
            tg.start_soon(store.journal_inbound_shared, [msg(name)])
    assert store.commits == 3
    # Right after a commit several shared, a request waits for the group commit too
    # (held back here for an hour, so the test sees it waiting however slow it runs).
    monkeypatch.setattr(sqlite_commit, "COMMIT_INTERVAL", 3600.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(store.journal_inbound_shared, [msg("next")])
        await wait_until(lambda: store._journal_waiters, timeout=5,
                         what="the request waiting for the group commit", interval=0.001)
        assert store.commits == 3 and isinstance(store._commit_handle, asyncio.TimerHandle)
        tg.cancel_scope.cancel()  # the store's close commits it


@pytest.mark.anyio
async def test_messages_that_come_together_wait_the_interval_for_more(store, monkeypatch):
    monkeypatch.setattr(sqlite_commit, "COMMIT_INTERVAL", 3600.0)
    async with anyio.create_task_group() as tg:  # two messages share one commit
        tg.start_soon(store.journal_inbound, msg("a"))
        tg.start_soon(store.journal_inbound, msg("b"))
    assert store.commits == 1
    async with anyio.create_task_group() as tg:
        tg.start_soon(store.journal_inbound, msg("c"))
        await wait_until(lambda: store._journal_waiters, timeout=5,
                         what="the next writer waiting", interval=0.001)
        # Its commit is put off by the interval, for more writers to share it.
        assert isinstance(store._commit_handle, asyncio.TimerHandle)
        assert store.commits == 1
        tg.cancel_scope.cancel()  # the store's close commits it


@pytest.mark.anyio
async def test_a_cancelled_writer_does_not_cancel_the_commit_others_wait_for(
        store, db_path, monkeypatch):
    monkeypatch.setattr(sqlite_commit, "COMMIT_INTERVAL", 0.2)
    # As after a commit several messages shared: the next one waits 0.2 s for company.
    store._last_commit, store._last_shared = asyncio.get_running_loop().time(), True
    results = {}

    async def journal(name: str) -> None:
        results[name] = await store.journal_inbound(msg(name))

    doomed = anyio.CancelScope()
    gave_up = anyio.Event()

    async def cancelled() -> None:
        with doomed:
            await journal("cancelled")
        gave_up.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(journal, "kept")
        tg.start_soon(cancelled)
        await wait_until(lambda: len(store._journal_waiters) == 2, timeout=5,
                         what="both waiting for the same commit", interval=0.001)
        doomed.cancel()
        await gave_up.wait()
        assert "cancelled" not in results and "kept" not in results
    assert results["kept"] is not None
    # The shared commit happened all the same: both rows are in the file.
    with sqlite3.connect(db_path) as other:
        rows = other.execute("SELECT message_id FROM inbound_journal ORDER BY seq").fetchall()
    assert rows == [("kept",), ("cancelled",)]


@pytest.mark.anyio
async def test_a_failed_commit_is_raised_to_every_waiter(store, fail_next_commit):
    async def journal(name: str):
        try:
            return await store.journal_inbound(msg(name))
        except StoreError as exc:
            return exc

    fail_next_commit(store)
    async with anyio.create_task_group() as tg:
        outcomes = []

        async def run(name):
            outcomes.append(await journal(name))

        tg.start_soon(run, "a")
        tg.start_soon(run, "b")
    assert len(outcomes) == 2
    assert all(isinstance(o, StoreError) and "disk is full" in str(o) for o in outcomes)
    assert await store.unfinished_inbound() == []  # rolled back: nothing half-written


@pytest.mark.anyio
async def test_after_commit_callbacks_run_once_the_writes_are_committed(store, db_path):
    told: list[object] = []
    store.after_commit(told.append)  # nothing waits for a commit: at once
    assert told == [None]
    await store.outbox_add(outbox_entries(1))
    store.after_commit(lambda error: told.append((error, file_statuses(db_path, "outbox",
                                                                         "id"))))
    assert len(told) == 1  # not yet: the row is not committed
    await store.flush()
    assert told[1] == (None, {1: "pending"})  # called after the COMMIT: the row is there


@pytest.mark.anyio
async def test_after_commit_callbacks_wait_for_a_failed_commit_tried_again(store, db_path,
                                                                          fail_next_commit):
    await store.outbox_add(outbox_entries(1))
    told: list[object] = []
    store.after_commit(lambda error: told.append((error, file_statuses(db_path, "outbox",
                                                                         "id"))))
    commits: list[object] = []
    store.on_commit = commits.append
    fail_next_commit(store)
    await store.flush()  # through the failed commit and the next, which goes through
    assert len(commits) == 2 and isinstance(commits[0], StoreError) and commits[1] is None
    assert told == [(None, {1: "pending"})]  # once, when the row is in the file


@pytest.mark.anyio
async def test_a_failed_commit_keeps_every_write_it_carried(store, db_path, fail_next_commit):
    # Every write but a journal entry goes in the commit tried again: the marks, a
    # `sent` above all (lost, its row would read "delivery unknown" after a restart).
    entries = outbox_entries(2)
    await store.outbox_add(entries)
    await store.outbox_mark(entries[0].id, "sending", durable=True)
    await store.outbox_mark(entries[0].id, "sent")
    await store.outbox_reply("r1")  # a read writes the coalesced marks into the transaction
    await store.outbox_mark(entries[1].id, "sending")
    await store.set_cursor("telegram", "main", "7")
    fail_next_commit(store)
    await store.flush()
    assert file_statuses(db_path, "outbox", "id") == {1: "sent", 2: "sending"}
    assert await store.get_cursor("telegram", "main") == "7"


@pytest.mark.anyio
async def test_rows_a_failed_commit_carried_keep_their_ids_and_are_committed(
        store, db_path, fail_next_commit):
    entries = outbox_entries(2)
    await store.outbox_add(entries[:1])
    fail_next_commit(store)
    # Its insert's commit fails and is tried again: the durable mark returns once the
    # row and the mark are both committed.
    await store.outbox_mark(entries[0].id, "sending", durable=True)
    assert file_statuses(db_path, "outbox", "id") == {entries[0].id: "sending"}
    await store.outbox_add(entries[1:])
    fail_next_commit(store)
    await store.outbox_mark(entries[1].id, "sending", durable=True)
    assert entries[1].id == entries[0].id + 1  # no id handed out twice, none skipped
    assert [e.status for e in await store.outbox_reply("r1")] == ["sending", "sending"]


@pytest.mark.anyio
async def test_a_failed_commit_drops_its_journal_entries_and_keeps_the_rest(
        store, db_path, fail_next_commit):
    first = await store.journal_inbound(msg("m1"))
    entries = outbox_entries(1)
    await store.outbox_add(entries, finish_journal=[first])
    fail_next_commit(store)
    # m2 comes in the same commit: refused (not acknowledged, sent again by its
    # platform); the reply and m1's `done` are tried again.
    with pytest.raises(StoreError, match="disk is full"):
        await store.journal_inbound(msg("m2"))
    await store.flush()
    assert file_statuses(db_path, "inbound_journal", "message_id") == {"m1": "done"}
    assert file_statuses(db_path, "outbox", "id") == {entries[0].id: "pending"}
    assert await store.journal_inbound(msg("m2")) is not None  # sent again: journaled


# -- coalesced sent / done marks ------------------------------------------------------------


def outbox_entries(count: int, reply: str = "r1") -> list:
    from chatkernel.sdk.models import OutboundPayload
    from chatkernel.core.store.base import OutboxEntry

    route = Route("telegram", "main", "chat-1")
    return [OutboxEntry(0, reply, "telegram:main:chat-1", "s1", "telegram", "main", route,
                        OutboundPayload(text=f"part {i}"), "pending", None, 0.0)
            for i in range(count)]


def file_statuses(db_path, table: str, key: str) -> dict[int, str]:
    """What another connection reads: committed rows only."""
    with sqlite3.connect(db_path) as conn:
        return dict(conn.execute(f"SELECT {key}, status FROM {table}").fetchall())


@pytest.mark.anyio
async def test_sent_and_done_marks_share_one_statement_per_table_and_one_commit(store, db_path):
    seqs = [await store.journal_inbound(msg(f"m{i}")) for i in range(5)]
    entries = outbox_entries(5)
    ids = await store.outbox_add(entries, finish_journal=seqs)
    await store.flush()
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    for entry_id in ids:
        await store.outbox_mark(entry_id, "sent")
    for seq in seqs:  # a later reply finishing the same entries again changes nothing
        await store.outbox_add([], finish_journal=[seq])
    assert statements == []  # nothing written yet: the marks wait for the commit
    await store.flush()
    store._db.set_trace_callback(None)
    updates = [sql for sql in statements if sql.startswith("UPDATE")]
    assert len(updates) == 2, updates
    assert file_statuses(db_path, "outbox", "id") == {i: "sent" for i in ids}
    assert file_statuses(db_path, "inbound_journal", "seq") == {s: "done" for s in seqs}


@pytest.mark.anyio
async def test_durable_sending_marks_share_a_statement_and_are_committed_on_return(
        store, db_path):
    ids = await store.outbox_add(outbox_entries(3))
    await store.flush()
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    returned: list[dict[int, str]] = []

    async def mark(entry_id: int) -> None:
        await store.outbox_mark(entry_id, "sending", durable=True)
        returned.append(file_statuses(db_path, "outbox", "id"))

    async with anyio.create_task_group() as tg:
        for entry_id in ids:  # three senders at once
            tg.start_soon(mark, entry_id)
    store._db.set_trace_callback(None)
    # Each returned only once another connection could read its mark.
    assert returned == [{i: "sending" for i in ids}] * 3
    assert len([sql for sql in statements if sql.startswith("UPDATE")]) == 1


@pytest.mark.anyio
async def test_done_marks_commit_with_their_reply_and_reads_see_every_mark(store, db_path):
    seq = await store.journal_inbound(msg("m1"))
    (entry_id,) = await store.outbox_add(outbox_entries(1), finish_journal=[seq])
    # Not committed yet: another connection sees neither the reply nor the mark.
    assert file_statuses(db_path, "outbox", "id") == {}
    assert file_statuses(db_path, "inbound_journal", "seq") == {seq: "received"}
    # This connection's own reads see both at once.
    assert await store.unfinished_inbound() == []
    assert [e.id for e in await store.outbox_unfinished()] == [entry_id]
    await store.outbox_mark(entry_id, "sent")
    assert await store.outbox_unfinished() == []
    assert [e.status for e in await store.outbox_reply("r1")] == ["sent"]
    await store.flush()
    assert file_statuses(db_path, "outbox", "id") == {entry_id: "sent"}
    assert file_statuses(db_path, "inbound_journal", "seq") == {seq: "done"}


@pytest.mark.anyio
async def test_a_later_explicit_status_wins_over_a_coalesced_mark(store):
    seq = await store.journal_inbound(msg("m1"))
    (entry_id,) = await store.outbox_add(outbox_entries(1), finish_journal=[seq])
    await store.outbox_mark(entry_id, "sent")
    await store.outbox_mark(entry_id, "unknown", "in flight when the gateway stopped")
    await store.set_journal_status(seq, "rejected")
    await store.flush()
    assert [(e.status, e.error) for e in await store.outbox_reply("r1")] == [
        ("unknown", "in flight when the gateway stopped")]
    rows = store._db.execute("SELECT status FROM inbound_journal").fetchall()
    assert rows == [("rejected",)]


@pytest.mark.anyio
async def test_closing_writes_the_pending_marks(db_path):
    async with SQLiteStore.at(db_path) as store:
        seqs = [await store.journal_inbound(msg(f"m{i}")) for i in range(70)]
        ids = await store.outbox_add(outbox_entries(70), finish_journal=seqs)
        for entry_id in ids:  # more than one statement's worth
            await store.outbox_mark(entry_id, "sent")
    assert set(file_statuses(db_path, "outbox", "id").values()) == {"sent"}
    assert set(file_statuses(db_path, "inbound_journal", "seq").values()) == {"done"}
    async with SQLiteStore.at(db_path) as store:
        assert await store.unfinished_inbound() == []
        assert await store.outbox_unfinished() == []


@pytest.mark.anyio
async def test_marks_on_a_closed_store_are_refused_at_once(db_path):
    store = SQLiteStore.at(db_path)
    await store.open()
    (entry_id,) = await store.outbox_add(outbox_entries(1))
    await store.close()
    with pytest.raises(StoreError, match="not open"):
        await store.outbox_mark(entry_id, "sent")


# -- read-only opening and account activity (chatkernel status) --------------------------------


@pytest.mark.anyio
async def test_read_only_open_creates_and_changes_nothing(db_path):
    missing = SQLiteStore.at(db_path, read_only=True)
    with pytest.raises(StoreError, match="no state database yet"):
        await missing.open()
    assert not db_path.parent.exists()
    async with SQLiteStore.at(db_path) as writer:
        await writer.journal_inbound(msg("m1"))
    files = {p.name: p.stat().st_mtime_ns for p in db_path.parent.iterdir()}
    async with SQLiteStore.at(db_path, read_only=True) as reader:
        assert [e.message.message_id for e in await reader.unfinished_inbound()] == ["m1"]
        with pytest.raises(sqlite3.OperationalError):
            await reader.journal_inbound(msg("m2"))
    assert {p.name: p.stat().st_mtime_ns for p in db_path.parent.iterdir()} == files
    # an older schema is left for the gateway to migrate
    conn = sqlite3.connect(db_path)
    conn.execute("PRAGMA user_version = 0")
    conn.close()
    with pytest.raises(StoreError, match="migrates it"):
        await SQLiteStore.at(db_path, read_only=True).open()


def journal_in_database_file(db_path) -> int:
    """Rows of the journal in the database file itself, the WAL ignored (immutable)."""
    conn = sqlite3.connect(f"file:{db_path}?immutable=1", uri=True)
    try:
        return conn.execute("SELECT count(*) FROM inbound_journal").fetchone()[0]
    finally:
        conn.close()


@pytest.mark.anyio
async def test_the_wal_is_checkpointed_from_a_thread_not_inside_a_commit(store, db_path):
    assert store._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    for n in range(50):
        await store.journal_inbound(msg(f"m{n}"))
    await store.checkpoint()  # the one those commits started has ended
    store._last_checkpoint = -float("inf")  # due: the next commit starts one
    await store.journal_inbound(msg("due"))
    assert store._last_checkpoint > -float("inf")  # that commit started one, aside
    await store.checkpoint()
    assert journal_in_database_file(db_path) == 51
    await store.journal_inbound(msg("after"))
    await store.checkpoint()  # on demand too
    assert journal_in_database_file(db_path) == 52

