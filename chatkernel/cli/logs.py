"""``chatkernel logs``: the gateway's log file in ``$CHATKERNEL_HOME/logs/``, filtered
(chatkernel.core.logs.read_lines, follow; docs/operations.md, "Logs")."""

from __future__ import annotations

import json
import time

import click

from chatkernel.cli import cli
from chatkernel.cli.options import config_option


@cli.command("logs")
@click.option("--since", metavar="DURATION",
              help="Only lines from the last DURATION (30m, 1h, 2d).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines as they come.")
@click.option("--level", type=click.Choice(["debug", "info", "warning", "error"]),
              help="Only lines at this level or above.")
@click.option("--channel", metavar="C",
              help="Only lines about channel C (telegram) or account C (telegram:main).")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON lines as stored.")
@config_option
def logs_command(since: str | None, follow: bool, level: str | None, channel: str | None,
                 as_json: bool) -> None:
    """Show the gateway's log (what `chatkernel run` wrote to its home's logs/)."""
    from chatkernel.core import config as cfg
    from chatkernel.core import logs
    from chatkernel.core.durations import parse_interval

    start = None
    if since:
        try:
            start = time.time() - parse_interval(since)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--since") from None
    home = cfg.home_dir()
    path = logs.log_dir(home) / logs.LOG_NAME
    if not path.exists() and not follow:
        raise click.ClickException(
            f"no log at {path}: the gateway writes it while it runs (unless [logging] "
            "file = false)")
    lines = (logs.follow(home, start, level, channel) if follow
             else logs.read_lines(home, start, level, channel))
    try:
        for line in lines:
            click.echo(json.dumps(line, ensure_ascii=False) if as_json else render(line))
    except KeyboardInterrupt:
        pass


def render(line: dict) -> str:
    """A line as stderr shows it: time, level, logger, message (and its traceback)."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(line.get("ts") or 0)))
    text = (f"{when} {str(line.get('level', '')).upper():7} {line.get('logger', '')}: "
            f"{line.get('message', '')}")
    if line.get("exc"):
        text += "\n" + str(line["exc"])
    return text
