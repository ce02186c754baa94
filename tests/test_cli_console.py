"""``chatkernel console`` and ``chatkernel deliveries`` from the command line."""

from __future__ import annotations

import os

import anyio
import pytest
from click.testing import CliRunner

from chatkernel import cli
from chatkernel.cli.console import console_url
from chatkernel.core.gateway_state import write_state
from chatkernel.core.store.base import OutboxEntry
from chatkernel.core.store.sqlite import SQLiteStore
from chatkernel.sdk.models import OutboundPayload, Route


def test_the_link_has_the_token_in_its_fragment_never_its_query():
    assert console_url("http://127.0.0.1:8787", "a b/c") == \
        "http://127.0.0.1:8787/ui/#token=a+b%2Fc"
    assert console_url("http://0.0.0.0:9000", "t") == "http://127.0.0.1:9000/ui/#token=t"
    assert console_url("http://[::]:9000", "t") == "http://[::1]:9000/ui/#token=t"


def test_console_prints_the_running_gateways_link(chatkernel_home):
    runner = CliRunner()
    result = runner.invoke(cli.cli, ["console", "--print-url"])
    assert result.exit_code == 3 and "no gateway is running" in result.output
    write_state(chatkernel_home, "http://127.0.0.1:8799", "the-running-token")
    try:
        result = runner.invoke(cli.cli, ["console", "--print-url"])
    finally:
        os.unlink(chatkernel_home / "gateway.json")
    assert result.exit_code == 0
    assert result.output == "http://127.0.0.1:8799/ui/#token=the-running-token\n"


@pytest.mark.slow  # a kernel of its own per command
def test_deliveries_lists_and_discards_with_no_gateway(chatkernel_home):
    async def fail_one() -> int:
        async with SQLiteStore.at(chatkernel_home / "state.db") as store:
            entry = OutboxEntry(0, "r1", "memory:main:chat-1", "s1", "memory", "main",
                                Route("memory", "main", "chat-1"),
                                OutboundPayload(text="the lost reply"), "pending", None, 0.0)
            await store.outbox_add([entry])
            await store.outbox_mark(entry.id, "failed", "chat not found")
            return entry.id

    entry_id = anyio.run(fail_one)
    runner = CliRunner()
    listed = runner.invoke(cli.cli, ["deliveries", "list"])
    assert listed.exit_code == 0, listed.output
    assert "chat not found" in listed.output and "the lost reply" in listed.output
    assert "1 failed in the last hour" in listed.output
    discarded = runner.invoke(cli.cli, ["deliveries", "discard", str(entry_id)])
    assert discarded.exit_code == 0 and f"discarded {entry_id}" in discarded.output
    again = runner.invoke(cli.cli, ["deliveries", "retry", str(entry_id)])
    assert again.exit_code == 1 and "no failed send" in again.output
    assert "No failed sends." in runner.invoke(cli.cli, ["deliveries", "list"]).output
