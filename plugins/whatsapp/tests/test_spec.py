"""The fake Graph API against Meta's published OpenAPI description: the shipped extract
is what the description gives, the validator agrees with the description's own
examples, and what the fake answers and posts (and what the client sends it, which the
fake refuses otherwise) has the published shapes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from chatkernel_whatsapp import spec
from chatkernel_whatsapp.api import GraphAPI
from chatkernel_whatsapp.fake import FakeGraph

pytestmark = pytest.mark.anyio
DATA = Path(__file__).parent / "data"
#: Examples the description publishes that its own schema refuses (a system message
#: without contacts, group events): not what the fake posts.
NONCONFORMING = {"System Message", "Group Create Message", "Group Settings Update",
                 "Group Remove Participants"}


@pytest.mark.slow
def test_the_shipped_extract_is_the_published_descriptions():
    published = yaml.load((DATA / "whatsapp-business-messaging-api-v23.0.yaml").read_text(),
                          Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    shipped = json.loads((Path(spec.__file__).parent / spec.SCHEMAS_FILE).read_text())
    assert spec.extract(published) == shipped


def test_the_descriptions_webhook_examples_validate():
    for name, example in spec.webhook_examples().items():
        found = spec.problems(example, "WebhookPayload")
        assert (found != []) == (name in NONCONFORMING), (name, found)


def test_the_validator_refuses_what_meta_refuses():
    good = {"messaging_product": "whatsapp", "recipient_type": "individual", "to": "1",
            "type": "text", "text": {"body": "hi"}}
    assert spec.problems(good, "Message") == []
    assert spec.problems({**good, "txt": 1}, "Message") == ["$: unknown property 'txt'"]
    assert spec.problems({**good, "type": "fax"}, "Message")
    assert spec.problems({k: v for k, v in good.items() if k != "to"}, "Message")
    both = {**good, "type": "image", "image": {"id": "1", "link": "https://e.com/a.jpg"}}
    assert "matches 2 of oneOf" in " ".join(spec.problems(both, "Message"))


async def test_the_fakes_answers_and_notifications_have_the_published_shapes(tmp_path):
    async with FakeGraph() as graph:
        client = GraphAPI(graph.token, graph.phone_number_id, graph.base_url)
        graph.last_user_message["15550001111"] = time.time()
        assert spec.problems(await client.phone_number(), "PhoneNumberInfo") == []
        path = tmp_path / "a.png"
        path.write_bytes(b"\x89PNG")
        media_id = await client.upload(path, "image/png")
        assert spec.problems(await client.media_info(media_id), "MediaUrl") == []
        answer = await client.call("POST", f"{graph.phone_number_id}/messages", json={
            "messaging_product": "whatsapp", "recipient_type": "individual",
            "to": "15550001111", "type": "image", "image": {"id": media_id}})
        assert spec.problems(answer, "MessageResponse") == []
        refused = await client.http.request("POST", f"{graph.phone_number_id}/messages",
                                            json={"messaging_product": "whatsapp", "to": "1"})
        assert refused.status == 400 and refused.json()["error"]["code"] == 100
        assert spec.problems(refused.json(), "GraphAPIError") == []
        graph.fail_delivery("15550001111")
        graph.inject_messages([graph.message("15550001111", "hi"),
                               graph.message("15550001111", image={"id": media_id,
                                                                   "mime_type": "image/png"})])
        await client.send_message("15550001111", "text", {"body": "yo"})
        await graph.wait_until(lambda: len(graph.notifications) >= 3)
        for notification in graph.notifications:
            assert spec.problems(notification.body, "WebhookPayload") == [], notification
        await client.close()


async def test_the_fakes_contacts_carry_metas_user_id_beside_the_wa_id():
    async with FakeGraph() as graph:
        notification = graph.inject_messages([graph.message("15550001111", "a"),
                                              graph.message("15550002222", "b")])
        value = notification.body["entry"][0]["changes"][0]["value"]
        contacts = {c["wa_id"]: c["user_id"] for c in value["contacts"]}
        assert set(contacts) == {"15550001111", "15550002222"}
        assert len(set(contacts.values())) == 2 and all(
            u.startswith("US.") for u in contacts.values())
        again = graph.inject_messages([graph.message("15550001111", "c")])
        assert again.body["entry"][0]["changes"][0]["value"]["contacts"][0]["user_id"] == \
            contacts["15550001111"]  # the same sender, the same id
