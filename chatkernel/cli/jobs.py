"""``chatkernel jobs``: scheduled jobs, listed, added, removed, run by hand, and their
history (docs/jobs.md). Each asks the running gateway; with none, a kernel of its own does
it (which schedules nothing)."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from chatkernel.cli import cli
from chatkernel.cli.client import control_or_direct, running_gateway
from chatkernel.cli.options import config_option
from chatkernel.cli.render import ago


@cli.group()
@config_option
def jobs() -> None:
    """Scheduled jobs: the agent acting at a time (docs/jobs.md)."""


def _ask(config_file: str | None, action: str, body: dict[str, Any],
         timeout: float = 30.0) -> dict[str, Any]:
    async def direct(kernel, body):
        answer = await getattr(kernel.jobs_control, action)(body)
        if action == "run":  # its answer is queued: let this kernel send it before it ends
            import anyio

            with anyio.move_on_after(30):
                await kernel.outbox.wait_idle()
        return answer

    path = {"test_trigger": "triggers/test", "triggers": "triggers/list"}.get(
        action, f"jobs/{action}")
    return control_or_direct(config_file, f"/control/{path}", body, direct, timeout=timeout)


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def job_line(item: dict[str, Any]) -> str:
    """One job in a line: name, schedule, next run, targets."""
    from chatkernel.core.durations import format_interval

    due = item.get("next_in_seconds")
    when = "no next run" if due is None else f"next in {format_interval(due)}" \
        if due >= 1 else "due now"
    targets = ", ".join(item["deliver_to"]) or "no delivery"
    parts = [item["name"], item["schedule"], when, f"to {targets}"]
    if item["origin"] != "config":
        parts.append(f"added by {item['origin']}")
    last = item.get("last_run")
    if last:
        parts.append(f"last: {last['status']} {ago(last['due_at'])}")
    return "  ".join(parts)


def run_line(run: dict[str, Any]) -> str:
    return (f"{_when(run['due_at'])}  {run['status']:<11}  {run['outcome']}"
            f"  (run {run['run_id']})")


@jobs.command("list")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def jobs_list(config_file: str | None, as_json: bool) -> None:
    """Every job: schedule, next run, targets, last run."""
    answer = _ask(config_file, "list", {})
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    if not answer["jobs"]:
        click.echo("No jobs. Add one to the config ([jobs.<name>]) or with: chatkernel jobs "
                   "add NAME --every 1h --prompt '...'")
    for item in answer["jobs"]:
        click.echo(job_line(item))
    if answer.get("via") != "gateway":
        click.echo("No gateway is running: nothing runs until one starts.")


@jobs.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def jobs_show(name: str, config_file: str | None, as_json: bool) -> None:
    """One job, its prompt and its last runs."""
    answer = _ask(config_file, "show", {"name": name})
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    job = answer["job"]
    click.echo(job_line(job))
    click.echo(f"  prompt: {job['prompt']}")
    click.echo(f"  agent: {job['agent'] or 'default'}  session: {job['session']}  "
               f"catch_up: {job['catch_up']}")
    for run in answer["runs"]:
        click.echo("  " + run_line(run))


@jobs.command("add")
@click.argument("name")
@click.option("--cron", help="A cron expression: minute hour day month weekday.")
@click.option("--tz", help="The cron expression's time zone (an IANA name; default local).")
@click.option("--every", help="An interval: 30m, 2h, 1d.")
@click.option("--at", "at", help="One time, ISO 8601 with an offset: 2026-12-24T09:00+01:00.")
@click.option("--in", "in_", help="One time from now: 20m, 2h.")
@click.option("--prompt", required=True, help="What the agent is asked.")
@click.option("--agent", help="The agent by name (default: the default agent).")
@click.option("--deliver-to", "deliver_to", multiple=True, metavar="CHANNEL:ACCOUNT:CHAT",
              help="Where the answer goes (repeat for several).")
@click.option("--session", type=click.Choice(["isolated", "target"]),
              help="Run in the job's own session (default) or the first target's.")
@click.option("--catch-up", "catch_up", type=click.Choice(["once", "skip"]),
              help="A slot missed while the gateway was down: run it once (default), or skip.")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def jobs_add(name: str, config_file: str | None, as_json: bool, **keys: Any) -> None:
    """Add a job (or replace the one of that name)."""
    spec = {("in" if key == "in_" else key): value for key, value in keys.items()
            if value not in (None, ())}
    if "deliver_to" in spec:
        spec["deliver_to"] = list(spec["deliver_to"])
    answer = _ask(config_file, "add", {"name": name, "spec": spec})
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    click.echo("added: " + job_line(answer["job"]))


@jobs.command("remove")
@click.argument("name")
@config_option
def jobs_remove(name: str, config_file: str | None) -> None:
    """Remove a job added at run time (a config job is removed from the config)."""
    _ask(config_file, "remove", {"name": name})
    click.echo(f"removed job {name}")


@jobs.command("run")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def jobs_run(name: str, config_file: str | None, as_json: bool) -> None:
    """Run a job now, once, besides its schedule; waits for its end."""
    answer = _ask(config_file, "run", {"name": name}, timeout=330.0)
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    run = answer["run"]
    click.echo(f"{name}: {run['status']}: {run['outcome']}")
    if run["status"] not in ("done", "running"):
        raise SystemExit(1)


@jobs.command("history")
@click.argument("name")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def jobs_history(name: str, limit: int, config_file: str | None, as_json: bool) -> None:
    """A job's runs, newest first (trigger:NAME: a trigger's)."""
    answer = _ask(config_file, "history", {"name": name, "limit": limit})
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    if not answer["runs"]:
        click.echo(f"{name} has not run yet")
    for run in answer["runs"]:
        click.echo(run_line(run))


def status_summary(config_file: str | None, config: Any) -> dict[str, Any] | None:
    """The next runs and the last failures, for ``chatkernel status``: from the running
    gateway, else read from the config and the state database (None: nothing to say)."""
    from chatkernel.cli.client import ask_gateway

    if config is None:
        return None
    if running_gateway() is not None:
        _, answer, _ = ask_gateway("/control/jobs/status", {}, 10.0)
        if answer is not None:
            return answer
    import anyio

    from chatkernel.core.jobs.book import JobBook
    from chatkernel.core.store import open_store

    async def read() -> dict[str, Any] | None:
        try:
            store = open_store(config, read_only=True)
            await store.open()
        except Exception:  # no state yet: the jobs have never run
            store = None
        try:
            now = time.time()
            if store is None:
                return {"next": [], "failures": [], "now": now, "scheduled": False}
            book = JobBook(config=lambda: config, store=lambda: store)
            await book.load(now, save=False)
            upcoming = sorted((job.describe(now) for job in book.jobs.values()),
                              key=lambda item: item["next_at"] or float("inf"))
            failures = await store.failed_job_runs(limit=5)
            return {"next": [item for item in upcoming if item["next_at"]][:5],
                    "failures": [run.describe() for run in failures], "now": now,
                    "scheduled": False}
        finally:
            if store is not None:
                await store.close()

    try:
        return anyio.run(read)
    except Exception:
        return None


def status_lines(summary: dict[str, Any] | None) -> list[str]:
    """What ``chatkernel status`` says of the jobs."""
    if not summary or not (summary["next"] or summary["failures"]):
        return []
    from chatkernel.core.durations import format_interval

    lines = ["Jobs:"]
    for item in summary["next"]:
        due = item.get("next_in_seconds") or 0.0
        lines.append(f"  next: {item['name']} in {format_interval(due)} "
                     f"({_when(item['next_at'])})")
    for run in summary["failures"]:
        lines.append(f"  {run['status']}: {run['job']} at {_when(run['due_at'])}: "
                     f"{run['outcome']}")
    return lines
