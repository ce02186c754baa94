"""A webhook channel spread over three gateway processes on one Redis: any instance
takes Meta's POST, journals it and answers 200; the account's owner answers, in order
per user; kill -9 of the owner mid-burst loses nothing and sends nothing twice."""

from __future__ import annotations

import collections

import anyio
import pytest

from chatkernel.testing import (
    BUSY_HINT,
    GatewayInstances,
    RedisStore,
    RoundRobin,
    wait_for_owner,
    wait_until,
)
from chatkernel_whatsapp.fake import FakeGraph
from chatkernel_whatsapp.testing import APP_SECRET, VERIFY_TOKEN

pytestmark = pytest.mark.anyio

LEASE_SECONDS = 2.0
LEASE = "account:whatsapp:main"


def answers(graph: FakeGraph, wa_id: str | None = None) -> list:
    """What the bot sent, but the notes that it is still busy with an earlier message."""
    return [message for message in graph.sent(wa_id) if message.text != BUSY_HINT]


@pytest.mark.slow
async def test_webhooks_spread_over_three_instances_survive_kill_9_of_the_owner(
        tmp_path, redis_server, redis_prefix):
    users, per_user, kills = 10, 6, 2
    async with FakeGraph(app_secret=APP_SECRET, verify_token=VERIFY_TOKEN) as graph, \
            RoundRobin() as front:
        graph.webhooks.delays = (0.05, 0.1, 0.2) + (0.25,) * 80  # Meta retries for days
        config = {
            "store": {"backend": "redis", "url": redis_server, "prefix": redis_prefix,
                      "lease_seconds": LEASE_SECONDS},
            "agent": {"kind": "echo"},
            "queue": {"mode": "followup", "debounce_ms": 0},
            "heartbeat": {"every": "0"},
            "channels": {"webchat": {"enabled": False}, "whatsapp": {
                "rate_limits": {"chat": "100/s", "account": "1000/s"},
                "accounts": {"main": {
                    "access_token": graph.token, "phone_number_id": graph.phone_number_id,
                    "app_secret": APP_SECRET, "verify_token": VERIFY_TOKEN,
                    "api_base": graph.base_url, "allow_from": ["*"]}}}},
        }
        store = RedisStore(url=redis_server, prefix=redis_prefix)
        await store.open()
        try:
            async with GatewayInstances(tmp_path, config) as instances:
                for _ in range(3):
                    await instances.start()

                def spread() -> None:
                    front.backends = [i.url for i in instances.alive]

                spread()
                graph.point_webhook(f"{front.url}/whatsapp/main/webhook")
                expected: dict[str, list[str]] = collections.defaultdict(list)
                killed: set[str] = set()
                for round_ in range(kills + 1):
                    for i in range(per_user):
                        for user in range(users):
                            wa_id = f"4915100000{user:03d}"
                            text = f"round {round_} message {i} from {wa_id}"
                            expected[wa_id].append(text)
                            graph.inject_message(wa_id, text)
                    if round_ == kills:
                        break
                    # real time: the kill comes mid-burst, while real processes answer it.
                    await anyio.sleep(0.5)
                    holder, _ = await wait_for_owner(  # a live one
                        store, LEASE, not_held_by=killed, timeout=LEASE_SECONDS * 5)
                    killed.add(holder)
                    victim = instances.owner(holder)
                    assert victim is not None
                    victim.kill()
                    await victim.process.wait()
                    await instances.start()
                    spread()
                want = {text for texts in expected.values() for text in texts}
                unknown: list = []

                async def accounted_for() -> bool:  # answered, or in flight at a kill
                    unknown[:] = [e for e, _ in await store.outbox_failures(limit=1000)]
                    return want <= {m.text for m in answers(graph)} | \
                        {e.payload.text for e in unknown}

                await wait_until(accounted_for, timeout=90, interval=0.1,
                                 what="every message answered or in flight at a kill",
                                 state=lambda: len(want - {m.text for m in answers(graph)}))
                served = {url for url, count in front.forwarded.items() if count}
        finally:
            await store.close()
    assert len(served) >= 3  # the webhook was spread over the instances
    sent = [message.text for message in answers(graph)]
    assert max(collections.Counter(sent).values()) == 1  # nothing twice
    assert all(entry.status == "unknown" for entry in unknown)  # nothing failed
    unknown_texts = {entry.payload.text for entry in unknown}
    for wa_id, texts in expected.items():  # every message answered, in order per user
        got = [message.text for message in answers(graph, wa_id)]
        # (one in flight at a kill is "delivery unknown": it may have arrived or not)
        assert [t for t in got if t not in unknown_texts] == \
            [t for t in texts if t not in unknown_texts], wa_id
        assert got == [t for t in texts if t in got], wa_id
    assert len(unknown_texts) <= kills * users  # at most a request per chat each kill cut
