"""OpenTelemetry traces (``[telemetry]``, core/telemetry.py): a web chat message's trace
as a local OTLP/HTTP receiver gets it (spans, parents, attributes), no message text in
it unless asked, the trace id in the JSON log lines, and nothing of OpenTelemetry
imported without the table."""

from __future__ import annotations

import io
import json
import logging

import aiohttp
import anyio
import pytest

from chatkernel.channels import Capabilities
from chatkernel.core import config as cfg
from chatkernel.core.logs import JsonFormatter
from chatkernel.testing import (
    AgentEvent,
    KernelHarness,
    MemoryChannel,
    OtlpReceiver,
    agent_plugin,
    gateway_process,
    post_json,
    scripted_agent,
    start_gateway,
    wait_for_messages,
)

pytestmark = pytest.mark.anyio

TEXT = "the secret plans for saturday"


async def web_chat_turn(tmp_path, telemetry: dict, text: str = TEXT) -> list[dict]:
    """Run an in-process gateway with ``telemetry``, have the web chat's chat c1 say
    ``text``, wait for the echo, stop the gateway (its spans are sent as it stops)."""
    async with anyio.create_task_group() as tg:
        url, stop = await start_gateway(tg, tmp_path, {"telemetry": telemetry})
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{url}/webchat/messages", json={
                    "chat_id": "c1", "user_id": "u1", "text": text}) as response:
                assert response.status == 202
        messages = await anyio.to_thread.run_sync(
            wait_for_messages, f"{url}/webchat/messages?chat_id=c1", 2)
        stop.set()
    return messages


def test_the_telemetry_table_is_checked_key_by_key():
    for table, key in [({"otlp_endpoint": "collector:4318"}, "telemetry.otlp_endpoint"),
                       ({"sample_ratio": 1.5}, "telemetry.sample_ratio"),
                       ({"service_name": ""}, "telemetry.service_name"),
                       ({"endpoint": "http://127.0.0.1:4318"}, "telemetry.endpoint")]:
        with pytest.raises(cfg.ConfigError) as raised:
            cfg.parse({"telemetry": table})
        assert key in str(raised.value)
    parsed = cfg.parse({"telemetry": {"otlp_endpoint": "http://127.0.0.1:4318/v1/traces"}})
    assert parsed.telemetry.otlp_endpoint == "http://127.0.0.1:4318"  # the path added once
    assert cfg.parse({}).telemetry is None


async def test_a_web_chat_turn_is_one_trace_at_the_otlp_receiver(tmp_path):
    async with OtlpReceiver() as otlp:
        messages = await web_chat_turn(tmp_path, {"otlp_endpoint": otlp.endpoint,
                                                  "service_name": "chat-test"})
        assert [m["text"] for m in messages] == [TEXT, TEXT]
        [request] = otlp.named("POST /webchat/messages")
        assert otlp.tree(request.trace_id) == "\n".join([
            "POST /webchat/messages",
            "  receive webchat",
            "    journal",
            "    process webchat",
            "      turn",
            "        invoke_agent echo",
            "        send webchat"])
        assert len(otlp.spans) == 7 and {s.trace_id for s in otlp.spans} == {request.trace_id}
        assert request.kind == "server" and request.parent_id is None
        assert request.attributes == {"http.request.method": "POST",
                                      "http.route": "/webchat/messages", "url.scheme": "http",
                                      "http.response.status_code": 202}
        assert request.resource["service.name"] == "chat-test"

        [receive] = otlp.named("receive webchat")
        assert receive.kind == "consumer"
        assert {k: receive.attributes[k] for k in (
            "messaging.system", "messaging.operation.type", "messaging.destination.name",
            "messaging.message.conversation_id", "messaging.message.body.size",
            "chatkernel.outcome")} == {
            "messaging.system": "webchat", "messaging.operation.type": "receive",
            "messaging.destination.name": "webchat:default",
            "messaging.message.conversation_id": "c1",
            "messaging.message.body.size": len(TEXT), "chatkernel.outcome": "accepted"}
        [journal] = otlp.named("journal")
        assert journal.attributes["db.system.name"] == "sqlite"
        assert journal.attributes["chatkernel.journal.seq"] == 1
        [process] = otlp.named("process webchat")
        assert process.attributes["chatkernel.outcome"] == "started"
        [turn] = otlp.named("turn")
        assert turn.attributes["chatkernel.session.key"] == "webchat:default:c1"
        [agent] = otlp.named("invoke_agent echo")
        assert agent.kind == "client" and agent.attributes["gen_ai.system"] == "echo"
        [send] = otlp.named("send webchat")
        assert send.kind == "producer"
        assert {k: send.attributes[k] for k in (
            "messaging.operation.type", "messaging.destination.name",
            "chatkernel.delivery.status", "chatkernel.chunk.index")} == {
            "messaging.operation.type": "send", "messaging.destination.name": "c1",
            "chatkernel.delivery.status": "sent", "chatkernel.chunk.index": 1}
        assert send.attributes["messaging.message.id"] == str(messages[1]["id"])
        # Neither the message nor the answer is in any span.
        assert not [text for text in otlp.texts() if "secret plans" in text]


async def test_capture_content_puts_the_texts_in_the_spans(tmp_path):
    async with OtlpReceiver() as otlp:
        await web_chat_turn(tmp_path, {"otlp_endpoint": otlp.endpoint,
                                       "capture_content": True})
        [receive] = otlp.named("receive webchat")
        [send] = otlp.named("send webchat")
        [agent] = otlp.named("invoke_agent echo")
    assert receive.attributes["chatkernel.message.text"] == TEXT
    assert send.attributes["chatkernel.message.text"] == TEXT
    assert agent.attributes["chatkernel.agent.input"].endswith(TEXT)
    assert agent.attributes["chatkernel.agent.output"] == TEXT


async def test_a_sample_ratio_of_zero_sends_no_span_and_answers_all_the_same(tmp_path):
    async with OtlpReceiver() as otlp:
        messages = await web_chat_turn(tmp_path, {"otlp_endpoint": otlp.endpoint,
                                                  "sample_ratio": 0})
    assert len(messages) == 2
    assert otlp.spans == []


async def test_the_json_log_lines_of_a_turn_carry_its_trace_id(tmp_path):
    def script(request):
        logging.getLogger("chatkernel.test").warning("thinking about it")
        return [AgentEvent.usage(model="m-1", input_tokens=12, output_tokens=3),
                AgentEvent.reply("done")]

    agent = scripted_agent(script=script)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logging.getLogger("chatkernel.test").addHandler(handler)
    try:
        async with OtlpReceiver() as otlp:
            async with KernelHarness(tmp_path, config={
                    "agent": {"kind": agent.name, "model": "m-1"},
                    "telemetry": {"otlp_endpoint": otlp.endpoint}},
                    plugins=[("agent", agent_plugin(agent))]) as h:
                await h.channel.receive("hello")
                await h.settle()
    finally:
        logging.getLogger("chatkernel.test").removeHandler(handler)
    [line] = [json.loads(text) for text in stream.getvalue().splitlines()]
    [turn] = otlp.named("turn")
    assert line["trace_id"] == turn.trace_id and line["span_id"] == turn.span_id
    [model] = otlp.named("chat m-1")
    assert otlp.parent(model) is turn
    assert {k: model.attributes[k] for k in (
        "gen_ai.operation.name", "gen_ai.request.model", "gen_ai.response.model",
        "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")} == {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "m-1",
        "gen_ai.response.model": "m-1", "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 3}
    # A log line outside any span carries none.
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "outside", None, None)
    assert "trace_id" not in json.loads(JsonFormatter().format(record))


async def test_a_platforms_delivery_statuses_are_children_of_their_send(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setattr(MemoryChannel, "capabilities", Capabilities(delivery_statuses=True))
    async with OtlpReceiver() as otlp:
        async with KernelHarness(tmp_path, config={
                "agent": {"kind": "echo"},
                "telemetry": {"otlp_endpoint": otlp.endpoint}}) as h:
            await h.channel.receive("hello there", chat_id="c1")
            await h.settle()
            context = h.channel.context
            assert await context.report_delivery_status("1", "delivered")
            assert await context.report_delivery_status("1", "failed", reason="gone", code=7)
    [send] = otlp.named("send memory")
    assert send.attributes["messaging.message.id"] == "1"
    statuses = otlp.named("delivery status memory")
    assert [s.attributes["chatkernel.delivery.status"] for s in statuses] == [
        "delivered", "failed"]
    assert {s.parent_id for s in statuses} == {send.span_id}
    assert [s.status for s in statuses] == ["unset", "error"]
    [receive] = otlp.named("receive memory")
    assert otlp.tree(receive.trace_id).splitlines()[-3:] == [
        "      send memory", "        delivery status memory",
        "        delivery status memory"]


@pytest.mark.slow
def test_a_gateway_without_the_table_imports_nothing_of_opentelemetry(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    listing = tmp_path / "modules.txt"
    with gateway_process(home, env={"CHATKERNEL_MODULES_AT_EXIT": str(listing)}) as gateway:
        status, _ = post_json(f"{gateway.url}/webchat/messages",
                              {"chat_id": "c1", "user_id": "u1", "text": "hi"})
        assert status == 202
        assert len(gateway.webchat_messages("c1", 2)) == 2  # a whole turn went through
        assert gateway.stop() == 0
    modules = listing.read_text().split()
    assert "chatkernel.core.telemetry" in modules
    assert [name for name in modules if name.startswith("opentelemetry")] == []
