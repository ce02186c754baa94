"""Fuzzing the Telegram channel's reading of updates: whatever JSON an update carries, the
receive path neither crashes nor lets a malformed message through. A poison update is
skipped (and journaled as refused), never retried forever."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chatkernel_telegram
from chatkernel.channels import InboundMessage
from chatkernel.testing import KernelHarness, fuzz_examples

BOT = {"id": 999, "is_bot": True, "first_name": "Bot", "username": "chatkernel_bot"}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=10)
# Mostly what Telegram sends, sometimes anything: a message must get far into reading
# before a field of the wrong kind can show a bug.
ids = st.integers(-2**63, 2**63) | st.integers(-2**63, 2**63) | json_values
entities = st.lists(st.fixed_dictionaries(
    {"type": st.sampled_from(["mention", "bot_command", "text_mention", "bold"]) | json_values,
     "offset": st.integers(-3, 40) | json_values, "length": st.integers(-3, 40) | json_values},
    optional={"user": json_values | st.just({"id": 999})}), max_size=3) | json_values
chats = st.fixed_dictionaries({"id": ids}, optional={
    "type": st.sampled_from(["private", "group", "supergroup", "channel"]) | json_values})
users = st.fixed_dictionaries({}, optional={
    "id": ids, "first_name": json_values, "last_name": json_values,
    "username": json_values})
messages = st.fixed_dictionaries({"message_id": ids, "chat": chats}, optional={
    "from": users, "text": st.text(min_size=1, max_size=40) | json_values,
    "caption": json_values,
    "entities": entities, "caption_entities": entities, "date": st.integers(0, 2**40) | json_values,
    "reply_to_message": st.fixed_dictionaries({}, optional={"from": users}) | json_values,
    "message_thread_id": json_values, "is_topic_message": json_values})
updates = st.fixed_dictionaries({"update_id": st.integers(1, 10**9) | json_values},
                                optional={"message": messages | json_values,
                                          "edited_message": messages})


class Recorder:
    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []

    async def __call__(self, message: InboundMessage) -> str:
        self.messages.append(message)
        return "accepted"


def readable(message: InboundMessage) -> bool:
    """What the kernel's validation needs of a channel's message: strings where it
    says strings, a finite timestamp."""
    strings = (message.channel, message.account, message.chat_id, message.message_id,
               message.sender_id, message.text, message.sender_name)
    return (all(isinstance(value, str) for value in strings)
            and (message.thread_id is None or isinstance(message.thread_id, str))
            and isinstance(message.timestamp, float) and message.timestamp == message.timestamp
            and abs(message.timestamp) != float("inf") and message.media == [])


@asynccontextmanager
async def identified_channel(home):
    """A kernel with a Telegram account whose channel knows its bot already: normalizing
    makes no call (its Bot API address refuses every connection)."""
    config = {"channels": {"telegram": {"accounts": {"main": {
        "bot_token": "123456:FUZZ-token-for-tests-only", "api_base": "http://127.0.0.1:9",
        "allow_from": ["*"]}}}}}
    async with KernelHarness(home, config=config, plugins=[
            ("telegram", chatkernel_telegram)]) as h:
        channel = h.account("telegram").channel
        channel.bot, channel.self_id = BOT, "999"
        yield channel


# A kernel per example: 50 by default, 500 under --hypothesis-profile=deep.
@pytest.mark.slow
@settings(max_examples=fuzz_examples(50), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batch=st.lists(updates, max_size=4))
def test_any_update_is_read_or_skipped_never_a_crash(tmp_path_factory, batch):
    home = tmp_path_factory.mktemp("fuzz")

    async def main() -> None:
        async with identified_channel(home) as channel:
            recorder = Recorder()
            with anyio.fail_after(10):
                count = await channel.transport().receive(recorder, batch)
            assert count == len(recorder.messages) <= len(batch)
            for message in recorder.messages:
                assert readable(message), message

    anyio.run(main)


@pytest.mark.parametrize("text", [12345, {"a": 1}, ["x"], 1.5, True])
def test_a_text_that_is_not_a_string_is_refused_by_the_channel(tmp_path, text: Any):
    async def main() -> None:
        async with identified_channel(tmp_path) as channel:
            update = {"update_id": 7, "message": {"message_id": 1, "date": 0, "text": text,
                                                  "chat": {"id": 42, "type": "private"}}}
            with pytest.raises(ValueError, match="not a string"):
                await channel.normalize(update)

    anyio.run(main)
