"""Concurrent webhook requests share the store's group commit, on the gateway's real app
(the HTTP guard included) over real HTTP: fewer commits than requests, and each request
answered 200 only once its own message is committed; a commit that fails is answered
503 and nothing of it is kept, so the platform sends it again."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import sqlite3
from typing import Any

import aiohttp
import anyio
import pytest
from aiohttp import web

from chatkernel import hookimpl
from chatkernel.core.gateway.process import build_app
from chatkernel.sdk.channel import Channel, ChannelLimits
from chatkernel.sdk.models import InboundMessage, OutboundPayload, Route, SendResult
from chatkernel.sdk.receiving.webhooks import HmacSignature, Webhook
from chatkernel.testing.contract import wait_until
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio

SECRET = "group-commit-secret"
HEADER = "X-Body-Signature"


class SignedChannel(Channel):
    """A webhook channel: ``{"chat", "id", "text"}`` signed with an HMAC of the body."""

    name = "signed"
    limits = ChannelLimits()

    def transport(self) -> "SignedHook":
        return SignedHook(self)

    async def normalize(self, event: dict[str, Any]) -> InboundMessage:
        return InboundMessage(channel=self.name, account=self.account.name,
                              chat_id=event["chat"], message_id=event["id"],
                              sender_id="u1", text=event["text"])

    async def send(self, route: Route, payload: OutboundPayload) -> SendResult:
        return SendResult(message_id=f"sent-{route.chat_id}")


class SignedHook(Webhook):
    def verifier(self) -> HmacSignature:
        return HmacSignature(SECRET, header=HEADER, prefix="sha256=")


class Plugin:
    @staticmethod
    @hookimpl
    def register_channels(register):
        register(SignedChannel)


async def serve(tmp_home, plugins=()):
    """A kernel with the echo agent, the gateway's app on 127.0.0.1."""
    config = {"agent": {"kind": "echo"},
              "channels": {"signed": {"accounts": {"main": {"allow_from": ["*"]}}}}}
    harness = KernelHarness(tmp_home, config=config,
                            plugins=[("signed", Plugin), *plugins])
    await harness.__aenter__()
    kernel = harness.kernel
    runner = web.AppRunner(build_app(kernel, "control-token"), access_log=None,
                           shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    transport = kernel.accounts["signed:main"].transport
    return harness, runner, transport, f"http://{host}:{port}{transport.path}"


def signed(message_id: str, text: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"chat": f"chat-{message_id}", "id": message_id, "text": text}).encode()
    digest = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return body, {"Content-Type": "application/json", HEADER: f"sha256={digest}"}


def committed_ids(path) -> set[str]:
    """The journal's message ids another connection reads: committed rows only."""
    with sqlite3.connect(path) as conn:
        return {row[0] for row in conn.execute("SELECT message_id FROM inbound_journal")}


async def post_all(http: aiohttp.ClientSession, url: str, ids: list[str], text: str,
                   db) -> dict[str, tuple[int, bool]]:
    """POST one message per id at once; for each, its status and whether its journal
    row was committed when the answer arrived."""
    outcomes: dict[str, tuple[int, bool]] = {}

    async def one(message_id: str) -> None:
        body, headers = signed(message_id, text)
        async with http.post(url, data=body, headers=headers) as response:
            await response.read()
            # Read at once, on this loop: the server cannot commit in between.
            outcomes[message_id] = (response.status, message_id in committed_ids(db))

    await asyncio.gather(*(one(message_id) for message_id in ids))
    return outcomes


class Held:
    """An ``inbound_accept`` hook that holds every message until :attr:`gate` is set:
    what it holds stays in the kernel's accept backlog."""

    def __init__(self) -> None:
        self.gate = anyio.Event()

    @hookimpl
    async def inbound_accept(self, message, account):
        await self.gate.wait()


@contextlib.asynccontextmanager
async def running(tmp_path, plugins=()):
    """The gateway of :func:`serve` with its webhook taking requests, and a client."""
    harness, runner, transport, url = await serve(tmp_path, plugins)
    try:
        async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=100)) as http, \
                anyio.create_task_group() as tg:
            tg.start_soon(transport.run, harness.kernel.receiver)
            await wait_until(lambda: transport.accepting, timeout=5, interval=0.005,
                             what="the webhook taking requests")
            yield harness.kernel, http, url
            tg.cancel_scope.cancel()
    finally:
        await runner.cleanup()
        await harness.__aexit__(None, None, None)


@pytest.fixture
async def gateway(tmp_path):
    async with running(tmp_path) as running_gateway:
        yield running_gateway


async def test_concurrent_posts_share_commits_and_each_200_follows_its_own_commit(gateway):
    kernel, http, url = gateway
    db = kernel.store.path
    posts = 60
    before = kernel.store.commits
    outcomes = await post_all(http, url, [f"m{i}" for i in range(posts)], "hello", db)
    commits = kernel.store.commits - before
    assert outcomes == {f"m{i}": (200, True) for i in range(posts)}
    # One commit a request before; now requests that arrive together share one.
    assert commits < posts, f"{commits} commits for {posts} concurrent requests"
    # A redelivery of them all is answered 200 and journaled no second time.
    again = await post_all(http, url, [f"m{i}" for i in range(posts)], "hello", db)
    assert set(again.values()) == {(200, True)}
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM inbound_journal").fetchone() == (posts,)


async def test_a_failed_shared_commit_answers_no_200_and_keeps_nothing(disk):
    harness, runner, transport, url = await serve(disk.path)
    db = harness.kernel.store.path
    try:
        async with aiohttp.ClientSession() as http, anyio.create_task_group() as tg:
            tg.start_soon(transport.run, harness.kernel.receiver)
            await wait_until(lambda: transport.accepting, timeout=5, interval=0.005,
                             what="the webhook taking requests")
            first = await post_all(http, url, ["before"], "x", db)
            assert first == {"before": (200, True)}
            disk.fill()
            refused: list[str] = []
            answered: dict[str, tuple[int, bool]] = {}
            for round_number in range(50):  # (a commit that fits the WAL's room goes through)
                ids = [f"r{round_number}-{i}" for i in range(10)]
                outcomes = await post_all(http, url, ids, "y" * 20_000, db)
                answered.update(outcomes)
                refused += [m for m, (status, _) in outcomes.items() if status != 200]
                if refused:
                    break
            assert refused, "the full disk never refused a commit"
            for message_id, (status, durable) in answered.items():
                # Never a 200 without the row committed; a refused one is a 503 and
                # left nothing in the journal.
                assert (status, durable) in ((200, True), (503, False)), message_id
            disk.free()
            # The platform sends the refused requests again: journaled now.
            again = await post_all(http, url, refused, "y" * 20_000, db)
            assert set(again.values()) == {(200, True)}
            tg.cancel_scope.cancel()
    finally:
        await runner.cleanup()
        await harness.__aexit__(None, None, None)


def backlogged(kernel) -> float:
    """The webhook requests answered 503 for a full backlog, as ``/metrics`` counts them."""
    return kernel.metrics.registry.get_sample_value(
        "chatkernel_webhook_backlogged_total", {"channel": "signed", "account": "main"}) or 0


@pytest.fixture
async def full_backlog(tmp_path, monkeypatch):
    """A gateway whose pipeline holds what it accepts, with a backlog of two accepted
    messages, already full (``a`` and ``b``), and a webhook's wait for room of 0.3 s."""
    from chatkernel.core.inbound import pipeline

    monkeypatch.setattr(pipeline, "ACCEPT_BACKLOG", 2)
    monkeypatch.setattr(pipeline, "WEBHOOK_ROOM_SECONDS", 0.3)
    held = Held()
    async with running(tmp_path, [("held", held)]) as (kernel, http, url):
        assert await post_all(http, url, ["a", "b"], "held", kernel.store.path) == {
            "a": (200, True), "b": (200, True)}
        yield kernel, http, url, held
        held.gate.set()


async def test_a_full_backlog_answers_503_with_retry_after_and_journals_nothing(
        full_backlog, caplog):
    from chatkernel.core.inbound.pipeline import BACKLOGGED_RETRY_AFTER

    kernel, http, url, held = full_backlog
    db = kernel.store.path
    body, headers = signed("c", "one too many")
    with anyio.fail_after(10):  # answered after its wait, not held
        async with http.post(url, data=body, headers=headers) as response:
            assert response.status == 503
            assert response.headers["Retry-After"] == str(BACKLOGGED_RETRY_AFTER)
            assert "messages waiting: send it again" in (await response.json())["error"]
    assert "c" not in committed_ids(db)
    assert "answered 503 for their platform to send again" in caplog.text
    assert backlogged(kernel) == 1
    held.gate.set()
    await kernel.inbound.wait_settled()
    # The platform's retry is taken once there is room.
    assert await post_all(http, url, ["c"], "one too many", db) == {"c": (200, True)}


async def test_a_request_given_room_within_its_wait_is_answered_200(full_backlog,
                                                                     monkeypatch):
    from chatkernel.core.inbound import pipeline

    kernel, http, url, held = full_backlog
    monkeypatch.setattr(pipeline, "WEBHOOK_ROOM_SECONDS", 30.0)
    waiting = anyio.Event()
    accept_many = kernel.inbound.accept_many

    async def observed(messages, **options):
        if kernel.inbound.backlog() >= pipeline.ACCEPT_BACKLOG:
            waiting.set()
        return await accept_many(messages, **options)

    monkeypatch.setattr(kernel.inbound, "accept_many", observed)
    outcome: dict[str, tuple[int, bool]] = {}
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:

            async def post() -> None:
                outcome.update(await post_all(http, url, ["c"], "waits its turn",
                                              kernel.store.path))

            tg.start_soon(post)
            await waiting.wait()  # the request waits in the full backlog
            held.gate.set()
    assert outcome == {"c": (200, True)}
    assert backlogged(kernel) == 0
