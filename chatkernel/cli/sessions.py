"""``chatkernel sessions``: list them, read their history, send into them."""

from __future__ import annotations

import json

import click

from chatkernel.cli import cli
from chatkernel.cli.client import control_or_direct
from chatkernel.cli.local import with_store
from chatkernel.cli.options import config_option
from chatkernel.cli.render import ago
from chatkernel.cli.send import NO_WAIT_HELP, WAIT_DELIVERY_HELP, WAIT_HELP, send_and_report


@cli.group()
@config_option
def sessions() -> None:
    """List sessions, read their history, send into them."""


@sessions.command("list")
@click.option("--active-minutes", type=float, metavar="N",
              help="Only sessions active in the last N minutes.")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def sessions_list(config_file: str | None, active_minutes: float | None, as_json: bool) -> None:
    """Sessions, most recently active first."""
    import time

    since = None if active_minutes is None else time.time() - active_minutes * 60
    records = with_store(config_file, lambda store: store.list_sessions(active_since=since))
    if as_json:
        click.echo(json.dumps([{"key": r.key, "session_id": r.session_id, "channel": r.channel,
                                "account": r.account, "chat_id": r.chat_id,
                                "thread_id": r.thread_id, "created_at": r.created_at,
                                "last_active_at": r.last_active_at, "settings": r.settings,
                                "agent": r.agent}
                               for r in records], indent=2))
        return
    if not records:
        click.echo("No sessions" + ("" if since is None else " active in that time") + ".")
        return
    width = max(len(r.key) for r in records)
    agents = max(len("AGENT"), *(len(r.agent) for r in records))
    click.echo(f"{'KEY'.ljust(width)}  {'AGENT'.ljust(agents)}  {'LAST ACTIVE':<12}  SESSION")
    for r in records:
        click.echo(f"{r.key.ljust(width)}  {r.agent.ljust(agents)}  "
                   f"{ago(r.last_active_at):<12}  {r.session_id}")


@sessions.command("history")
@click.argument("key")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True,
              help="How many of the newest entries.")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def sessions_history(config_file: str | None, key: str, limit: int, as_json: bool) -> None:
    """The newest entries of a session's log: messages, replies, notifications."""
    import datetime

    async def read(store):
        entries = await store.read_log(key, limit=limit)
        # A log with no session record is a heartbeat's own (heartbeat:main): shown too.
        if not entries and await store.get_session(key) is None:
            raise click.ClickException(f"no session {key!r} (chatkernel sessions list shows "
                                       "them)")
        return entries

    entries = with_store(config_file, read)
    if as_json:
        click.echo(json.dumps([{"seq": e.seq, "session_id": e.session_id, "role": e.role,
                                "text": e.text, "ts": e.ts, "meta": e.meta}
                               for e in entries], indent=2))
        return
    for e in entries:
        when = datetime.datetime.fromtimestamp(e.ts).strftime("%Y-%m-%d %H:%M:%S")
        click.echo(f"{when}  {e.role:<12}  {e.text}")


@sessions.command("send")
@click.argument("key")
@click.argument("text")
@click.option("--wait", type=click.FloatRange(min=0, min_open=True), default=60.0,
              show_default=True, metavar="SECONDS", help=WAIT_HELP)
@click.option("--no-wait", is_flag=True, help=NO_WAIT_HELP)
@click.option("--wait-delivery", type=click.FloatRange(min=0, min_open=True),
              metavar="SECONDS", help=WAIT_DELIVERY_HELP)
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def sessions_send(config_file: str | None, key: str, text: str, wait: float, no_wait: bool,
                  wait_delivery: float | None, as_json: bool) -> None:
    """Send TEXT into a session (to its current reply route); exit status as `send`'s."""
    send_and_report(config_file, {"session": key, "text": text}, wait, no_wait, as_json,
                    wait_delivery)


@sessions.command("policy")
@click.argument("key")
@click.argument("policy", type=click.Choice(["allow", "deny", "inherit"]))
@config_option
def sessions_policy(config_file: str | None, key: str, policy: str) -> None:
    """Override the send policy for one session (inherit: back to the rules)."""
    answer = control_or_direct(
        config_file, "/control/sessions/policy", {"session": key, "policy": policy},
        lambda kernel, body: kernel.control.set_session_policy(key, policy))
    click.echo(f"{answer['session']}: send policy {answer['policy']}")
