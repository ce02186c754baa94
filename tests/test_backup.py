"""``chatkernel backup`` / ``restore``: one archive (0600) with a manifest of checksums;
a backup taken under load restores to a gateway that answers every accepted message
once; a restore refuses a running gateway, a newer schema and a damaged archive, and
keeps what it replaces; a Redis store's keys go through DUMP and RESTORE."""

from __future__ import annotations

import collections
import concurrent.futures
import io
import json
import os
import sqlite3
import stat
import tarfile
import threading

import pytest
from click.testing import CliRunner

from chatkernel.cli import cli
from chatkernel.core.store import backup as backups
from chatkernel.testing.process import gateway_process, post_json


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def transcript(gateway, chat: str, want: int) -> list[dict]:
    return gateway.webchat_messages(chat, want, timeout=30)


def answers_in(gateway, chat: str, want: dict[str, int]) -> collections.Counter:
    """The bot's messages in ``chat`` by text, once each text of ``want`` is there as
    often as it says (or the transcript stopped growing for 30 s). Busy hints are bot
    messages too, so how many messages that takes is not known in advance."""
    messages = transcript(gateway, chat, 0)
    while True:
        answers = collections.Counter(m["text"] for m in messages if m["role"] == "bot")
        if all(answers[text] >= count for text, count in want.items()):
            return answers
        more = transcript(gateway, chat, len(messages) + 1)
        if len(more) == len(messages):
            return answers
        messages = more


@pytest.mark.slow
def test_a_backup_taken_under_load_restores_to_a_gateway_answering_each_message_once(
        tmp_path, monkeypatch):
    # Each message answered on its own, none dropped from a full lane, by an agent
    # taking a tenth of a second a turn: the backup finds messages accepted and not
    # answered yet.
    first = tmp_path / "first"
    first.mkdir()
    (first / "config.toml").write_text('[queue]\nmode = "followup"\ndebounce_ms = 0\n'
                                       'cap = 200\n\n[agent]\necho_typing_ms = 100\n')
    (first / ".env").write_text("SOME_TOKEN=abc\n")
    (first / ".env").chmod(0o600)  # the gateway refuses an env file others may read
    archive = tmp_path / "saved.tar.gz"
    chats = [f"load-{n}" for n in range(4)]
    with gateway_process(first) as gateway:
        taken = threading.Event()

        def post(n: int) -> None:
            status, _ = post_json(f"{gateway.url}/webchat/messages",
                                  {"chat_id": chats[n % 4], "user_id": "u", "text": f"m{n}"})
            assert status == 202
            if n == 60:
                taken.wait(30)  # the rest arrive after the backup was taken

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            posts = [pool.submit(post, n) for n in range(120)]
            while sum(f.done() for f in posts) < 40:
                concurrent.futures.wait(posts, return_when=concurrent.futures.FIRST_COMPLETED)
            monkeypatch.setenv("CHATKERNEL_HOME", str(first))
            result = invoke("backup", str(archive))
            taken.set()
            for future in posts:
                future.result()
        assert result.exit_code == 0, result.output
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
    assert {entry["name"] for entry in manifest["files"]} == {"state.db", "config.toml",
                                                               ".env"}
    assert manifest["store"]["backend"] == "sqlite" and manifest["kernel_version"]

    in_flight, answered_before = _backup_state(archive, tmp_path / "unpacked")
    second = tmp_path / "second"
    monkeypatch.setenv("CHATKERNEL_HOME", str(second))
    result = invoke("restore", str(archive))
    assert result.exit_code == 0, result.output
    assert (second / ".env").read_text() == "SOME_TOKEN=abc\n"
    assert stat.S_IMODE((second / ".env").stat().st_mode) == 0o600
    replayed = 0
    with gateway_process(second) as gateway:
        for chat in chats:
            # Every message the backup had accepted is answered exactly once (the echo
            # agent answers with the message's text), but for a reply that was being
            # sent at the moment of the backup: reported "delivery unknown", never sent
            # twice (docs/outbound.md).
            messages = transcript(gateway, chat, 0)
            asked = [m["text"] for m in messages if m["role"] == "user"]
            assert asked, chat
            want = {text: 0 if text in in_flight else 1 for text in asked}
            answers = answers_in(gateway, chat, want)
            assert {text: answers[text] for text in asked} == want
            replayed += sum(1 for text in asked if text not in answered_before
                            and want[text])
    assert replayed > 0  # some were unanswered in the backup, and went out after restore


@pytest.mark.slow
def test_restore_refuses_a_running_gateway_a_newer_schema_and_a_bad_checksum(
        chatkernel_home, tmp_path):
    assert invoke("config", "init").exit_code == 0
    _make_state(chatkernel_home / "state.db")
    archive = tmp_path / "b.tar.gz"
    assert invoke("backup", str(archive)).exit_code == 0

    with gateway_process(chatkernel_home):
        refused = invoke("restore", str(archive))
    assert refused.exit_code == 1 and "stop the gateway" in refused.output

    damaged = tmp_path / "damaged.tar.gz"
    _rewrite(archive, damaged, config=b"[gateway]\nlisten = \"0.0.0.0:1\"\n")
    refused = invoke("restore", str(damaged))
    assert refused.exit_code == 1 and "does not match its checksum" in refused.output

    newer = tmp_path / "newer.tar.gz"
    _rewrite(archive, newer, schema=999)
    refused = invoke("restore", str(newer))
    assert refused.exit_code == 1 and "schema version 999" in refused.output
    assert "upgrade chatkernel" in refused.output
    # Nothing was touched by the refusals.
    assert not list(chatkernel_home.glob("*.before-restore-*"))


def test_restore_keeps_what_it_replaces_and_puts_it_back_when_it_fails(
        chatkernel_home, tmp_path, monkeypatch):
    assert invoke("config", "init").exit_code == 0
    database = chatkernel_home / "state.db"
    conn = sqlite3.connect(database)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES ('saved')")
    conn.commit()
    conn.close()
    archive = tmp_path / "b.tar.gz"
    assert invoke("backup", str(archive)).exit_code == 0
    conn = sqlite3.connect(database)
    conn.execute("UPDATE t SET x = 'later'")
    conn.commit()
    conn.close()
    config_before = (chatkernel_home / "config.toml").read_text()

    def fail(*args):
        raise OSError("disk gone")

    monkeypatch.setattr(backups, "_copy", fail)
    monkeypatch.setattr(backups, "_same_device", lambda *args: False)
    failed = CliRunner().invoke(cli, ["restore", str(archive)])
    assert failed.exit_code != 0
    assert _value(database) == "later" and not list(chatkernel_home.glob("*before-restore*"))
    monkeypatch.undo()
    monkeypatch.setenv("CHATKERNEL_HOME", str(chatkernel_home))

    done = invoke("restore", str(archive))
    assert done.exit_code == 0, done.output
    assert _value(database) == "saved"
    [kept] = chatkernel_home.glob("state.db.before-restore-*")
    assert _value(kept) == "later" and f"kept the previous one as {kept}" in done.output
    assert (chatkernel_home / "config.toml").read_text() == config_before
    assert stat.S_IMODE(database.stat().st_mode) == 0o600


@pytest.mark.anyio
async def test_a_redis_store_s_keys_go_through_dump_and_restore(tmp_path, redis_server,
                                                                redis_prefix):
    import redis.asyncio as aioredis

    from chatkernel.core.config import parse

    config = parse({"store": {"backend": "redis", "url": redis_server,
                              "prefix": redis_prefix}})
    client = aioredis.from_url(redis_server)
    await client.hset(f"{redis_prefix}meta", "schema", 1)
    await client.set(f"{redis_prefix}j:seq", 7)
    await client.zadd(f"{redis_prefix}j:unfinished", {"3": 1.0})
    await client.set("someone-else:key", "theirs")
    archive = tmp_path / "r.tar.gz"
    config_path = tmp_path / "config.toml"
    manifest = await backups.create(config, config_path, tmp_path, archive)
    assert manifest["store"] == {"backend": "redis", "prefix": redis_prefix, "schema": 1,
                                 "keys": 3}
    await client.set(f"{redis_prefix}j:seq", 99)
    await client.set(f"{redis_prefix}later", "x")
    done = await backups.restore(archive, tmp_path, config_path,
                                 lambda _: (tmp_path / "state.db", redis_server))
    assert done.redis_keys == 3
    assert await client.get(f"{redis_prefix}j:seq") == b"7"
    assert await client.get(f"{redis_prefix}later") is None
    assert await client.zrange(f"{redis_prefix}j:unfinished", 0, -1) == [b"3"]
    assert await client.get("someone-else:key") == b"theirs"
    kept = [json.loads(line) for line in
            next(tmp_path.glob("redis.before-restore-*.jsonl")).read_text().splitlines()]
    assert len(kept) == 4  # what was there before, kept aside
    await client.delete("someone-else:key")
    await client.aclose()


def _rewrite(archive, target, *, config: bytes | None = None, schema: int | None = None):
    """A copy of ``archive`` with its config's bytes replaced (the checksum left as it
    was) or its manifest's schema changed."""
    with tarfile.open(archive) as source, tarfile.open(target, "w:gz") as out:
        for member in source.getmembers():
            data = source.extractfile(member).read()
            if member.name == "config.toml" and config is not None:
                data = config
            if member.name == "manifest.json" and schema is not None:
                manifest = json.loads(data)
                manifest["store"]["schema"] = schema
                data = json.dumps(manifest).encode()
            member.size = len(data)
            out.addfile(member, io.BytesIO(data))
    os.chmod(target, 0o600)


def _backup_state(archive, into) -> tuple[set[str], set[str]]:
    """From the archive's state database: the texts of the replies marked ``sending``
    (in flight at the backup) and of those already sent."""
    into.mkdir()
    backups.read(archive, into)
    conn = sqlite3.connect(into / "state.db")
    try:
        rows = conn.execute("SELECT status, payload FROM outbox").fetchall()
    finally:
        conn.close()
    texts = collections.defaultdict(set)
    for status, payload in rows:
        texts[status].add(json.loads(payload)["text"])
    return texts["sending"], texts["sent"]


def _make_state(database) -> None:
    """A state database as a gateway leaves it (migrated, closed)."""
    import anyio

    from chatkernel.core.store.sqlite import SQLiteStore

    async def make():
        async with SQLiteStore.at(database):
            pass

    anyio.run(make)


def _value(database) -> str:
    conn = sqlite3.connect(database)
    try:
        return conn.execute("SELECT x FROM t").fetchone()[0]
    finally:
        conn.close()
