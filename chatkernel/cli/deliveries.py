"""``chatkernel deliveries``: the failed sends, from the store; retry or discard one."""

from __future__ import annotations

import click

from chatkernel.cli import cli
from chatkernel.cli.client import control_or_direct, presence
from chatkernel.cli.local import read_config_quietly
from chatkernel.cli.options import config_option
from chatkernel.cli.render import ago, redactor, show


@cli.group()
@config_option
def deliveries() -> None:
    """Failed sends: list them, send one again, or discard it."""


@deliveries.command("list")
@click.option("--limit", type=click.IntRange(min=1, max=500), default=50, show_default=True,
              help="How many of the newest failed sends.")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def deliveries_list(config_file: str | None, limit: int, as_json: bool) -> None:
    """The failed sends, newest first: id, account, chat, age, reason, text."""
    _, raw, _, _ = read_config_quietly(config_file)
    answer = control_or_direct(
        config_file, "/control/deliveries/list",
        {"limit": limit, "client": presence("deliveries")},
        lambda kernel, body: kernel.control.deliveries(body))
    redact = redactor(raw)
    failed = answer["failed"]
    if as_json:
        show({"failed": failed, "failed_last_hour": answer["failed_last_hour"]}, None,
             redact, True)
        return
    if not failed:
        click.echo("No failed sends.")
        return
    lines = []
    for item in failed:
        lines.append(f"{item['id']:>6}  {item['account']}  chat {item['chat_id']}  "
                     f"{ago(item['failed_at'])}  part {item['part']}")
        lines.append(f"        {item['reason']}")
        lines.append(f"        {item['preview']}")
    lines.append(f"{answer['failed_last_hour']} failed in the last hour; "
                 "`chatkernel deliveries retry ID` sends one again")
    click.echo(redact("\n".join(lines)))


@deliveries.command("retry")
@click.argument("entry_id", metavar="ID", type=click.IntRange(min=1))
@config_option
def deliveries_retry(config_file: str | None, entry_id: int) -> None:
    """Queue failed send ID again (with the later parts of its reply it held back): sent
    once, after what its chat has queued, under its account's limits."""
    answer = control_or_direct(
        config_file, "/control/deliveries/retry", {"id": entry_id},
        lambda kernel, body: kernel.control.retry_delivery(body))
    parts = ", ".join(str(part) for part in answer["retried"])
    click.echo(f"queued again: {parts} → reply {answer['reply_id']} in {answer['session']}")


@deliveries.command("discard")
@click.argument("entry_id", metavar="ID", type=click.IntRange(min=1))
@config_option
def deliveries_discard(config_file: str | None, entry_id: int) -> None:
    """Forget failed send ID: it is not sent."""
    answer = control_or_direct(
        config_file, "/control/deliveries/discard", {"id": entry_id},
        lambda kernel, body: kernel.control.discard_delivery(body))
    click.echo(f"discarded {answer['discarded']} ({answer['session']})")
