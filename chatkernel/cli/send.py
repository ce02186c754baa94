"""``chatkernel send``: a proactive message through the reply pipeline, and the report of
what became of it (``sessions send`` too)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from chatkernel.cli import cli
from chatkernel.cli.client import EXIT_SEND_UNKNOWN, control_or_direct, running_gateway
from chatkernel.cli.options import config_option


#: ``chatkernel send`` / ``sessions send`` exit codes by outcome (docs/outbound.md).
SEND_EXIT_CODES = {"sent": 0, "accepted": 0, "delivered": 0, "queued": 0, "nothing": 0,
                   "failed": 1, "unknown": EXIT_SEND_UNKNOWN, "pending": 4, "unconfirmed": 5}


def send_and_report(config_file: str | None, body: dict[str, Any], wait: float,
                    no_wait: bool, as_json: bool, wait_delivery: float | None = None) -> None:
    """Send through the running gateway (or directly), report the outcome, exit with it."""
    if no_wait and wait_delivery:
        raise click.UsageError("--no-wait and --wait-delivery contradict each other")
    # Without a gateway this command is the sender: it always waits.
    gateway = running_gateway() is not None
    body = {**body, "wait": 0 if no_wait and gateway else wait,
            "wait_delivery": wait_delivery or 0}
    answer = control_or_direct(
        config_file, "/control/send", body, lambda kernel, body: kernel.control.send(body),
        timeout=wait + (wait_delivery or 0) + 30,
        unanswered="the message may have been queued; it is not sent again")
    _report_send(answer, wait, as_json, wait_delivery)


def _report_send(answer: dict[str, Any], wait: float, as_json: bool,
                 wait_delivery: float | None = None) -> None:
    from chatkernel.core.runtime.control import send_outcome

    outcome = answer.get("outcome") or send_outcome(answer.get("parts"))
    code = SEND_EXIT_CODES.get(outcome, 1)
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        sys.exit(code)
    parts = answer.get("parts") or []
    where = f"{answer.get('account')} → {answer.get('chat_id')}"
    reply = f"reply {answer.get('reply_id')}"
    history = f"see `chatkernel sessions history {answer.get('session')}`"
    if outcome == "nothing":
        click.echo(f"nothing to send to {where}")
    elif outcome == "queued":
        click.echo(f"queued by the running gateway for {where} ({reply}; not waiting for "
                   "the outcome)")
    elif outcome == "sent":
        click.echo(f"sent to {where} ({len(parts)} part(s))")
    elif outcome == "accepted":
        click.echo(f"accepted by the platform for {where} ({len(parts)} part(s)); delivery "
                   f"is reported later: {history} (or wait for it with --wait-delivery)")
    elif outcome == "delivered":
        read = all(part.get("delivery") == "read" for part in parts)
        click.echo(f"delivered to {where} ({len(parts)} part(s){', read' if read else ''})")
    elif outcome == "unconfirmed":
        click.echo(f"accepted by the platform for {where} ({reply}), but no delivery was "
                   f"reported within {wait_delivery:g} s: {history} for what becomes of it",
                   err=True)
        for index, part in enumerate(parts, start=1):
            click.echo(f"  part {index}/{len(parts)}: {part.get('delivery', 'pending')}",
                       err=True)
    elif outcome == "failed" and any(part.get("delivery") == "failed" for part in parts):
        click.echo(f"not delivered to {where} ({reply}): the platform accepted it, then "
                   "reported:", err=True)
        for index, part in enumerate(parts, start=1):
            detail = f": {part['error']}" if part.get("delivery") == "failed" else ""
            click.echo(f"  part {index}/{len(parts)}: {part.get('delivery', 'pending')}"
                       f"{detail}", err=True)
    else:
        later = ("the gateway keeps it queued and sends it when it can"
                 if answer.get("via") == "gateway" else
                 "it stays queued in the state database and goes out when the gateway "
                 "starts")
        headline = {
            "failed": f"not sent to {where} ({reply}):",
            "unknown": f"delivery unknown to {where} ({reply}): the platform did not answer "
                       "after it went out, so it may have arrived; it is not sent again:",
            "pending": f"not sent yet to {where} after {wait:g} s ({reply}): {later}:",
        }.get(outcome, f"{outcome}: {where}")
        click.echo(headline, err=True)
        for index, part in enumerate(parts, start=1):
            detail = f": {part['error']}" if part.get("error") else ""
            click.echo(f"  part {index}/{len(parts)}: {part['status']}{detail}", err=True)
        if not parts:
            click.echo("  the reply was not stored (a commit of the state database failed)",
                       err=True)
    sys.exit(code)


WAIT_HELP = ("Seconds to wait for the outcome (sent, failed with the platform's reason, "
             "delivery unknown).")
NO_WAIT_HELP = ("Only queue it with the running gateway, exit 0 once queued (without a "
                "gateway this command sends, so it waits).")
WAIT_DELIVERY_HELP = ("On a channel that reports delivery later (WhatsApp): also wait up "
                      "to SECONDS for the platform's report (exit 1 if it failed, 5 if "
                      "none came in time). Needs the running gateway.")


@cli.command()
@click.option("--channel", required=True, help="The channel to send on (telegram, ...).")
@click.option("--account", help="The account, when the channel has several.")
@click.option("--to", "to", required=True, metavar="CHAT|last",
              help="A chat id, or 'last' for the account's last active chat.")
@click.option("--thread", help="A thread / topic id within the chat.")
@click.option("--media", multiple=True, type=click.Path(dir_okay=False),
              help="A file to send after the text (repeatable).")
@config_option
@click.option("--wait", type=click.FloatRange(min=0, min_open=True), default=60.0,
              show_default=True, metavar="SECONDS", help=WAIT_HELP)
@click.option("--no-wait", is_flag=True, help=NO_WAIT_HELP)
@click.option("--wait-delivery", type=click.FloatRange(min=0, min_open=True),
              metavar="SECONDS", help=WAIT_DELIVERY_HELP)
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@click.argument("text", default="")
def send(channel: str, account: str | None, to: str, thread: str | None, media: tuple[str],
         config_file: str | None, wait: float, no_wait: bool, wait_delivery: float | None,
         as_json: bool, text: str) -> None:
    """Send TEXT (and files) through the same pipeline as replies, and report what
    became of it.

    Talks to the running gateway; when none runs, sends directly. Exit status: 0 sent
    (or queued, with --no-wait; or accepted, on a channel that reports delivery later);
    1 not sent (the platform's reason, the send policy, a bad target...) or, with
    --wait-delivery, reported failed; 3 delivery unknown; 4 not sent yet when --wait
    ran out; 5 no delivery report within --wait-delivery.
    """
    import os

    body = {"channel": channel, "account": account, "to": to, "thread": thread, "text": text,
            "media": [os.path.abspath(path) for path in media]}
    send_and_report(config_file, body, wait, no_wait, as_json, wait_delivery)
