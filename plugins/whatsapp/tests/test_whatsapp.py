"""What is WhatsApp's own, each failure the peer gateways are known for reproduced against
the fake Graph API and the real kernel: the webhook's handshake and signatures, batched
and redelivered notifications, stale messages, statuses that fail later, the 24-hour
window with and without a template, MIME types, media both ways, tokens kept secret."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import time

import aiohttp
import anyio
import pytest

from chatkernel.testing import ManualClock, open_contract_run
from chatkernel_whatsapp import api as graph_api
from chatkernel_whatsapp.api import GraphAPI, media_mime, normalize_mime
from chatkernel_whatsapp.channel import WhatsAppChannel
from chatkernel_whatsapp.fake import _encode
from chatkernel_whatsapp.testing import APP_SECRET, VERIFY_TOKEN, WhatsAppAdapter

pytestmark = pytest.mark.anyio

USER, OTHER = "15550100001", "15550100002"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


@pytest.fixture
async def adapter():
    async with WhatsAppAdapter() as adapter:
        yield adapter


def metric(run, name: str, **labels: str) -> float:
    return run.harness.metric(name, channel="whatsapp", account="main", **labels) or 0.0


def journaled(run) -> list[str]:
    return [m.message_id for m, outcome in run.deliveries if outcome == "accepted"]


async def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    async with aiohttp.ClientSession() as http:
        async with http.post(url, data=body, headers={"Content-Type": "application/json",
                                                      **headers}) as response:
            return response.status


def signature(body: bytes, secret: str = APP_SECRET) -> dict[str, str]:
    return {"X-Hub-Signature-256": "sha256=" + hmac.new(secret.encode(), body,
                                                        hashlib.sha256).hexdigest()}


# -- the webhook's handshake and signatures ------------------------------------------------


async def test_get_verification_echoes_the_challenge_only_for_subscribe_and_the_token(
        adapter, tmp_path):
    async with open_contract_run(adapter, tmp_path) as run:
        url = f"{adapter.gateway}/whatsapp/main/webhook"
        graph = adapter.graph
        assert await graph.subscribe(url)  # no signature is asked on the GET
        assert not await graph.subscribe(url, verify_token="wrong")
        async with aiohttp.ClientSession() as http:
            for mode, status in (("subscribe", 200), ("unsubscribe", 403), ("", 403)):
                async with http.get(url, params={"hub.mode": mode, "hub.challenge": "42",
                                                 "hub.verify_token": VERIFY_TOKEN}) as answer:
                    assert answer.status == status, mode
                    if status == 200:
                        assert await answer.text() == "42"
        assert [v["status"] for v in graph.verifications] == [200, 403]
        assert run.deliveries == []


@pytest.mark.parametrize("forgery", ["unsigned", "wrong secret", "tampered", "re-serialised"])
async def test_a_post_without_metas_signature_over_its_raw_bytes_is_refused(
        adapter, tmp_path, forgery):
    async with open_contract_run(adapter, tmp_path) as run:
        url = f"{adapter.gateway}/whatsapp/main/webhook"
        graph = adapter.graph
        message = graph.message(USER, "mail me at a@b.example — café ☕ x/y")
        graph.last_user_message[USER] = time.time()  # posted by hand: the window opens
        body = _encode(graph.notification([graph.messages_value([message])]))
        headers = {
            "unsigned": {},
            "wrong secret": signature(body, "not-the-app-secret"),
            "tampered": signature(body.replace(b"caf", b"CAF")),
            # What a verifier that signs the parsed JSON again computes.
            "re-serialised": signature(json.dumps(json.loads(body)).encode()),
        }[forgery]
        assert await post(url, body, headers) == (401 if forgery == "unsigned" else 403)
        assert run.deliveries == [] and run.agent.requests == []
        # The same bytes, signed as Meta signs them, go through, unicode and "@" intact.
        assert await post(url, body, signature(body)) == 200
        await run.wait_for_tokens(USER, ["a@b.example"])
        assert run.agent.requests[0].text.endswith("mail me at a@b.example — café ☕ x/y")


# -- notifications ---------------------------------------------------------------------------


async def test_every_entry_change_and_message_of_a_notification_is_answered(adapter, tmp_path):
    async with open_contract_run(adapter, tmp_path) as run:
        graph = adapter.graph
        users = [f"1555020{n:04d}" for n in range(4)]
        messages = [graph.message(user, f"batch b{user[-2:]}{k}z") for k in range(3)
                    for user in users]
        graph.inject_messages(messages, per_change=2, entries=3)  # 12 messages, 6 changes
        body = graph.notifications[-1].body
        assert len(body["entry"]) == 3 and sum(len(e["changes"]) for e in body["entry"]) == 6
        for user in users:
            tokens = [f"b{user[-2:]}{k}z" for k in range(3)]
            await run.wait_for_tokens(user, tokens)
            assert run.tokens_sent(user, tokens) == tokens  # each user's in order
        assert len(journaled(run)) == 12


async def test_a_redelivered_notification_is_answered_once(adapter, tmp_path):
    async with open_contract_run(adapter, tmp_path) as run:
        graph = adapter.graph
        first = graph.inject_messages([graph.message(USER, "one rd1z"),
                                       graph.message(OTHER, "two rd2z")])
        await run.wait_for_tokens(USER, ["rd1z"])
        await run.wait_for_tokens(OTHER, ["rd2z"])
        graph.redeliver(first)  # Meta posts it again, days later
        graph.inject_message(USER, "after rd3z")
        await run.wait_for_tokens(USER, ["rd3z"])
        await run.settle()
        assert run.tokens_sent(USER, ["rd1z", "rd3z"]) == ["rd1z", "rd3z"]
        assert len(run.texts(OTHER)) == 1
        assert [o for _, o in run.deliveries].count("duplicate") == 2


@pytest.mark.parametrize("part, broken", [
    ("entry[0].changes[0].value.messages", lambda value: {**value, "messages": "abc"}),
    ("entry[0].changes[0].value.metadata", lambda value: {**value, "metadata": "x"}),
    ("entry[0].changes[0].value.messages[0]", lambda value: {**value, "messages": [["a", "list"]]}),
    ("entry[0].changes[0].value.statuses", lambda value: {**value, "statuses": 7}),
    ("entry[0].changes[0].value.contacts", lambda value: {**value, "contacts": "c"}),
    ("entry[0].changes[0]", lambda value: "not a change"),
])
async def test_a_malformed_part_of_a_signed_notification_is_skipped_and_the_rest_answered(
        adapter, tmp_path, caplog, part, broken):
    async with open_contract_run(adapter, tmp_path) as run:
        url = f"{adapter.gateway}/whatsapp/main/webhook"
        graph = adapter.graph
        graph.last_user_message[USER] = graph.last_user_message[OTHER] = time.time()
        bad = broken(graph.messages_value([graph.message(OTHER, "bad mf1z")]))
        good = graph.messages_value([graph.message(USER, "good mf2z")])
        body = graph.notification([good])
        changes = body["entry"][0]["changes"]
        if isinstance(bad, dict):
            changes.insert(0, {"field": "messages", "value": bad})
        else:
            changes.insert(0, bad)
        raw = _encode(body)
        await run.wait(lambda: run.account.transport.accepting, what="the webhook")
        with caplog.at_level(logging.WARNING):
            assert await post(url, raw, signature(raw)) == 200
            await run.wait_for_tokens(USER, ["mf2z"])
        skipped = [r.getMessage() for r in caplog.records if "is skipped" in r.getMessage()]
        assert len(skipped) == 1 and f"{part} is not" in skipped[0], skipped
        assert not any(r.exc_info for r in caplog.records)
        if part.endswith(("contacts", "statuses")):  # the change's message is sound
            await run.wait_for_tokens(OTHER, ["mf1z"])
        else:
            assert run.texts(OTHER) == []


async def test_a_stale_message_is_recorded_not_answered_and_logged(adapter, tmp_path, caplog):
    caplog.set_level(logging.WARNING, "chatkernel.whatsapp")
    adapter.account_extra = {"max_message_age_minutes": 60}
    async with open_contract_run(adapter, tmp_path) as run:
        graph = adapter.graph
        old = graph.message(USER, "from last week st1z", timestamp=time.time() - 6 * 86400)
        batch = graph.inject_messages([old, graph.message(USER, "just now st2z")])
        await run.wait_for_tokens(USER, ["st2z"])
        await run.settle()
        assert run.tokens_sent(USER, ["st1z", "st2z"]) == ["st2z"]
        assert old["id"] in journaled(run)  # recorded: a redelivery is a duplicate
        assert not any("st1z" in text for text in run.agent_texts())
        assert "not answered: stale: sent 6.0 days ago" in caplog.text
        # This batch again, not the last notification: the reply's statuses may be posted
        # after it by now.
        graph.redeliver(batch)
        await run.wait(lambda: [o for _, o in run.deliveries].count("duplicate") == 2,
                       what="the redelivery seen as duplicates")
        assert run.tokens_sent(USER, ["st1z", "st2z"]) == ["st2z"]


# -- statuses --------------------------------------------------------------------------------


async def test_statuses_are_counted_and_a_late_failure_surfaces(adapter, tmp_path):
    async with open_contract_run(adapter, tmp_path) as run:
        graph = adapter.graph
        graph.auto_read = True
        graph.inject_message(USER, "hello ok1z")
        await run.wait_for_tokens(USER, ["ok1z"])
        await run.wait(lambda: metric(run, "chatkernel_delivery_statuses_total",
                                      status="read") == 1, what="a read status")
        assert metric(run, "chatkernel_delivery_statuses_total", status="delivered") == 1

        graph.fail_delivery(OTHER, code=131026, title="Message undeliverable",
                            details="The recipient's phone is not on WhatsApp anymore")
        graph.inject_message(OTHER, "hello fl1z")
        await run.wait_for_tokens(OTHER, ["fl1z"])  # accepted by Meta: it has an id
        key = "whatsapp:main:" + graph.user_id(OTHER)  # the chat is the user's BSUID

        async def notes() -> list[str]:
            return [e.text for e in await run.harness.session_log(key)
                    if e.role == "notification"]

        await run.wait(lambda: metric(run, "chatkernel_send_failures_total") == 1,
                       what="the failed status surfaced")
        assert await notes() == [
            "delivery failed: chunk 1/1 was accepted, then not delivered: Message "
            "undeliverable — The recipient's phone is not on WhatsApp anymore (code 131026)"]
        wamid = graph.sent(OTHER)[0].wamid
        assert await run.harness.sent_status("whatsapp", wamid) == "failed"


# -- the 24-hour window ------------------------------------------------------------------------


async def proactive(run, to: str, text: str) -> None:
    await run.harness.send_text("whatsapp", to, text)
    await run.harness.outbox_idle()


async def test_outside_the_window_the_failure_is_explained(adapter, tmp_path):
    async with open_contract_run(adapter, tmp_path) as run:
        adapter.graph.close_window(USER)
        await proactive(run, USER, "your report is ready")
        log = await run.harness.session_log("whatsapp:main:" + USER)
        (note,) = [e.text for e in log if e.role == "notification"]
        assert "more than 24 hours ago" in note and "(error 131047)" in note
        assert "channels.whatsapp.accounts.main.template" in note
        assert adapter.graph.sent(USER) == []


async def test_outside_the_window_a_proactive_send_uses_the_accounts_template(
        adapter, tmp_path):
    template = {"name": "daily_update", "language": "en", "parameters": ["{text}"]}
    adapter.account_extra = {"template": template}
    async with open_contract_run(adapter, tmp_path) as run:
        graph = adapter.graph
        graph.templates = {"daily_update"}
        graph.close_window(USER)
        await proactive(run, USER, "your **report**\nis ready")
        (sent,) = graph.sent(USER)
        assert sent.type == "template" and sent.content["name"] == "daily_update"
        assert sent.content["language"] == {"policy": "deterministic", "code": "en"}
        assert sent.text == "your *report* is ready"  # on one line, as Meta requires
        # Inside the window the same send is a plain text.
        graph.inject_message(USER, "hi again tw1z")
        await run.wait_for_tokens(USER, ["tw1z"])
        await proactive(run, USER, "and now a text")
        assert [m.type for m in graph.sent(USER)] == ["template", "text", "text"]


# -- media -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "mime"), [
    ("voice.opus", "audio/ogg; codecs=opus"), ("song.ogg", "audio/ogg; codecs=opus"),
    ("clip.m4a", "audio/mp4"), ("photo.jpg", "image/jpeg"), ("notes.txt", "text/plain"),
    ("report.pdf", "application/pdf")])
def test_mime_types_are_named_as_meta_accepts_them(name, mime):
    assert media_mime(name) == mime


def test_mime_aliases_are_normalised():
    assert normalize_mime("audio/opus") == "audio/ogg; codecs=opus"
    assert normalize_mime("image/jpg") == "image/jpeg"
    assert normalize_mime("audio/x-m4a") == "audio/mp4"
    assert normalize_mime("Application/PDF") == "application/pdf"


async def test_media_out_is_uploaded_with_metas_mime_type_then_sent_by_id(adapter, tmp_path):
    async with open_contract_run(adapter, tmp_path) as run:
        workspace = run.harness.workspace
        (workspace / "voice.opus").write_bytes(b"OggS" + b"\x00" * 32)
        (workspace / "chart.png").write_bytes(PNG)
        run.replies["md1z"] = "here\nMEDIA: voice.opus\nMEDIA: chart.png"
        adapter.graph.inject_message(USER, "send them md1z")
        await run.wait(lambda: len(adapter.sent_media(USER)) == 2, what="two files sent",
                       state=lambda: (adapter.sent_media(USER), run.texts(USER)))
        uploads = adapter.graph.calls_to("media")
        assert [c.params["type"] for c in uploads] == ["audio/ogg; codecs=opus", "image/png"]
        assert uploads[0].params["file"]["content_type"] == "audio/ogg; codecs=opus"
        audio, image = [m for m in adapter.graph.sent(USER) if m.media]
        assert (audio.type, image.type) == ("audio", "image")
        assert audio.media.data == b"OggS" + b"\x00" * 32 and image.media.data == PNG


async def test_a_type_meta_refuses_is_reported_in_the_chat(adapter, tmp_path):
    async with open_contract_run(adapter, tmp_path) as run:
        (run.harness.workspace / "tune.flac").write_bytes(b"fLaC")
        run.replies["fl2z"] = "MEDIA: tune.flac"
        adapter.graph.inject_message(USER, "play fl2z")
        await run.wait(lambda: any("upload failed" in t for t in run.texts(USER)),
                       what="the upload failure in the chat", state=lambda: run.texts(USER))
        (text,) = [t for t in run.texts(USER) if "upload failed" in t]
        assert "tune.flac" in text and "131053" in text


async def test_media_in_is_downloaded_with_the_token_into_the_media_store(adapter, tmp_path):
    async with open_contract_run(adapter, tmp_path) as run:
        graph = adapter.graph
        photo = graph.add_media(PNG, "image/png")
        voice = graph.add_media(b"OggS voice", "audio/ogg; codecs=opus")
        doc = graph.add_media(b"%PDF-1.4", "application/pdf", "invoice.pdf")
        graph.inject_messages([
            graph.message(USER, image={"id": photo, "mime_type": "image/png",
                                       "caption": "look mi1z"}),
            graph.message(USER, audio={"id": voice, "mime_type": "audio/ogg; codecs=opus",
                                       "voice": True}),
            graph.message(USER, document={"id": doc, "mime_type": "application/pdf",
                                          "filename": "invoice.pdf"})])
        await run.wait(lambda: len(run.agent.requests) == 3, what="three turns")
        first, second, third = run.agent.requests
        assert first.text.startswith("look mi1z") and first.media[0].kind == "image"
        assert first.media[0].path.read_bytes() == PNG
        assert second.media[0].kind == "voice"
        assert second.media[0].path.read_bytes() == b"OggS voice"
        assert third.media[0].filename == "invoice.pdf"
        assert third.media[0].path.read_bytes() == b"%PDF-1.4"
        downloads = graph.calls_to("download")
        assert len(downloads) == 3 and all(c.status == 200 for c in downloads)


async def test_locations_contacts_buttons_are_text_and_reactions_are_ignored(adapter, tmp_path):
    async with open_contract_run(adapter, tmp_path) as run:
        graph = adapter.graph
        graph.inject_messages([
            graph.message(USER, location={"latitude": 37.44, "longitude": -122.16,
                                          "name": "Philz Coffee", "address": "101 Forest Ave"}),
            graph.message(USER, contacts=[{"name": {"formatted_name": "Lucía Gómez"},
                                           "phones": [{"phone": "+1 983 555 2319"}]}]),
            graph.message(USER, reaction={"message_id": "wamid.x", "emoji": "👍"}),
            graph.message(USER, interactive={"type": "button_reply", "button_reply": {
                "id": "yes", "title": "Yes please"}}),
            graph.message(USER, button={"payload": "STOP", "text": "Unsubscribe"})])
        await run.wait(lambda: len(run.agent.requests) == 4, what="four turns")
        await run.settle()
        assert [r.text for r in run.agent.requests] == [
            "[location: Philz Coffee, 101 Forest Ave (37.44, -122.16)]",
            "[contact: Lucía Gómez, +1 983 555 2319]", "Yes please", "Unsubscribe"]


async def test_a_turn_running_past_the_indicator_delay_shows_typing_with_its_read_receipt(
        adapter, tmp_path):
    clock = ManualClock()  # the kernel's indicator delay counts on it
    async with open_contract_run(adapter, tmp_path, pacing=clock.pacing) as run:
        run.agent.gate = anyio.Event()  # the turn runs until the receipt is in
        message = adapter.graph.inject_message(USER, "hi rr1z")
        await run.wait(lambda: run.agent.requests, what="the turn")
        assert adapter.graph.read_receipts == []  # nothing before the delay
        clock.advance(WhatsAppChannel.limits.indicator_delay)
        await run.wait(lambda: adapter.graph.read_receipts, what="a read receipt")
        run.agent.gate.set()
        await run.wait_for_tokens(USER, ["rr1z"])
        assert adapter.graph.read_receipts == [{
            "messaging_product": "whatsapp", "status": "read", "message_id": message["id"],
            "typing_indicator": {"type": "text"}}]


async def test_quick_turns_mark_their_messages_read_in_one_request_without_typing(
        adapter, tmp_path):
    """Issue 31: turns that replied within the indicator delay show no typing (their
    reply would end it at once), and a chat's burst of them makes one read receipt, for
    its newest message: WhatsApp marks every earlier one read with it."""
    clock = ManualClock()
    async with open_contract_run(adapter, tmp_path, pacing=clock.pacing) as run:
        graph = adapter.graph
        messages = [graph.inject_message(USER, f"quick {i} qk{i}z") for i in range(3)]
        await run.wait_for_tokens(USER, ["qk0z", "qk1z", "qk2z"])
        await run.settle()
        assert graph.read_receipts == []  # the replies went first
        limits = WhatsAppChannel.limits
        clock.advance(limits.indicator_delay)
        await run.settle()
        assert graph.read_receipts == []  # the replies show they were seen: not yet
        clock.advance(limits.read_mark_delay - limits.indicator_delay)
        await run.wait(lambda: graph.read_receipts, what="a read receipt")
        clock.advance(60.0)  # nothing else was due
        await run.settle()
        assert graph.read_receipts == [{"messaging_product": "whatsapp", "status": "read",
                                        "message_id": messages[-1]["id"]}]


async def test_a_chat_that_keeps_writing_is_marked_read_within_the_delay(adapter, tmp_path):
    """A quick turn's read mark waits read_mark_delay for the chat's next quick turns to
    share it, but the next turns do not put it off: a chat writing on without a pause
    still sees its messages marked read within the delay of the first reply."""
    clock = ManualClock()
    async with open_contract_run(adapter, tmp_path, pacing=clock.pacing) as run:
        graph = adapter.graph
        step = WhatsAppChannel.limits.read_mark_delay / 4
        sent = []
        for i in range(4):  # a message every quarter of the delay, each answered at once
            sent.append(graph.inject_message(USER, f"on and on {i} oo{i}z"))
            await run.wait_for_tokens(USER, [f"oo{i}z"])
            await run.settle()
            assert graph.read_receipts == []
            clock.advance(step)
        await run.wait(lambda: graph.read_receipts, what="the burst's read receipt")
        assert graph.read_receipts == [{"messaging_product": "whatsapp", "status": "read",
                                        "message_id": sent[-1]["id"]}]


# -- errors, limits, health -------------------------------------------------------------------


async def test_an_expired_token_turns_health_red_with_what_to_do(adapter, tmp_path):
    async with open_contract_run(adapter, tmp_path) as run:
        adapter.graph.revoke_token()
        result = await run.probe()
        assert not result.ok and not result.restartable
        expected = run.channel.token_expired_problem
        assert result.detail == expected and "system user" in result.detail
        adapter.graph.inject_message(USER, "anyone there ex1z")
        await run.wait(lambda: run.account.runtime.problem == expected,
                       what="the account's problem")


@pytest.mark.slow
async def test_a_refused_token_at_start_fails_the_account_with_what_to_do(adapter, tmp_path):
    adapter.graph.revoke_token()  # Graph answers 401, code 190
    clock = ManualClock()
    async with open_contract_run(adapter, tmp_path, channel_clock=clock) as run:
        runtime = run.account.runtime
        await run.wait(lambda: runtime.state == "failed", what="the account failed")
        expected = ("the Graph API refused the access token (error 190: expired, revoked or "
                    "invalid): make a new access token for a system user in Meta Business "
                    "Suite (Business settings, System users, Generate new token; permanent, "
                    "with whatsapp_business_messaging), set it in "
                    "channels.whatsapp.accounts.main.access_token and restart the gateway")
        assert runtime.detail == expected == run.channel.token_expired_problem
        snapshot = await run.health.snapshot()
        assert any(expected in problem for problem in snapshot.problems)
        token = adapter.graph.token
        assert token not in repr(snapshot)
        # The next try waits five minutes: the loop sleeps until then, no storm of lookups.
        assert await clock.sleeper() == clock.now() + 300
        assert len(adapter.graph.calls_to("phone_number")) == 1
        clock.advance(300)  # tried again, refused again: the wait doubles
        assert await clock.sleeper() == clock.now() + 600
        assert len(adapter.graph.calls_to("phone_number")) == 2
        assert runtime.detail == expected


async def test_the_probe_names_the_number_its_name_and_quality(adapter, tmp_path):
    async with open_contract_run(adapter, tmp_path) as run:
        result = await run.probe()
        assert result.ok and result.latency_ms is not None
        assert result.detail == "+1 555-078-3881 (Chatkernel Test), quality GREEN"
        assert result.extra["quality_rating"] == "GREEN"
        assert run.account.transport.quiet  # judged by its probe, not by silence


@pytest.mark.slow
async def test_a_pair_rate_answer_is_waited_out_and_sends_are_paced_before_it(
        adapter, tmp_path, monkeypatch):
    monkeypatch.setitem(graph_api.RATE_LIMIT_CODES, 131056, 0.2)
    adapter.channel_config = lambda: {"rate_limits": {"chat": "3/s", "account": "80/s"},
                                      "retry": {"attempts": 3, "base_delay_ms": 10}}
    async with open_contract_run(adapter, tmp_path) as run:
        graph = adapter.graph
        graph.pair_rate = (3, 1.0)
        tokens = [f"pr{n}z" for n in range(6)]
        graph.inject_messages([graph.message(USER, f"go {t}") for t in tokens])
        await run.wait_for_tokens(USER, tokens)
        assert run.tokens_sent(USER, tokens) == tokens
        assert graph.throttled == 0  # paced before Meta had to say 131056
        # And when Meta says it anyway, the send waits and goes through.
        graph.rates.reset()
        graph.pair_rate = (1, 60.0)
        graph.rates.admit([(("pair", OTHER), 1, 60.0)])  # the pair's window is full
        graph.inject_message(OTHER, "late pr9z")
        await run.wait(lambda: graph.throttled >= 1, what="a 131056 answer")
        graph.pair_rate = None
        await run.wait_for_tokens(OTHER, ["pr9z"])
        assert metric(run, "chatkernel_send_retries_total") >= 1


def test_declared_limits_are_metas():
    limits = WhatsAppChannel.limits
    assert limits.text_limit == 4096
    assert (limits.rates["account"].count, limits.rates["account"].per) == (80, 1.0)
    chat = limits.rates["chat"]
    assert chat.per / chat.count == 6.0  # one message per 6 s to a user, on average
    assert limits.media_kind("a.webp") == "document"  # Meta takes images as jpeg/png only


async def test_the_token_never_shows_in_errors_or_logs(adapter, tmp_path):
    graph = adapter.graph
    client = GraphAPI(graph.token, graph.phone_number_id, graph.base_url)
    from chatkernel_whatsapp.fake import GraphErrorAnswer

    graph.faults.fail("messages", GraphErrorAnswer(
        400, 100, f"Invalid parameter: token {graph.token} is not allowed here"))
    with pytest.raises(graph_api.GraphError) as info:
        await client.send_message(USER, "text", {"body": "hi"})
    await client.close()
    assert graph.token not in str(info.value) and "***" in str(info.value)
    # A token where no config holds it (a URL, an SDK's message) is redacted from logs.
    assert re.search(WhatsAppChannel.secret_patterns[0], f"url?access_token={graph.token}")
    async with open_contract_run(adapter, tmp_path) as run:
        http = run.channel.api.http
        for secret in (graph.token, APP_SECRET, VERIFY_TOKEN):
            assert http.redact(f"x {secret} y") == "x *** y"


async def test_a_notification_for_a_number_no_account_serves_is_ignored(adapter, tmp_path,
                                                                        caplog):
    async with open_contract_run(adapter, tmp_path) as run:
        graph = adapter.graph
        value = graph.messages_value([graph.message(USER, "elsewhere nw1z")])
        value["metadata"]["phone_number_id"] = "999000999000"
        graph.post(graph.notification([value]), user=USER)
        graph.inject_message(USER, "here nw2z")
        await run.wait_for_tokens(USER, ["nw2z"])
        assert run.tokens_sent(USER, ["nw1z", "nw2z"]) == ["nw2z"]
        assert "phone number id 999000999000, which no account serves" in caplog.text
