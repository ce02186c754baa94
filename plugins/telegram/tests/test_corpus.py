"""Real Updates, from the public test data of Telegram bot libraries
(tests/data/corpus/README.md), through the channel's own poll path against the fake Bot
API: none raises or is refused as unreadable; a message someone wrote comes in as exactly
one message; one the channel does not read (a location, a poll) is logged as not
answered; any other update (an edit, a reaction, a service message) is no message."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from chatkernel.testing import open_contract_run
from telegram_adapters import TelegramAdapter

pytestmark = pytest.mark.anyio

CORPUS = json.loads((Path(__file__).parent / "data" / "corpus" / "updates.json").read_text())


class EveryKindAdapter(TelegramAdapter):
    """Asks getUpdates for every kind of update the corpus has, so each one is fed."""

    def account_config(self) -> dict:
        kinds = {kind for entry in CORPUS for kind in entry["update"] if kind != "update_id"}
        return {**super().account_config(), "allowed_updates": sorted(kinds)}


@pytest.mark.parametrize("entry", CORPUS, ids=[entry["name"] for entry in CORPUS])
async def test_a_captured_update_is_read_as_the_platform_meant_it(tmp_path, caplog, entry):
    caplog.set_level(logging.INFO)
    update = {key: value for key, value in entry["update"].items() if key != "update_id"}
    async with EveryKindAdapter() as adapter:
        async with open_contract_run(adapter, tmp_path / "kernel") as run:
            adapter.api.inject_update(update)
            await run.wait(lambda: not adapter.api.pending_updates(),
                           what="the update confirmed by the next poll")
            await run.settle()
            delivered = [message for message, _ in run.deliveries]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
    not_answered = [r.getMessage() for r in caplog.records if "not answered" in r.getMessage()]
    outcome = ("message" if len(delivered) == 1 and not not_answered else
               "not answered" if not delivered and len(not_answered) == 1 else
               "none" if not delivered and not not_answered else
               f"{len(delivered)} messages, {len(not_answered)} not answered")
    assert outcome == entry["expect"], (outcome, delivered, not_answered)
