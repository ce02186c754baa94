"""``chatkernel status`` and ``chatkernel health``."""

from __future__ import annotations

import sys
from typing import Any

import click

from chatkernel.cli import cli
from chatkernel.cli.checks import validate_channels
from chatkernel.cli.client import ask_gateway, presence
from chatkernel.cli.local import read_config_quietly, read_local_snapshot
from chatkernel.cli.options import config_option
from chatkernel.cli.render import redactor, show


#: ``chatkernel health`` exit codes besides 0 (healthy).
EXIT_UNHEALTHY = 1
EXIT_UNREACHABLE = 3


@cli.command()
@click.option("--all", "show_all", is_flag=True,
              help="A full read-only diagnosis (versions, plugins, config, state), secrets "
                   "redacted: safe to paste.")
@click.option("--deep", is_flag=True, help="Ask the running gateway for live probes.")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@click.option("--timeout", "timeout_ms", type=click.IntRange(min=1), default=10_000,
              show_default=True, metavar="MS", help="Probe timeout with --deep.")
@config_option
def status(show_all: bool, deep: bool, as_json: bool, timeout_ms: int,
           config_file: str | None) -> None:
    """Gateway, channels and accounts, sessions and recent activity.

    Asks the running gateway; when none runs, shows what the config and the state
    database say (read-only). Never changes anything.
    """
    path, raw, config, config_error = read_config_quietly(config_file)
    info, answer, error = ask_gateway(
        "/control/status", {"live": deep, "timeout_ms": timeout_ms,
                            "client": presence("status --all" if show_all else "status")},
        timeout_ms / 1000 + 5)
    redact = redactor(raw, info)
    counts: dict[str, Any] = {}
    if answer is not None:
        snapshot = answer
    elif config is None:
        if not show_all:
            raise click.ClickException(redact(config_error or "the config cannot be read"))
        snapshot = {"ok": None, "gateway": {"reachable": False, "error": error},
                    "channels": {}, "sessions": {}, "problems": []}
    else:
        snapshot, counts = read_local_snapshot(config, with_store_counts=show_all)
        snapshot["gateway"]["error"] = error if info is not None else None
    for key in ("pid", "accounts", "started_at"):  # the control API's older fields
        snapshot.pop(key, None)
    from chatkernel.cli.security import audit_summary

    snapshot["security"] = audit_summary(path, raw, config)
    from chatkernel.cli.jobs import status_lines, status_summary

    snapshot["jobs"] = status_summary(config_file, config)
    if show_all:
        diagnosis = _diagnosis(path, raw, config, config_error, snapshot, counts,
                               running=answer is not None)
        from chatkernel.core.health.report import render_diagnosis

        show(diagnosis, None if as_json else render_diagnosis(diagnosis), redact, as_json)
    else:
        from chatkernel.core.health.report import render_status

        text = None if as_json else "\n".join([render_status(snapshot),
                                                *status_lines(snapshot["jobs"])])
        show(snapshot, text, redact, as_json)
    if deep and answer is None:
        click.echo(f"error: --deep needs a running gateway for live probes ({redact(error)}); "
                   "chatkernel channels probe checks credentials without one", err=True)
        sys.exit(1)


def _diagnosis(path, raw, config, config_error, snapshot, counts, *,
               running: bool) -> dict[str, Any]:
    import tomli_w

    from chatkernel.cli import _plugin_manager
    from chatkernel.core import config as cfg
    from chatkernel.core.health.report import environment

    problems = [config_error] if config_error else []
    if config is not None:
        # With no gateway, an unset ${ENV} reference is a problem: a start would fail on
        # it. A running gateway resolved them in its own environment, not this shell's.
        strict = not running
        try:
            cfg.parse(raw, path=path, strict_env=strict)
            validate_channels(raw, path, strict_env=strict)
        except cfg.ConfigError as exc:
            problems.append(str(exc))
    pm = _plugin_manager()
    state_path = config.store_path() if config is not None else None
    if state_path is None:
        state = "unknown (the config cannot be read)"
    elif state_path.exists():
        state = f"{state_path} ({state_path.stat().st_size} bytes)"
    else:
        state = f"{state_path} (not created yet)"
    store = {key: value for key, value in counts.items() if key != "state"}
    if "state" in counts:
        store["state database"] = counts["state"]
    return {
        "environment": environment(),
        "home": str(cfg.home_dir()),
        "config_path": str(path),
        "config_exists": path.exists(),
        "state": state,
        "plugins": [info.as_dict() for info in pm.plugin_infos(include_builtins=True)],
        "config_problems": problems,
        "config_text": tomli_w.dumps(cfg.redact(raw)).rstrip("\n"),
        "snapshot": snapshot,
        "store": store,
    }


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Output the snapshot as JSON.")
@click.option("--timeout", "timeout_ms", type=click.IntRange(min=1), default=10_000,
              show_default=True, metavar="MS",
              help="How long each probe, and the gateway, may take.")
@click.option("--verbose", "-v", is_flag=True,
              help="Probe every account now (live), and show every detail.")
@click.option("--wait", "wait", type=click.FloatRange(min=0), is_flag=False, flag_value=30.0,
              default=None, metavar="[SECONDS]",
              help="Wait until the gateway answers and is ready (every account healthy and "
                   "through to its platform), at most SECONDS (default 30).")
@config_option
def health(as_json: bool, timeout_ms: int, verbose: bool, wait: float | None,
           config_file: str | None) -> None:
    """The running gateway's health snapshot.

    Cached probe results by default (refreshed every minute), live probes with
    --verbose. With --wait, first waits for a gateway that is starting (for scripts:
    `chatkernel run &` then `chatkernel health --wait`). Exit status: 0 healthy; 1 an
    account is unhealthy (a probe failed or timed out, a loop failed or is paused); 3
    no gateway answered (within --wait).
    """
    import time

    _, raw, _, _ = read_config_quietly(config_file)
    body = {"live": verbose, "timeout_ms": timeout_ms, "client": presence("health")}
    # The probes take up to the timeout; the snapshot's store reads up to a second more
    # (health.store_timeout_ms) when the store hangs.
    # While waiting, the cached probes (live ones would call the platforms 5 times a
    # second); the last answer is probed live when --verbose asks for it.
    waiting = {**body, "live": False}
    deadline = time.monotonic() + (wait or 0)
    while wait is not None:
        info, answer, error = ask_gateway("/control/health", waiting, timeout_ms / 1000 + 2)
        if (answer is not None and _ready(answer)) or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if wait is None or (verbose and answer is not None):
        info, answer, error = ask_gateway("/control/health", body, timeout_ms / 1000 + 2)
    redact = redactor(raw, info)
    if answer is None:
        if wait is not None:
            error = f"no gateway answered within {wait:g} s (last: {error})"
        if as_json:
            show({"ok": False, "gateway": {"reachable": False, "error": error}}, None,
                 redact, True)
        else:
            click.echo(redact(f"unreachable: {error}"), err=True)
        sys.exit(EXIT_UNREACHABLE)
    from chatkernel.core.health.report import render_health

    show(answer, None if as_json else render_health(answer, verbose=verbose), redact, as_json)
    if wait is not None and answer.get("ok") and not _ready(answer):
        click.echo(f"not ready after {wait:g} s: an account has not reached its platform "
                   "yet", err=True)
        sys.exit(EXIT_UNHEALTHY)
    sys.exit(0 if answer.get("ok") else EXIT_UNHEALTHY)


def _ready(snapshot: dict[str, Any]) -> bool:
    """Healthy, and every enabled account through to its platform: its loop heard from
    it, or its probe passed (an account still ``starting`` may not have reached it)."""
    from chatkernel.core.health.report import accounts_of

    if not snapshot.get("ok"):
        return False
    return all(account.get("state") != "starting" or (account.get("probe") or {}).get("ok")
               for account in accounts_of(snapshot)
               if account.get("enabled", True) and account.get("ok") is not None)
