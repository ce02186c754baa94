"""``chatkernel triggers``: the inbound triggers, and a test run of one (docs/jobs.md)."""

from __future__ import annotations

import json

import click

from chatkernel.cli import cli
from chatkernel.cli.jobs import _ask, run_line
from chatkernel.cli.options import config_option


@cli.group()
@config_option
def triggers() -> None:
    """Inbound triggers: POST /hooks/<name> runs the agent (docs/jobs.md)."""


@triggers.command("list")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def triggers_list(config_file: str | None, as_json: bool) -> None:
    """Every trigger: its path, credential, targets and last run."""
    answer = _ask(config_file, "triggers", {})
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    if not answer["triggers"]:
        click.echo("No triggers. Add one to the config: [triggers.<name>] (docs/jobs.md).")
    for item in answer["triggers"]:
        targets = ", ".join(item["deliver_to"]) or "no delivery"
        line = f"{item['name']}  POST {item['path']}  {item['credential']}  to {targets}"
        if item["last_run"]:
            line += f"  last: {item['last_run']['status']}"
        click.echo(line)


@triggers.command("test")
@click.argument("name")
@click.option("--body", "body_file", type=click.File("r"),
              help="A file with the JSON body to fill the prompt from (- for stdin).")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def triggers_test(name: str, body_file, config_file: str | None, as_json: bool) -> None:
    """Run a trigger as a request with BODY would (no credential needed: this is the
    gateway's own user), and wait for its end."""
    body = body_file.read() if body_file is not None else "{}"
    answer = _ask(config_file, "test_trigger", {"name": name, "body": body}, timeout=330.0)
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    click.echo(run_line(answer["run"]))
    if answer["run"]["status"] not in ("done", "running", "queued"):
        raise SystemExit(1)
