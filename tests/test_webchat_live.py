"""The web chat shows a live reply: ``preview`` events on the page's event stream while
the agent writes, then the answer as one ``message`` (in the transcript, once), then the
draft's removal. A real gateway process, the echo agent typing a word every 300 ms."""

from __future__ import annotations

import http.client
import json
import urllib.parse

import pytest

from chatkernel.testing.process import gateway_process

WORDS = [f"word{n:02d}" for n in range(8)]


def events(url: str, chat_id: str, then: str, until: int = 60) -> list[tuple[str, dict]]:
    """The event stream's events once ``then`` is posted, read until the bot's message
    and what follows it at once (bounded: ``until`` events, a 10 s socket timeout)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    conn.request("GET", f"/webchat/events?chat_id={chat_id}")
    response = conn.getresponse()
    assert response.status == 200
    post(url, chat_id, then)
    seen: list[tuple[str, dict]] = []
    kind, answered = "", False
    try:
        while len(seen) < until:
            line = response.readline().decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[len("event: "):]
            elif line.startswith("data: "):
                seen.append((kind, json.loads(line[len("data: "):])))
                if kind == "message" and seen[-1][1]["role"] == "bot":
                    answered = True
                elif answered and kind == "preview" and seen[-1][1]["text"] is None:
                    break  # the draft is gone: the page shows the answer alone
    finally:
        conn.close()
    return seen


def post(url: str, chat_id: str, text: str) -> None:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    conn.request("POST", "/webchat/messages", body=json.dumps(
        {"chat_id": chat_id, "user_id": "u1", "text": text}),
        headers={"Content-Type": "application/json"})
    assert conn.getresponse().status == 202
    conn.close()


@pytest.mark.slow
def test_the_page_sees_the_answer_written_then_sent_once(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[agent]\nkind = "echo"\necho_typing_ms = 300\n'
                                      '[queue]\ndebounce_ms = 0\n')
    text = " ".join(WORDS)
    with gateway_process(home) as gateway:
        seen = events(gateway.url, "c1", then=text)
    previews = [data["text"] for kind, data in seen if kind == "preview" and data["text"]]
    assert len(previews) >= 3, seen
    assert all(b.startswith(a) for a, b in zip(previews, previews[1:])), previews
    bot = [data["text"] for kind, data in seen if kind == "message" and data["role"] == "bot"]
    assert bot == [text]
    kinds = [kind for kind, data in seen if kind == "preview" or data.get("role") == "bot"]
    assert kinds[-2:] == ["message", "preview"]  # the answer, then the draft's removal


@pytest.mark.anyio
async def test_a_late_update_does_not_bring_an_answered_draft_back(tmp_path):
    """An update of a preview still on its way when the answer was sent (the coalescer's
    last) is dropped: the page would otherwise show a draft under the answer for good."""
    from chatkernel.sdk.live import Preview
    from chatkernel.sdk.models import OutboundPayload, Route
    from chatkernel.testing import KernelHarness

    config = {"channels": {"webchat": {"accounts": {"default": {}}}}}
    async with KernelHarness(tmp_path, config=config) as h:
        channel = h.kernel.accounts["webchat:default"].channel
        route = Route("webchat", "default", "c1")
        preview_id = await channel.start_preview(route, "draft", OutboundPayload(text="Here"))
        await channel.send(route, OutboundPayload(text="Here is all of it"))
        assert channel._previews == {}
        await channel.update_preview(route, Preview("draft", preview_id, "Here"),
                                     OutboundPayload(text="Here is"))
        assert channel._previews == {}  # still gone
        await channel.start_preview(route, "draft", OutboundPayload(text="Next"))
        assert list(channel._previews["c1"].values()) == ["Next"]  # a new answer's shows
