"""``chatkernel doctor`` against the channels' fakes and a real gateway: a webhook's public
URL is checked from this machine against the running gateway's mark; what a channel's
probe finds (Slack's missing scopes, WeChat's token age and expired session) is reported,
probed here or through the running gateway."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from chatkernel.cli import cli
from chatkernel.core.health.doctor import GATEWAY_HEADER
from chatkernel.testing import free_port
from chatkernel.testing.process import devserver, gateway_process


def doctor(*args: str) -> tuple[int, dict[str, dict]]:
    """``chatkernel doctor --json ARGS`` in this process: (exit code, {id: check})."""
    result = CliRunner().invoke(cli, ["doctor", "--json", *args], catch_exceptions=False)
    answer = json.loads(result.output)
    assert answer["ok"] == (result.exit_code == 0)
    return result.exit_code, {check["id"]: check for check in answer["checks"]}


def write_config(home: Path, text: str) -> None:
    path = home / "config.toml"
    path.write_text(text)
    path.chmod(0o600)


def telegram_webhook(fake: dict, port: int, url: str) -> str:
    return (f'[gateway]\nlisten = "127.0.0.1:{port}"\n\n'
            f'[channels.telegram.accounts.main]\napi_base = "{fake["base_url"]}"\n'
            f'bot_token = "{fake["token"]}"\nallow_from = ["42"]\nmode = "webhook"\n'
            f'webhook_url = "{url}"\n')


@pytest.mark.slow
def test_the_webhook_url_reaches_this_gateway_or_fails_saying_why(chatkernel_home):
    port = free_port()
    own = f"http://127.0.0.1:{port}/telegram/main/webhook"
    with devserver("chatkernel_telegram.devserver") as fake:
        write_config(chatkernel_home, telegram_webhook(fake, port, own))
        code, checks = doctor()
        no_gateway = checks["webhook.telegram:main.url"]
        assert no_gateway["status"] == "warn" and "no gateway runs" in no_gateway["message"]
        assert "chatkernel run" in no_gateway["fix"]

        with gateway_process(chatkernel_home, "--listen", f"127.0.0.1:{port}") as gateway:
            with urllib.request.urlopen(f"{gateway.url}/healthz", timeout=10) as answer:
                assert answer.headers[GATEWAY_HEADER]  # every answer carries the mark
            code, checks = doctor()
            reached = checks["webhook.telegram:main.url"]
            assert reached["status"] == "ok", checks
            assert reached["message"] == f"telegram:main: {own} reaches this gateway"
            assert code == 0, [c for c in checks.values() if c["status"] == "fail"]

            # The public URL leads where nothing listens (a tunnel that is down).
            closed = f"http://127.0.0.1:{free_port()}/telegram/main/webhook"
            write_config(chatkernel_home, telegram_webhook(fake, port, closed))
            code, checks = doctor()
            refused = checks["webhook.telegram:main.url"]
            assert code == 1 and refused["status"] == "fail"
            assert f"{closed}: cannot connect: Connection refused" in refused["message"]
            assert gateway.url in refused["fix"]
            assert "channels.telegram.accounts.main.webhook_url" in refused["fix"]

            # The public URL reaches another HTTP server (a proxy pointing elsewhere).
            elsewhere = f"{fake['base_url']}/telegram/main/webhook"
            write_config(chatkernel_home, telegram_webhook(fake, port, elsewhere))
            code, checks = doctor()
            other = checks["webhook.telegram:main.url"]
            assert code == 1 and other["status"] == "fail"
            assert "answers, but not from this gateway (a proxy pointing elsewhere?): " \
                   "HTTP 404" in other["message"]
            assert f"at this gateway's address, {gateway.url}" in other["fix"]

        code, checks = doctor("--offline")
        assert "webhook.telegram:main.url" not in checks  # offline: no request


async def set_credentials_time(home: Path, at: float) -> None:
    """The login time ``chatkernel login`` notes, as it notes it (the state database)."""
    from chatkernel.core import config as cfg
    from chatkernel.core.store import open_store
    from chatkernel.sdk.context import CREDENTIALS_KEY

    config = cfg.parse(cfg.read_raw(home / "config.toml"), strict_env=False)
    store = open_store(config, config_path=home / "config.toml")
    await store.open()
    try:
        await store.set_account_state("wechat", "main", CREDENTIALS_KEY, at)
    finally:
        await store.close()


@pytest.mark.slow
def test_a_probe_s_findings_come_through_the_running_gateway(chatkernel_home):
    with devserver("chatkernel_wechat.devserver") as fake:
        write_config(chatkernel_home, (
            f'[channels.wechat.accounts.main]\nbot_token = "{fake["token"]}"\n'
            f'api_base = "{fake["base_url"]}"\ncdn_base = "{fake["cdn_base"]}"\n'
            'allow_from = ["*"]\n'))
        anyio.run(set_credentials_time, chatkernel_home, time.time() - 27 * 86400)
        with gateway_process(chatkernel_home):
            code, checks = doctor()
            assert checks["account.wechat:main"]["status"] == "ok"
            aged = checks["account.wechat:main.token"]
            assert aged["status"] == "warn" and "27 days old" in aged["message"]
            assert aged["fix"] == "chatkernel login wechat, then restart the gateway"

            request = urllib.request.Request(f"{fake['base_url']}/_fake/expire", data=b"{}",
                                             headers={"Content-Type": "application/json"})
            urllib.request.urlopen(request, timeout=10).close()  # iLink ends the session
            code, checks = doctor()
            assert code == 1
            expired = checks["account.wechat:main.token"]
            assert expired["status"] == "fail"
            assert "session expired (iLink ret=-14)" in expired["message"]
            assert expired["fix"] == "chatkernel login wechat, then restart the gateway"


@pytest.mark.anyio
async def test_a_slack_token_s_missing_scopes_fail_the_report(chatkernel_home):
    from chatkernel_slack.fake import FakeSlack

    async with FakeSlack() as slack:
        slack.app.scopes.discard("chat:write")
        slack.app.scopes.discard("files:read")
        write_config(chatkernel_home, (
            f'[channels.slack.accounts.main]\nbot_token = "{slack.bot_token}"\n'
            f'app_token = "{slack.app_token}"\napi_base = "{slack.base_url}/api/"\n'
            'allow_from = ["*"]\n'))
        code, checks = await anyio.to_thread.run_sync(doctor)
    assert code == 1
    assert checks["account.slack:main"]["status"] == "ok"  # auth.test passed
    post = checks["account.slack:main.scope.chat:write"]
    assert post["status"] == "fail" and "lacks the chat:write scope" in post["message"]
    assert "OAuth & Permissions" in post["fix"] and "reinstall" in post["fix"]
    assert checks["account.slack:main.scope.files:read"]["status"] == "warn"
    assert checks["account.slack:main.scope.connections:write"]["status"] == "ok"
    assert checks["clock"]["message"].startswith("clock within")  # Slack's Date header


def test_a_public_url_that_gets_no_http_answer_fails_saying_why():
    """Not HTTP on the other end, or no URL urllib can request: a failed check, never a
    crash of the report."""
    import http.server
    import socket
    import threading

    from chatkernel.core.gateway_state import GatewayInfo
    from chatkernel.core.health.doctor import PublicURL, webhook_url_checks

    class Gateway(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(404)
            self.send_header(GATEWAY_HEADER, "m4rk")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Gateway) as gateway, \
            socket.create_server(("127.0.0.1", 0)) as garbage:
        threading.Thread(target=gateway.serve_forever, daemon=True).start()

        def answer_garbage():
            conn, _ = garbage.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"SSH-2.0-OpenSSH\r\n\r\n")

        threading.Thread(target=answer_garbage, daemon=True).start()
        info = GatewayInfo(0, f"http://127.0.0.1:{gateway.server_port}", "t", 0.0)
        urls = [PublicURL("x:a", f"http://127.0.0.1:{garbage.getsockname()[1]}/w"),
                PublicURL("x:b", "nowhere/w", "channels.x.accounts.b.webhook_url"),
                PublicURL("x:c", f"{info.url}/x/c/webhook")]
        checks = {check.id: check for check in webhook_url_checks(urls, info, timeout=5)}
        gateway.shutdown()
    assert checks["webhook.x:a.url"].status == "fail"
    assert "cannot connect: " in checks["webhook.x:a.url"].message
    assert checks["webhook.x:b.url"].status == "fail"
    assert "unknown url type" in checks["webhook.x:b.url"].message
    assert "(or correct channels.x.accounts.b.webhook_url)" in checks["webhook.x:b.url"].fix
    assert checks["webhook.x:c.url"].status == "ok"
