"""``chatkernel doctor``: each check finds its problem in a config and home built to have
it, ``--fix`` fixes the fixable ones and lists each, the starter config passes, and
``--json`` has the documented shape."""

from __future__ import annotations

import email.utils
import json
import os
import shutil
import socket
import sqlite3
import stat

import pytest
from click.testing import CliRunner

from chatkernel.cli import cli
from chatkernel.core.health import doctor
from chatkernel.core.health.doctor import Check, clock_checks
from chatkernel.core.plugins import PluginManager
from chatkernel.sdk.models import ProbeResult
from chatkernel.testing.redis import RedisServer


def run(*args: str):
    """``chatkernel doctor ARGS --json``: (exit code, {id: check})."""
    result = CliRunner().invoke(cli, ["doctor", "--json", *args], catch_exceptions=False)
    answer = json.loads(result.output)
    assert set(answer) == {"ok", "checks"}
    for check in answer["checks"]:
        assert set(check) == {"id", "status", "message", "fix"}
        assert check["status"] in ("ok", "warn", "fail")
    assert answer["ok"] == (result.exit_code == 0)
    assert answer["ok"] == all(check["status"] != "fail" for check in answer["checks"])
    return result.exit_code, {check["id"]: check for check in answer["checks"]}


def failed(checks) -> list[str]:
    return sorted(key for key, check in checks.items() if check["status"] == "fail")


def write(home, text: str, mode: int = 0o600):
    path = home / "config.toml"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_the_starter_config_passes_offline(chatkernel_home):
    assert CliRunner().invoke(cli, ["config", "init"]).exit_code == 0
    code, checks = run("--offline")
    assert code == 0, failed(checks)
    assert {"python", "config.valid", "config.start", "store.disk", "listen",
            "security"} <= set(checks)
    assert not any(key.startswith("account.") for key in checks)  # offline: no probe
    text = CliRunner().invoke(cli, ["doctor", "--offline"])
    assert text.exit_code == 0 and "healthy: 0 failed" in text.output


def test_a_config_that_does_not_validate(chatkernel_home):
    write(chatkernel_home, "[gateway]\nlisten = \"127.0.0.1:8787\"\nlisen = 1\n")
    code, checks = run("--offline")
    assert code == 1 and failed(checks) == ["config.valid"]
    assert "lisen" in checks["config.valid"]["message"]


def test_an_unset_env_reference_is_named_with_the_keys_using_it(chatkernel_home,
                                                                 monkeypatch):
    monkeypatch.delenv("CK_DOCTOR_UNSET", raising=False)
    write(chatkernel_home, "[agent]\nkind = \"openai\"\nmodel = \"m\"\n"
                           "system_prompt = \"${CK_DOCTOR_UNSET}\"\n")
    code, checks = run("--offline")
    assert code == 1 and "config.env.CK_DOCTOR_UNSET" in failed(checks)
    assert "agent.system_prompt" in checks["config.env.CK_DOCTOR_UNSET"]["message"]
    monkeypatch.setenv("CK_DOCTOR_UNSET", "be brief")
    code, checks = run("--offline")
    assert code == 0, failed(checks)


def test_a_plugin_that_failed_to_load(chatkernel_home, monkeypatch):
    pm = PluginManager().load()
    pm.load_errors["broken"] = "ImportError: No module named 'nowhere'"
    monkeypatch.setattr("chatkernel.cli._plugin_manager", lambda: pm)
    code, checks = run("--offline")
    assert code == 1 and failed(checks) == ["plugin.broken"]
    assert "CHATKERNEL_DISABLE_PLUGINS=broken" in checks["plugin.broken"]["fix"]


def test_a_damaged_database_and_a_newer_schema(chatkernel_home):
    (chatkernel_home / "state.db").write_bytes(b"this is no database" * 400)
    code, checks = run("--offline")
    assert code == 1 and failed(checks) == ["store.integrity"]
    (chatkernel_home / "state.db").unlink()
    conn = sqlite3.connect(chatkernel_home / "state.db")
    conn.execute("PRAGMA user_version = 999")
    conn.close()
    code, checks = run("--offline")
    assert failed(checks) == ["store.schema"] and "999" in checks["store.schema"]["message"]


def _leave_a_wal(database) -> None:
    """A database with a write-ahead log left beside it (as a killed gateway leaves it):
    the log copied while a connection has it, put back once the connection closed."""
    conn = sqlite3.connect(database, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE t (x)")
    conn.executemany("INSERT INTO t VALUES (?)", [("x" * 1000,)] * 200)
    shutil.copy(f"{database}-wal", f"{database}-kept")
    conn.close()
    os.replace(f"{database}-kept", f"{database}-wal")


def test_a_big_wal_is_a_warning_and_fix_checkpoints_it(chatkernel_home, monkeypatch):
    database = chatkernel_home / "state.db"
    _leave_a_wal(database)
    monkeypatch.setattr(doctor, "WAL_WARN_BYTES", 1000)
    code, checks = run("--offline")
    assert checks["store.wal"]["status"] == "warn"
    assert "--fix" in checks["store.wal"]["fix"]
    code, checks = run("--offline", "--fix")
    assert checks["store.wal"]["status"] == "ok"
    assert "checkpointed" in checks["fixed"]["message"]
    assert os.path.getsize(f"{database}-wal") == 0
    assert sqlite3.connect(database).execute("SELECT count(*) FROM t").fetchone() == (200,)


def test_the_listen_address_held_by_another_program(chatkernel_home):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        write(chatkernel_home, f"[gateway]\nlisten = \"127.0.0.1:{port}\"\n")
        code, checks = run("--offline")
    assert code == 1 and failed(checks) == ["listen"]
    assert "gateway.listen" in checks["listen"]["fix"]


def test_the_audit_s_criticals_fail_and_fix_tightens_the_modes(chatkernel_home):
    old = os.umask(0o022)
    try:
        path = write(chatkernel_home, "[agent]\nkind = \"openai\"\nmodel = \"m\"\n"
                                      "api_key_env = \"K\"\n", mode=0o666)
        code, checks = run("--offline")
        assert code == 1 and failed(checks) == ["security.file-mode"]
        code, checks = run("--offline", "--fix")
        assert code == 0, failed(checks)
        assert "0666 -> 0600" in checks["fixed"]["message"]
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        os.umask(old)


def _probe(date: str | None) -> ProbeResult:
    return ProbeResult(ok=True, extra={"server_date": date} if date else {})


def test_the_clock_against_the_platform_s_date_header():
    now = 1_767_000_000.0
    at = lambda seconds: email.utils.formatdate(now + seconds, usegmt=True)  # noqa: E731
    assert clock_checks({"a:x": _probe(at(0)), "b:y": None}, now=now)[0].status == "ok"
    assert clock_checks({"a:x": _probe(at(-90))}, now=now)[0].status == "warn"
    [skewed] = clock_checks({"a:x": _probe(at(2)), "slack:w": _probe(at(400))}, now=now)
    assert skewed.status == "fail" and "slack:w" in skewed.message
    assert "5 minutes" in skewed.message and "ntp" in skewed.fix
    [unknown] = clock_checks({"a:x": _probe(None)}, now=now)
    assert unknown.status == "ok" and "not measured" in unknown.message


@pytest.mark.anyio
async def test_redis_persistence_and_reachability(tmp_path):
    with RedisServer() as server:
        checks = {check.id: check for check in await doctor.redis_checks(server.url, "p:")}
        assert checks["store.redis"].status == "ok"
        assert checks["store.redis.persistence"].status == "ok"  # the kit's: appendonly
        import redis.asyncio as aioredis

        client = aioredis.from_url(server.url)
        await client.config_set("appendonly", "no")
        await client.aclose()
        checks = {check.id: check for check in await doctor.redis_checks(server.url, "p:")}
        assert checks["store.redis.persistence"].status == "warn"
        assert "appendonly yes" in checks["store.redis.persistence"].fix
        url = server.url
    [gone] = await doctor.redis_checks(url, "p:")
    assert gone == Check("store.redis", "fail", gone.message, gone.fix)
    assert gone.status == "fail" and "cannot reach Redis" in gone.message


def test_an_account_whose_credentials_are_refused_fails(chatkernel_home):
    """A live probe (not --offline) that fails names the account."""
    checks = doctor.account_checks({"telegram:main": ProbeResult(
        ok=False, detail="token rejected", restartable=False), "webchat:default": None})
    assert [(c.id, c.status) for c in checks] == [("account.telegram:main", "fail"),
                                                  ("account.webchat:default", "warn")]
    assert "credentials" in checks[0].fix
