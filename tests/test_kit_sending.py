"""What the kernel decides for a channel's sends: the quoted message on a reply's first
part only, and a file's kind from the channel's size caps (a photo too big goes as a
document; a file over every cap is refused before any request)."""

from __future__ import annotations

import pytest

from chatkernel.channels import ChannelLimits
from chatkernel.testing import KernelHarness, MemoryChannel

pytestmark = pytest.mark.anyio

MB = 1024 * 1024
LIMITS = ChannelLimits(text_limit=50, media_kinds={".jpg": "photo", ".mp4": "video"},
                       default_media_kind="document",
                       media_max_bytes={"photo": 10 * MB, "document": 50 * MB})


def test_a_kind_falls_back_to_the_default_kind_over_its_cap():
    assert LIMITS.media_kind("a.jpg") == "photo" == LIMITS.media_kind("a.JPG", 10 * MB)
    assert LIMITS.media_kind("a.jpg", 10 * MB + 1) == "document"
    assert LIMITS.media_kind("a.mp4", 60 * MB) == "video"  # no cap declared for videos
    assert LIMITS.media_refusal(50 * MB) is None
    assert LIMITS.media_refusal(50 * MB + 1) == \
        "larger than the platform's 50 MB limit for files"
    assert ChannelLimits().media_refusal(10**12) is None  # no caps: nothing refused


async def test_a_group_reply_quotes_its_message_in_its_first_part_only(tmp_path, monkeypatch):
    monkeypatch.setattr(MemoryChannel, "limits", LIMITS)
    async with KernelHarness(tmp_path, config={"agent": {"kind": "echo"}}) as h:
        long = " ".join(f"word{i:02d}" for i in range(20))  # three chunks at 50 characters
        await h.channel.receive(long, chat_id="g1", is_group=True, mentions_bot=True,
                                message_id="msg-7")
        await h.settle()
        sent = h.channel.sent
        assert len(sent) >= 3, [s.text for s in sent]
        assert sent[0].route.reply_to == "msg-7"
        assert all(s.route.reply_to is None for s in sent[1:])
        # The session's route itself still names the message (a later reply quotes it).
        route = await h.kernel.sessions.route("memory:main:g1")
        assert route.reply_to == "msg-7"


async def test_media_kinds_follow_the_size_caps_and_too_big_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(MemoryChannel, "limits", LIMITS)
    async with KernelHarness(tmp_path) as h:
        account = h.kernel.accounts["memory:main"]
        folder = h.kernel.workspace
        folder.mkdir(parents=True, exist_ok=True)
        for name, size in (("small.jpg", 100), ("big.jpg", 11 * MB), ("huge.bin", 51 * MB)):
            with open(folder / name, "wb") as handle:
                handle.truncate(size)
        payloads = await h.kernel.replies.payloads(
            account, "MEDIA: small.jpg\nMEDIA: big.jpg\nMEDIA: huge.bin")
        assert [(p.media_path.name if p.media_path else None, p.media_kind)
                for p in payloads] == [("small.jpg", "photo"), ("big.jpg", "document"),
                                       (None, None)]
        assert payloads[2].text == ("⚠️ upload failed: huge.bin — larger than the "
                                    "platform's 50 MB limit for files")
