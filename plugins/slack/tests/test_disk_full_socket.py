"""A full disk under Socket Mode: the receive loop waits in place until the store
commits again, as the long poll does, rather than dying and coming back with backoff
(after which Slack's redeliveries arrived out of order). A real small file system."""

from __future__ import annotations

import pytest

from chatkernel.testing import open_contract_run
from slack_adapters import SlackSocketAdapter

pytestmark = pytest.mark.anyio


@pytest.mark.slow
async def test_a_full_disk_is_waited_out_in_place_and_order_is_kept(small_disk):
    async with SlackSocketAdapter() as adapter, \
            open_contract_run(adapter, small_disk.path) as run:
        chat, user = adapter.direct_chat(1), adapter.user_id(1)
        await adapter.inject(chat, "before df00z", sender_id=user)
        await run.wait_for_tokens(chat, ["df00z"])
        await run.settle()
        store_health = run.harness.health.store
        small_disk.fill()
        tokens: list[str] = []
        while store_health.failing_since is None:
            # (a commit that fits the WAL's free space goes through: write until the
            # file system refuses one)
            tokens.append(f"df{len(tokens) + 1:03d}z")
            assert len(tokens) < 200, "the full disk never refused a commit"
            await adapter.inject(chat, f"as it fills {tokens[-1]} " + "x" * 3000,
                                 sender_id=user)
            token = tokens[-1]
            await run.wait(lambda: any(token in text for text in run.agent_texts())
                           or store_health.failing_since is not None,
                           what=f"{token} taken in, or the store failing",
                           state=run.check_loop)
        for n in range(5):  # refused by the store while its commits fail
            tokens.append(f"df{900 + n}z")
            await adapter.inject(chat, f"while full {tokens[-1]}", sender_id=user)
        failures = store_health.failures
        await run.wait(lambda: store_health.failures >= failures + 3,
                       what="the store refusing commits a while", state=run.check_loop)
        run.check_loop()  # the receive loop is alive, waiting
        small_disk.free()
        await run.wait_for_tokens(chat, tokens)
        await run.settle()
        assert run.tokens_sent(chat, ["df00z", *tokens]) == ["df00z", *tokens], run.texts(chat)
        assert sum(1 for text in run.agent_texts() for t in tokens if t in text) == len(tokens)
