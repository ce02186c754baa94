"""A ``user_id_update`` change moves a chat to the user's new BSUID as the ``system``
message does, and message kinds the channel does not read are logged as not answered.
Through the fake Graph API and the real kernel."""

from __future__ import annotations

import logging

import pytest

from chatkernel.testing import open_contract_run
from chatkernel_whatsapp.testing import WhatsAppAdapter

pytestmark = pytest.mark.anyio

#: A user Meta shows only by BSUID, and the BSUID they get next.
HIDDEN, NEXT = "US.13491208655302741918", "US.24817305912873645029"


@pytest.fixture
async def adapter():
    async with WhatsAppAdapter() as adapter:
        yield adapter


def user_id_update(graph, previous: str, current: str, *, wa_id: str | None = None) -> None:
    """Post a change of the field ``user_id_update``, in the shape integrators document
    for it (its own webhook field, not a ``system`` message)."""
    update = {"detail": "User id has been updated.",
              "user_id": {"previous": previous, "current": current},
              "timestamp": "1700000003"}
    if wa_id is not None:
        update["wa_id"] = wa_id
    metadata = {"display_phone_number": "".join(c for c in graph.display_phone_number
                                                if c.isdigit()),
                "phone_number_id": graph.phone_number_id}
    value = {"messaging_product": "whatsapp", "metadata": metadata,
             "user_id_update": [update], "_field": "user_id_update"}
    graph.post(graph.notification([value]), user=previous)


async def test_a_user_id_update_change_continues_the_chat_under_the_new_bsuid(
        adapter, tmp_path):
    async with open_contract_run(adapter, tmp_path) as run:
        graph = adapter.graph
        graph.inject_messages([graph.message(HIDDEN, "first iu01z")])
        await run.wait_for_tokens(HIDDEN, ["iu01z"])
        user_id_update(graph, HIDDEN, NEXT)
        graph.inject_messages([graph.message(NEXT, "again iu02z")])
        await run.wait_for_tokens(NEXT, ["iu02z"])
        assert {run.turn_for(token).session_key for token in ("iu01z", "iu02z")} == \
            {f"whatsapp:main:{HIDDEN}"}
        assert graph.sent(NEXT)[-1].body["recipient"] == NEXT  # the id Meta knows now
        assert run.tokens_sent(NEXT, ["iu02z"]) == ["iu02z"]  # answered once


async def test_a_user_id_update_naming_the_phone_links_it_to_the_chat_too(adapter, tmp_path):
    async with open_contract_run(adapter, tmp_path) as run:
        graph = adapter.graph
        graph.inject_messages([graph.message(HIDDEN, "first iu03z")])
        await run.wait_for_tokens(HIDDEN, ["iu03z"])
        user_id_update(graph, HIDDEN, NEXT, wa_id="15550100011")
        graph.inject_messages([graph.message("15550100011", "by phone iu04z")], user_ids=False)
        await run.wait_for_tokens("15550100011", ["iu04z"])
        assert run.turn_for("iu04z").session_key == f"whatsapp:main:{HIDDEN}"


@pytest.mark.parametrize(("kind", "content", "said"), [
    ("reaction", {"reaction": {"message_id": "wamid.X", "emoji": "👍"}}, "a reaction"),
    ("order", {"order": {"catalog_id": "1", "product_items": []}}, "an order"),
    ("unsupported", {"errors": [{"code": 131051, "title": "Message type unknown"}]},
     "an unsupported"),
    ("system", {"system": {"type": "customer_identity_changed", "body": "…"}},
     "a system message (customer_identity_changed)"),
])
async def test_a_kind_the_channel_does_not_read_is_logged_as_not_answered(
        adapter, tmp_path, caplog, kind, content, said):
    async with open_contract_run(adapter, tmp_path) as run:
        graph = adapter.graph
        caplog.set_level(logging.INFO, logger="chatkernel.whatsapp")
        unread = graph.message("15550100012", kind=kind, **content)
        graph.inject_messages([unread])
        graph.inject_messages([graph.message("15550100012", "after it nr01z")])
        await run.wait_for_tokens("15550100012", ["nr01z"])
        lines = [r.getMessage() for r in caplog.records if "not answered" in r.getMessage()]
        assert lines == [f"whatsapp:main: message {unread['id']} from 15550100012 not "
                         f"answered: {said}" + ("" if kind == "system" else
                                                " (the channel reads text, replies to "
                                                "buttons and lists, locations, contacts "
                                                "and files)")]
        assert len(run.texts("15550100012")) == 1  # the text alone was answered
