"""WhatsApp users with a username: a sender known by a business-scoped user id (BSUID)
with or without a phone number is one chat and one session, answered by the id Meta
can deliver to, admitted by an allowlist naming any of their ids, followed when the id
changes. Through the fake Graph API and the real kernel."""

from __future__ import annotations

import pytest

from chatkernel.testing import open_contract_run
from chatkernel_whatsapp.api import GraphAPI
from chatkernel_whatsapp.testing import WhatsAppAdapter

pytestmark = pytest.mark.anyio

#: A user Meta shows only by BSUID (a username, no shared phone number).
HIDDEN = "US.13491208655302741918"
PHONE, BOTH = "15550100007", "15550100008"


@pytest.fixture
async def adapter():
    async with WhatsAppAdapter() as adapter:
        yield adapter


def metric(run, name: str, **labels: str) -> float:
    return run.harness.metric(name, **{"channel": "whatsapp", "account": "main", **labels}) or 0.0


def sessions(run, *tokens: str) -> set[str]:
    return {run.turn_for(token).session_key for token in tokens}


async def test_bsuid_only_phone_only_and_both_ids_are_each_answered_once_in_one_session(
        adapter, tmp_path):
    async with open_contract_run(adapter, tmp_path) as run:
        graph = adapter.graph
        for n in (1, 2):
            graph.inject_messages([graph.message(HIDDEN, f"hidden {n} bh0{n}z")],
                                  names={HIDDEN: ""}, usernames={HIDDEN: "ada.lovelace"})
            graph.inject_messages([graph.message(PHONE, f"phone {n} ph0{n}z")], user_ids=False)
            graph.inject_messages([graph.message(BOTH, f"both {n} bo0{n}z")])
        await run.settle()
        await run.wait_for_tokens(HIDDEN, ["bh01z", "bh02z"])
        await run.wait_for_tokens(PHONE, ["ph01z", "ph02z"])
        await run.wait_for_tokens(BOTH, ["bo01z", "bo02z"])
        for user, tokens in ((HIDDEN, ["bh01z", "bh02z"]), (PHONE, ["ph01z", "ph02z"]),
                             (BOTH, ["bo01z", "bo02z"])):
            assert run.tokens_sent(user, tokens) == tokens, run.texts(user)  # once each
            assert len(sessions(run, *tokens)) == 1, user
        assert sessions(run, "bh01z") == {f"whatsapp:main:{HIDDEN}"}
        assert sessions(run, "ph01z") == {f"whatsapp:main:{PHONE}"}
        # A sender with a BSUID is keyed by it; their phone is an alias of it.
        assert sessions(run, "bo01z") == {f"whatsapp:main:{graph.user_id(BOTH)}"}
        # No name, a username: the username is who they are.
        assert "user: US.13491208655302741918 (ada.lovelace)" in run.turn_for("bh01z").envelope


async def test_a_reply_to_a_user_without_a_phone_goes_by_recipient(adapter, tmp_path):
    async with open_contract_run(adapter, tmp_path) as run:
        graph = adapter.graph
        graph.inject_messages([graph.message(HIDDEN, "hello rc01z")])
        graph.inject_messages([graph.message(BOTH, "hello rc02z")])
        await run.wait_for_tokens(HIDDEN, ["rc01z"])
        await run.wait_for_tokens(BOTH, ["rc02z"])
        hidden, = graph.sent(HIDDEN)
        assert hidden.addressed_by == "recipient"
        assert hidden.body["recipient"] == HIDDEN and "to" not in hidden.body
        both, = graph.sent(BOTH)  # the phone is known: "to", which Meta prefers
        assert both.body["to"] == BOTH and "recipient" not in both.body


async def test_a_user_first_seen_by_phone_stays_one_session_when_their_bsuid_comes(
        adapter, tmp_path):
    async with open_contract_run(adapter, tmp_path) as run:
        graph = adapter.graph
        bsuid = graph.user_id(PHONE)
        graph.inject_messages([graph.message(PHONE, "before bsuids pb01z")], user_ids=False)
        await run.wait_for_tokens(PHONE, ["pb01z"])
        graph.inject_messages([graph.message(PHONE, "with both pb02z")])
        await run.wait_for_tokens(PHONE, ["pb02z"])
        graph.inject_messages([graph.message(bsuid, "username only pb03z")])
        await run.wait_for_tokens(bsuid, ["pb03z"])
        # The chat began under the phone: it keeps that key, the BSUID is its alias.
        assert sessions(run, "pb01z", "pb02z", "pb03z") == {f"whatsapp:main:{PHONE}"}
        assert graph.sent(PHONE)[-1].body["recipient"] == bsuid


async def test_both_ids_then_phone_only_then_bsuid_only_stay_one_session(adapter, tmp_path):
    async with open_contract_run(adapter, tmp_path) as run:
        graph = adapter.graph
        bsuid = graph.user_id(BOTH)
        graph.inject_messages([graph.message(BOTH, "both ids bp01z")])
        await run.wait_for_tokens(BOTH, ["bp01z"])
        graph.inject_messages([graph.message(BOTH, "phone only bp02z")], user_ids=False)
        await run.wait_for_tokens(BOTH, ["bp02z"])
        graph.inject_messages([graph.message(bsuid, "bsuid only bp03z")])
        await run.wait_for_tokens(BOTH, ["bp03z"])
        assert sessions(run, "bp01z", "bp02z", "bp03z") == {f"whatsapp:main:{bsuid}"}


async def test_a_failed_status_named_by_recipient_user_id_surfaces(adapter, tmp_path):
    async with open_contract_run(adapter, tmp_path) as run:
        graph = adapter.graph
        graph.fail_delivery(HIDDEN, code=131026, title="Message undeliverable",
                            details="The recipient cannot receive this message")
        graph.inject_messages([graph.message(HIDDEN, "hello fs01z")])
        await run.wait_for_tokens(HIDDEN, ["fs01z"])  # accepted: it has an id
        await run.wait(lambda: metric(run, "chatkernel_send_failures_total") == 1,
                       what="the failed status surfaced")
        failed = [n.body["entry"][0]["changes"][0]["value"]["statuses"][0]
                  for n in graph.notifications if '"failed"' in str(n.body).replace("'", '"')]
        assert failed and "recipient_id" not in failed[0]
        assert failed[0]["recipient_user_id"] == HIDDEN
        assert await run.harness.sent_status(
            "whatsapp", graph.sent(HIDDEN)[0].wamid) == "failed"


@pytest.mark.parametrize("listed", ["bsuid", "phone"])
async def test_allow_from_admits_a_user_by_their_bsuid_or_their_phone(adapter, tmp_path,
                                                                       listed):
    bsuid = adapter.graph.user_id(BOTH)
    allowed = {"bsuid": bsuid, "phone": BOTH}[listed]
    async with open_contract_run(adapter, tmp_path, allow_from=[allowed, HIDDEN],
                                 account_settings={"dm_policy": "allowlist"}) as run:
        graph = adapter.graph
        graph.inject_messages([graph.message(HIDDEN, "let me in af01z")])
        graph.inject_messages([graph.message(BOTH, "me too af02z")])
        graph.inject_messages([graph.message("15550100009", "and me af03z")])
        await run.wait_for_tokens(HIDDEN, ["af01z"])
        await run.wait_for_tokens(BOTH, ["af02z"])
        # Later without their phone (a username now): still the user the list names.
        graph.inject_messages([graph.message(bsuid, "no phone now af04z")])
        await run.wait_for_tokens(bsuid, ["af04z"])
        await run.settle()
        assert "af03z" not in " ".join(run.agent_texts())  # not listed: refused
        assert any("Your id is" in text for text in run.texts("15550100009"))


async def test_a_changed_bsuid_continues_the_chat(adapter, tmp_path):
    async with open_contract_run(adapter, tmp_path) as run:
        graph = adapter.graph
        graph.inject_messages([graph.message(HIDDEN, "first uc01z")])
        await run.wait_for_tokens(HIDDEN, ["uc01z"])
        changed = graph.user_id_update(HIDDEN)
        graph.inject_messages([graph.message(changed, "again uc02z")])
        await run.wait_for_tokens(changed, ["uc02z"])
        assert sessions(run, "uc01z", "uc02z") == {f"whatsapp:main:{HIDDEN}"}
        assert graph.sent(changed)[-1].body["recipient"] == changed  # the id Meta knows now
        # A changed number: the new phone and its BSUID continue the same chat.
        graph.user_id_update(changed, phone="15550100010")
        graph.inject_messages([graph.message("15550100010", "new number uc03z")])
        await run.wait_for_tokens("15550100010", ["uc03z"])
        assert sessions(run, "uc03z") == {f"whatsapp:main:{HIDDEN}"}


async def test_the_fake_takes_recipient_and_prefers_to_when_both_are_given():
    from chatkernel_whatsapp.fake import FakeGraph

    async with FakeGraph() as graph:
        graph.inject_messages([graph.message(HIDDEN, "hi"), graph.message(PHONE, "hi")])
        client = GraphAPI(graph.token, graph.phone_number_id, graph.base_url)
        await client.send_message(("recipient", HIDDEN), "text", {"body": "by bsuid"})
        await client.call("POST", f"{graph.phone_number_id}/messages", json={
            "messaging_product": "whatsapp", "recipient_type": "individual", "to": PHONE,
            "recipient": graph.user_id(PHONE), "type": "text", "text": {"body": "both"}})
        await client.close()
        by_bsuid, both = graph.sent_messages
        assert (by_bsuid.to, by_bsuid.addressed_by) == (HIDDEN, "recipient")
        assert (both.to, both.addressed_by) == (PHONE, "to")
        assert graph.sent(graph.user_id(PHONE)) == [both]  # either id names the user
