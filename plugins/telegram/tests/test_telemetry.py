"""A Telegram message's OpenTelemetry trace (``[telemetry]``): through a webhook into an
in-process gateway against the fake Bot API, its failed send retried once its rate-limit
slot is free again, as a local OTLP receiver gets the spans."""

from __future__ import annotations

import anyio
import pytest

from chatkernel.testing import OtlpReceiver, free_port, run_gateway, gateway_config, wait_until
from chatkernel_telegram.fake import FakeBotAPI

pytestmark = pytest.mark.anyio

TOKEN = "123456:AAExampleTokenForTestsOnly_abcdefghij"


async def test_a_webhook_message_is_one_trace_with_its_retry_and_rate_limit_wait(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/telegram/main/webhook"
    async with FakeBotAPI(token=TOKEN, username="chatkernel_bot") as api, \
            OtlpReceiver() as otlp:
        config = gateway_config({
            "gateway": {"listen": f"127.0.0.1:{port}", "workspace": str(tmp_path / "ws")},
            "store": {"path": str(tmp_path / "state.db")},
            "telemetry": {"otlp_endpoint": otlp.endpoint},
            "channels": {"telegram": {
                "retry": {"attempts": 3, "base_delay_ms": 10, "jitter": 0},
                # A retry waits for the slot its failed attempt took.
                "rate_limits": {"chat": {"count": 1, "per": 0.3}},
                "accounts": {"main": {
                    "bot_token": api.token, "api_base": api.base_url, "allow_from": ["*"],
                    "mode": "webhook", "webhook_url": url, "secret_token": "s3cret-token"}}}}})
        stop, ready = anyio.Event(), anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: run_gateway(config, on_ready=lambda _: ready.set(), stop=stop))
            with anyio.fail_after(10):
                await ready.wait()
            await wait_until(lambda: api.webhook_info().get("url"), timeout=10,
                             what="the webhook set")
            api.fail_next("sendMessage", 502, "Bad Gateway")
            api.inject_message(42, "first words")
            await api.wait_for_sent(1)
            api.inject_message(42, "second words")
            await api.wait_for_sent(2)
            stop.set()
        assert api.texts(42) == ["first words", "second words"]

    requests = otlp.named("POST /telegram/main/webhook")
    assert len(requests) == 2 and len({r.trace_id for r in requests}) == 2  # one each
    first, second = sorted(requests, key=lambda r: r.start_ns)
    assert otlp.tree(first.trace_id) == "\n".join([
        "POST /telegram/main/webhook",
        "  receive telegram",
        "    journal",
        "    process telegram",
        "      turn",
        "        invoke_agent echo",
        "        send telegram",
        # The retry after the 502 waits out the slot the first attempt took.
        "          rate limit wait"])
    assert otlp.tree(second.trace_id).count("send telegram") == 1
    assert first.attributes["http.response.status_code"] == 200
    [receive] = [s for s in otlp.trace(first.trace_id) if s.name == "receive telegram"]
    assert receive.attributes["messaging.system"] == "telegram"
    assert receive.attributes["messaging.destination.name"] == "telegram:main"
    assert receive.attributes["messaging.message.conversation_id"] == "42"

    # The first send was retried after the 502: an event on its span.
    [send] = [s for s in otlp.trace(first.trace_id) if s.name == "send telegram"]
    [(event, attributes)] = send.events
    assert event == "retry"
    assert attributes["http.response.status_code"] == 502
    assert attributes["chatkernel.retry"] == 1
    assert send.attributes["chatkernel.delivery.status"] == "sent"
    assert send.attributes["messaging.destination.name"] == "42"
    [wait] = otlp.children(send)
    assert wait.start_ns >= send.start_ns and wait.end_ns <= send.end_ns

    # The words are in no span.
    assert not [text for text in otlp.texts() if "words" in text]
