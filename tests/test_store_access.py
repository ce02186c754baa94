"""Pairing requests and approved senders, the same on both stores (docs/access.md)."""

from __future__ import annotations

import pytest

from chatkernel.core.store.base import PairingRequest
from chatkernel.core.store.sqlite import SQLiteStore
from chatkernel.sdk.codec import decode_message
from chatkernel.sdk.models import InboundMessage

pytestmark = pytest.mark.anyio

T0 = 1_705_320_000.25


@pytest.fixture
def store(any_store):
    """The test runs on each backend (tests/conftest.py)."""
    return any_store


def ask(sender: str, code: str, now: float = T0, *, channel: str = "telegram",
        account: str = "main") -> PairingRequest:
    return PairingRequest(code=code, channel=channel, account=account, sender=sender,
                          name=f"{sender}'s name", chat=f"dm-{sender}", created_at=now,
                          expires_at=now + 3600, last_sent_at=now)


async def request(store, sender, code, now=T0, **where):
    return await store.pairing_request(ask(sender, code, now, **where), resend_after=60,
                                       max_pending=3)


async def test_a_request_is_kept_resent_at_most_once_a_minute_and_capped(store):
    outcome, kept = await request(store, "a", "AAAA2222")
    assert outcome == "new" and kept == ask("a", "AAAA2222")
    assert await request(store, "a", "XXXX2222", T0 + 59) == ("quiet", ask("a", "AAAA2222"))
    outcome, again = await request(store, "a", "YYYY2222", T0 + 60)
    assert outcome == "resend" and again.code == "AAAA2222" and again.last_sent_at == T0 + 60
    assert (await request(store, "b", "AAAA2222"))[0] == "taken"  # the code is a's
    assert (await request(store, "b", "BBBB2222"))[0] == "new"
    assert (await request(store, "c", "CCCC2222"))[0] == "new"
    assert await request(store, "d", "DDDD2222") == ("full", None)
    assert (await request(store, "d", "DDDD2222", account="other"))[0] == "new"
    pending = await store.pairing_requests("telegram", now=T0 + 61)
    assert [(r.sender, r.code) for r in pending] == [
        ("a", "AAAA2222"), ("b", "BBBB2222"), ("c", "CCCC2222"), ("d", "DDDD2222")]
    assert pending[0] == PairingRequest("AAAA2222", "telegram", "main", "a", "a's name",
                                        "dm-a", T0, T0 + 3600, T0 + 60)
    assert await store.pairing_requests("slack", now=T0) == []


async def test_expired_requests_go_and_make_room(store):
    for sender, code in (("a", "AAAA2222"), ("b", "BBBB2222"), ("c", "CCCC2222")):
        await request(store, sender, code)
    assert await store.pairing_requests(now=T0 + 3600) == []
    assert (await request(store, "d", "DDDD2222", T0 + 3600))[0] == "new"
    assert await store.prune_pairing(T0 + 7200) == 1
    assert await store.pairing_requests(now=T0) == []


async def test_approve_deny_revoke(store):
    await request(store, "a", "AAAA2222")
    await request(store, "b", "BBBB2222")
    assert await store.pairing_resolve("telegram", "AAAA2222", approve=True, now=T0 + 5,
                                       account="other") is None
    approved = await store.pairing_resolve("telegram", "AAAA2222", approve=True, now=T0 + 5)
    assert approved.sender == "a"
    assert await store.pairing_resolve("telegram", "AAAA2222", approve=True,
                                       now=T0 + 5) is None  # spent
    assert (await store.pairing_resolve("telegram", "BBBB2222", approve=False,
                                        now=T0 + 5)).sender == "b"
    assert await store.is_approved("telegram", "main", ["a"])
    assert await store.is_approved("telegram", "main", ["x", "a"])
    assert not await store.is_approved("telegram", "main", ["b"])
    assert not await store.is_approved("telegram", "other", ["a"])
    [entry] = await store.approved_senders()
    assert (entry.channel, entry.account, entry.sender, entry.approved_at) == \
        ("telegram", "main", "a", T0 + 5)
    assert await store.approved_senders("slack") == []
    assert await store.pairing_requests(now=T0) == []
    assert await store.revoke_sender("telegram", "main", "a")
    assert not await store.revoke_sender("telegram", "main", "a")
    assert not await store.is_approved("telegram", "main", ["a"])


async def test_an_expired_code_is_not_approved(store):
    await request(store, "a", "AAAA2222")
    assert await store.pairing_resolve("telegram", "AAAA2222", approve=True,
                                       now=T0 + 3600) is None
    assert not await store.is_approved("telegram", "main", ["a"])


async def test_a_rejected_entry_keeps_the_message_given_in_place_of_the_journaled(store):
    message = InboundMessage("telegram", "main", "c", "m1", "s", text="secret")
    seq = await store.journal_inbound(message)
    blank = InboundMessage("telegram", "main", "c", "m1", "s", text="",
                           timestamp=message.timestamp)
    await store.set_journal_status(seq, "rejected", message=blank)
    await store.flush()
    assert await store.journal_inbound(message) is None  # still the dedupe key
    if isinstance(store, SQLiteStore):
        (text,) = store._db.execute("SELECT message FROM inbound_journal").fetchone()
    else:
        text = await store._redis.hget(f"{store.prefix}j:{seq}", "m")
    assert decode_message(text).text == "" and "secret" not in text
