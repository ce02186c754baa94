"""The gateway's health over HTTP: /healthz, /metrics, /status and the control API."""

from __future__ import annotations

from contextlib import asynccontextmanager

import anyio
import pytest
from aiohttp.test_utils import TestClient, TestServer

from chatkernel import hookimpl
from chatkernel.core import config as cfg
from chatkernel.core.gateway.process import build_app, check_listen, run_gateway
from chatkernel.core.gateway.endpoints import render_status_page
from chatkernel.sdk.models import ProbeResult
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio

TOKEN = "test-control-token-0123456789"
ACCOUNTS = {"channels": {"memory": {"accounts": {"main": {"allow_from": ["*"]},
                                                 "<b>bad</b>": {"allow_from": ["*"]}}}}}


class RejectsBad:
    """Probes memory:<b>bad</b> as failing, with markup in its detail."""

    @staticmethod
    @hookimpl
    def health_probe(account):
        if account.name == "<b>bad</b>":
            return ProbeResult(ok=False, detail="<script>alert(1)</script> rejected")
        return None


@asynccontextmanager
async def served(tmp_path, *, loopback=True, config=None, plugins=()):
    async with KernelHarness(tmp_path, config=config, plugins=list(plugins)) as h:
        app = build_app(h.kernel, TOKEN, loopback=loopback)
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            yield h, client


def auth(token=TOKEN):
    return {"Authorization": f"Bearer {token}"}


async def test_healthz_is_200_when_every_account_is_healthy(tmp_path):
    async with served(tmp_path) as (h, client):
        await h.kernel.health.refresh()
        response = await client.get("/healthz")
        assert response.status == 200
        body = await response.json()
        assert body["ok"] is True and body["reasons"] == []
        assert body["accounts"] == {"memory:main": "running"}


async def test_healthz_is_503_with_the_reasons(tmp_path):
    async with served(tmp_path, config=ACCOUNTS,
                      plugins=[("test-rejects-bad", RejectsBad)]) as (h, client):
        await h.kernel.health.refresh()
        response = await client.get("/healthz")
        assert response.status == 503
        body = await response.json()
        assert body["ok"] is False
        assert body["reasons"] == [
            "memory:<b>bad</b>: probe failed: <script>alert(1)</script> rejected"]


async def test_metrics_in_prometheus_format(tmp_path):
    async with served(tmp_path) as (h, client):
        await h.channel.receive("hello")
        await h.settle()
        await h.kernel.health.refresh()
        response = await client.get("/metrics")
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = await response.text()
        for line in ('chatkernel_messages_in_total{account="main",channel="memory"} 1.0',
                     'chatkernel_messages_out_total{account="main",channel="memory"} 1.0',
                     'chatkernel_probe_ok{account="main",channel="memory"} 1.0',
                     "chatkernel_queue_depth 0.0", "chatkernel_turn_seconds_bucket",
                     "# TYPE chatkernel_send_failures_total counter",
                     "# TYPE chatkernel_send_retries_total counter",
                     "# TYPE chatkernel_throttled_total counter",
                     "# TYPE chatkernel_account_restarts_total counter",
                     "# TYPE chatkernel_monitor_restarts_total counter"):
            assert line in text, line


async def test_status_page_escapes_everything(tmp_path):
    async with served(tmp_path, config=ACCOUNTS,
                      plugins=[("test-rejects-bad", RejectsBad)]) as (h, client):
        await h.kernel.health.refresh()
        response = await client.get("/status")
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/html")
        page = await response.text()
        assert "<script>alert" not in page and "<b>bad</b>" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt; rejected" in page
        assert 'data-account="memory:&lt;b&gt;bad&lt;/b&gt;" data-health="bad"' in page
        assert 'data-account="memory:main" data-health="ok"' in page
        assert '<meta http-equiv="refresh"' in page


def test_status_page_renders_a_local_snapshot_without_failing():
    import asyncio

    from chatkernel.core.health.probes import local_snapshot

    snapshot = asyncio.run(local_snapshot(cfg.parse({}), None))
    page = render_status_page(snapshot)
    assert 'data-account="webchat:default" data-health="warn"' in page


async def test_beyond_loopback_metrics_and_status_need_the_token(tmp_path):
    async with served(tmp_path, loopback=False, config=ACCOUNTS,
                      plugins=[("test-rejects-bad", RejectsBad)]) as (h, client):
        await h.kernel.health.refresh()
        for path in ("/metrics", "/status"):
            assert (await client.get(path)).status == 401
            assert (await client.get(path, headers=auth("wrong"))).status == 401
            assert (await client.get(path, headers=auth())).status == 200
        # /healthz: the status code for anyone, the reasons only with the token
        response = await client.get("/healthz")
        assert response.status == 503 and await response.json() == {
            "ok": False, "ts": (await response.json())["ts"]}
        response = await client.get("/healthz", headers=auth())
        assert (await response.json())["reasons"]


async def test_the_gateway_refuses_to_listen_beyond_loopback_without_a_token(tmp_path):
    config = cfg.parse({"gateway": {"listen": "0.0.0.0:0"}})
    with pytest.raises(cfg.ConfigError) as caught:
        await run_gateway(config, stop=anyio.Event(), handle_signals=False)
    assert caught.value.key == "gateway.control_token"
    assert "beyond this machine" in str(caught.value)
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        check_listen(config, host)  # loopback: fine without a token
    check_listen(cfg.parse({"gateway": {"control_token": TOKEN}}), "0.0.0.0")
    with pytest.raises(cfg.ConfigError):
        check_listen(config, "")


async def test_control_health_probe_and_presence(tmp_path):
    async with served(tmp_path, config=ACCOUNTS,
                      plugins=[("test-rejects-bad", RejectsBad)]) as (h, client):
        response = await client.post("/control/health", json={})
        assert response.status == 401
        response = await client.post("/control/health", headers=auth(), json={
            "live": True, "timeout_ms": 2000,
            "client": {"instance_id": "CLI-Laptop", "mode": "cli", "reason": "health"}})
        snapshot = await response.json()
        assert response.status == 200 and snapshot["live"] is True and snapshot["ok"] is False
        assert snapshot["channels"]["memory"]["accounts"]["main"]["probe"]["ok"] is True
        response = await client.post("/control/channels/probe", headers=auth(),
                                     json={"target": "memory:main"})
        body = await response.json()
        assert body["ok"] is True and list(body["probes"]) == ["memory:main"]
        response = await client.post("/control/channels/probe", headers=auth(),
                                     json={"target": "telegram"})
        assert response.status == 404 and "no running account" in (await response.json())[
            "error"]
        response = await client.post("/control/channels/probe", headers=auth(),
                                     json={"timeout_ms": -1})
        assert response.status == 400
        response = await client.post("/control/presence", headers=auth(),
                                     json={"client": {"instance_id": "cli-laptop"}})
        presence = (await response.json())["presence"]
        assert [p["kind"] for p in presence] == ["gateway", "client"]
        assert presence[1]["instance_id"] == "CLI-Laptop" and presence[1]["ip"] == "127.0.0.1"
        response = await client.post("/control/presence", headers=auth(),
                                     json={"client": {"instance_id": ""}})
        assert response.status == 400


async def test_malformed_control_requests_are_400_never_500(tmp_path):
    async with served(tmp_path) as (h, client):
        for path, raw in [
            ("/control/status", b"[" * 100_000 + b"]" * 100_000),
            ("/control/status", b'{"a": ' * 50_000 + b"1" + b"}" * 50_000),
            ("/control/status", b"not json"),
            ("/control/status", b"[1, 2]"),
            ("/control/status", b'{"timeout_ms": NaN}'),
            ("/control/health", b'{"live": true, "timeout_ms": 1e999}'),
            ("/control/channels/probe", b'{"timeout_ms": 1' + b"0" * 400 + b"}"),
            ("/control/channels/probe", b'{"timeout_ms": ' + b"9" * 5000 + b"}"),
            ("/control/channels/probe", b'{"timeout_ms": 600001}'),
            ("/control/send", b'{"channel": "memory", "to": "c", "text": "x", '
                              b'"thread": {"a": 1}}'),
            ("/control/send", b'{"channel": ["memory"], "to": "c", "text": "x"}'),
            ("/control/sessions/policy", b'{"session": 5, "policy": "deny"}'),
            ("/control/heartbeat/wake", b'{"mode": 1}'),
        ]:
            response = await client.post(path, data=raw, headers={
                **auth(), "Content-Type": "application/json"})
            assert response.status == 400, (path, raw[:40])
            assert (await response.json())["error"]
        response = await client.post("/control/send", headers=auth(), json={
            "channel": "memory", "to": "c", "text": "x", "thread": {"a": 1}})
        assert (await response.json())["error"] == "'thread' must be a string"
        response = await client.post("/control/health", headers=auth(),
                                     json={"timeout_ms": 10 ** 400})
        assert "at most 600,000" in (await response.json())["error"]


async def test_favicon_is_answered_without_a_body(tmp_path):
    """Browsers ask for it with every page: a 204, not a 404 in the access log."""
    for loopback in (True, False):
        async with served(tmp_path / str(loopback), loopback=loopback) as (h, client):
            response = await client.get("/favicon.ico")
            assert response.status == 204
            assert await response.read() == b""
            assert "max-age" in response.headers["Cache-Control"]
