"""``chatkernel security``: the security audit of a config and its home
(chatkernel.core.health.audit, docs/security-audit.md). Its checks are imported when a
command runs: ``chatkernel --help`` stays fast."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from chatkernel.cli import cli
from chatkernel.cli.options import _require_named_file, config_option

@cli.group()
@config_option
def security() -> None:
    """Check the config and its home for what exposes the gateway."""


@security.command("audit")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@click.option("--fix", is_flag=True,
              help="Tighten the modes of the files named (0600, the home 0700); nothing "
                   "else is changed.")
@config_option
def security_audit(as_json: bool, fix: bool, config_file: str | None) -> None:
    """Find what exposes the gateway or its agent: secrets in plain text, everyone
    admitted to an agent that runs commands, files others can read, a public listen
    address, unsigned webhooks, the gateway's secrets handed to a command agent.

    Reads the config and the files of the home; opens no connection. Exits 1 when a
    finding is critical.
    """
    from chatkernel.cli import _plugin_manager
    from chatkernel.cli.local import read_config_quietly
    from chatkernel.core.config import ConfigError, home_dir, read_raw
    from chatkernel.core.health.audit import audit, critical, fix_modes

    _require_named_file(config_file)
    path, raw, config, config_error = read_config_quietly(config_file)
    if config_error and path.exists():
        click.echo(f"warning: {config_error}; the accounts and agents are not checked",
                   err=True)
        try:  # a file that is TOML but not a valid config: its secrets are still checked
            raw = read_raw(path)
        except ConfigError:
            raw = {}
    pm = _plugin_manager()
    findings = audit(path, home_dir(), raw, config, pm=pm)
    changed = fix_modes(findings) if fix else []
    if changed:  # what is left after the fix
        findings = audit(path, home_dir(), raw, config, pm=pm)
    ok = not critical(findings)
    if as_json:
        data = {"ok": ok, "findings": [finding.as_dict() for finding in findings]}
        if fix:
            data["fixed"] = [{"path": str(change.path), "old_mode": f"{change.old:04o}",
                              "new_mode": f"{change.new:04o}"} for change in changed]
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        for change in changed:
            click.echo(f"fixed {change}")
        if fix and not changed:
            click.echo("no file mode to tighten")
        click.echo(render(findings))
    sys.exit(0 if ok else 1)


def audit_summary(path: Any, raw: dict[str, Any], config: Any) -> dict[str, Any]:
    """What ``chatkernel status`` says of the audit: the number of critical findings and
    the command that shows them (reads files only: no connection, no change)."""
    from chatkernel.core.config import home_dir
    from chatkernel.core.health.audit import audit, critical

    count = len(critical(audit(path, home_dir(), raw, config)))
    return {"critical": count, "command": "chatkernel security audit"}


def render(findings) -> str:
    """The findings as text, one block each, then a count by severity."""
    if not findings:
        return "no findings"
    lines = []
    for finding in findings:
        lines += [f"{finding.severity.upper():8}  {finding.check}: {finding.message}",
                  f"{'':8}  fix: {finding.fix}"]
    counts = {severity: sum(f.severity == severity for f in findings)
              for severity in ("critical", "warn", "info")}
    lines.append(", ".join(f"{count} {severity}" for severity, count in counts.items()))
    return "\n".join(lines)
