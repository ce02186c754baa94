"""``chatkernel heartbeat``: the heartbeats' status, and waking one by hand."""

from __future__ import annotations

import json
from typing import Any

import click

from chatkernel.cli import cli
from chatkernel.cli.client import running_gateway
from chatkernel.cli.local import STORE, load_config, with_store
from chatkernel.cli.options import config_option
from chatkernel.cli.render import ago


#: The tables a heartbeat's settings come from.
HEARTBEATS = ("heartbeat", "agent.heartbeat", "agents.*.heartbeat")


@cli.group()
@config_option
def heartbeat() -> None:
    """Heartbeats: their status, and waking one by hand."""


def _local_heartbeats(config_file: str | None) -> dict[str, Any]:
    """The heartbeats as the store and the config describe them (no gateway runs, so
    none is scheduled)."""
    import time

    from chatkernel.core.heartbeat.jobs import MAIN, describe_state
    from chatkernel.core.heartbeat.settings import (
        AGENT_PREFIX,
        heartbeat_settings,
        heartbeat_wanted,
        job_agent,
    )
    from chatkernel.core.store.base import HeartbeatState

    config, _ = load_config(config_file, uses=(*STORE, *HEARTBEATS))
    states = with_store(config_file, lambda store: store.list_heartbeats())
    agents = {AGENT_PREFIX + name for name in config.agent_heartbeats()}
    # Not the stored state of an agent whose table no longer asks for a heartbeat...
    states = [state for state in states if state.session_key or state.id == MAIN
              or state.id in agents]
    known = {state.id for state in states}
    # ...and those no gateway has started yet.
    states[:0] = [HeartbeatState(id=heartbeat_id)
                  for heartbeat_id in [MAIN, *sorted(agents)] if heartbeat_id not in known]
    now = time.time()
    heartbeats = [describe_state(state, heartbeat_settings(config, state), now,
                                 wanted=heartbeat_wanted(config, job_agent(state.id) or
                                                         "default"))
                  for state in states]
    return {"heartbeats": heartbeats, "now": now, "scheduled": False}


@heartbeat.command("status")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def heartbeat_status(config_file: str | None, as_json: bool) -> None:
    """Every heartbeat: interval, prompt, last run, time to the next.

    Asks the running gateway; when none runs, nothing is scheduled, and it shows what
    the config and the state database say.
    """
    from chatkernel.core.gateway.control import call

    info = running_gateway()
    if info is not None:
        status, answer = call(info, "/control/heartbeat/status", {})
        if status >= 400:
            raise click.ClickException(answer.get("error", f"the gateway answered {status}"))
        answer["via"] = "gateway"
    else:
        answer = {**_local_heartbeats(config_file), "via": "local"}
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    live = answer["via"] == "gateway"
    if not live:
        click.echo("No gateway is running, so no heartbeat is scheduled. As the config and "
                   "the state database stand:")
    for item in answer["heartbeats"]:
        click.echo(_heartbeat_line(item, live=live))
    if live and not answer.get("scheduled", True):
        click.echo("Nothing is scheduled.")
    if not any(item["kind"] == "session" for item in answer["heartbeats"]):
        click.echo("A chat sets a heartbeat of its own with: /heartbeat every 2h <what to "
                   "check>.")


def _heartbeat_line(item: dict[str, Any], *, live: bool) -> str:
    """One heartbeat in a line (and its prompt below); ``live``: as the running gateway
    schedules it, else as it would be once one runs."""
    from chatkernel.core.durations import format_interval

    if item.get("off"):
        line = (f"{item['id']}  off: the config has no [heartbeat] table (a manual wake still "
                "runs it; docs/heartbeats.md)")
        return line + "".join(f"  {part}" for part in _last_run(item))
    target = item["session"] if item["kind"] == "session" else f"target {item['target']}"
    parts = [item["id"], f"every {item['every']}", target]
    due_in = item.get("next_in_seconds")
    if item.get("paused"):
        parts.append("paused")
    elif item.get("running"):
        parts.append("running now")
    elif item.get("waiting_for"):
        parts.append(f"due, waits for {item['waiting_for']} to be idle")
    elif not item.get("every_seconds"):
        parts.append("not timed (every = 0): wake only")
    elif live and due_in is not None:
        parts.append(f"next in {format_interval(due_in)}")
    elif due_in is None:
        parts.append("first run one interval after a gateway starts")
    elif due_in > 0:
        parts.append(f"due in {format_interval(due_in)}, if a gateway runs by then")
    else:
        parts.append("overdue: runs once as soon as a gateway starts")
    parts.extend(_last_run(item))
    if item.get("wake_texts"):
        parts.append(f"{len(item['wake_texts'])} wake note(s) waiting")
    prompt = " ".join((item.get("prompt") or "").split())
    if len(prompt) > 60:
        prompt = prompt[:59] + "…"
    return "  ".join(parts) + (f"\n    {prompt}" if prompt else "")


def _last_run(item: dict[str, Any]) -> list[str]:
    """A heartbeat's last run and outcome, and where its log is (none: never ran)."""
    if item.get("last_run_at"):
        parts = [f"last run {ago(item['last_run_at'])}: {item['last_outcome']}"]
    elif item.get("last_outcome"):
        parts = [f"last: {item['last_outcome']}"]
    else:
        return []
    if item.get("log_session"):
        parts.append(f"log: chatkernel sessions history {item['log_session']}")
    return parts


@heartbeat.command("wake")
@click.option("--text", help="A note for the agent, added to the heartbeat's prompt.")
@click.option("--mode", type=click.Choice(["now", "next"]), default="now", show_default=True,
              help="now: run at once (when its session is idle); next: the note waits for "
                   "the next scheduled run.")
@click.option("--session", "session_key", metavar="KEY",
              help="Wake a session heartbeat (default: the config heartbeat).")
@click.option("--agent", metavar="NAME",
              help="Wake that agent's heartbeat (default: the default agent's).")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def heartbeat_wake(text: str | None, mode: str, session_key: str | None, agent: str | None,
                   as_json: bool) -> None:
    """Wake a heartbeat of the running gateway by hand."""
    from chatkernel.core.gateway.control import call

    info = running_gateway()
    if info is None:
        raise click.ClickException("no gateway is running: a wake needs the running gateway "
                                   "(start it with: chatkernel run)")
    status, answer = call(info, "/control/heartbeat/wake",
                          {"text": text, "mode": mode, "session": session_key,
                           "agent": agent})
    if status >= 400:
        raise click.ClickException(answer.get("error", f"the gateway answered {status}"))
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    name = answer["heartbeat"]["id"]
    if mode == "now":
        click.echo(f"woke heartbeat {name}: it runs as soon as its session is idle")
    else:
        click.echo(f"the note waits for the next run of heartbeat {name}")
