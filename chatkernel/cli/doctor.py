"""``chatkernel doctor``: every check of an installation, and the safe fixes
(chatkernel.core.health.doctor, docs/operations.md)."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from typing import Any

import click

from chatkernel.cli import cli
from chatkernel.cli.options import config_option

MARK = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}


@cli.command()
@click.option("--json", "as_json", is_flag=True,
              help='Output {"ok", "checks": [{"id", "status", "message", "fix"}]}.')
@click.option("--fix", is_flag=True,
              help="Make the safe fixes (file modes, a checkpoint of the write-ahead log, "
                   "a webhook registered again) and list each.")
@click.option("--offline", is_flag=True, help="Probe no platform (credentials unchecked).")
@click.option("--timeout", "timeout_ms", type=click.IntRange(min=1), default=10_000,
              show_default=True, metavar="MS", help="How long each probe may take.")
@config_option
def doctor(as_json: bool, fix: bool, offline: bool, timeout_ms: int,
           config_file: str | None) -> None:
    """Check the installation: versions and plugins, the config and its ${ENV}
    references, each account's credentials (a live probe), the state store, the listen
    address, the clock against the platforms', the security audit's criticals.

    Exit status 0 when no check failed, 1 otherwise (as `health`).
    """
    with _quiet_logs():
        answer, found = _doctor(config_file, fix, offline, timeout_ms)
    if as_json:
        click.echo(json.dumps(answer, indent=2, ensure_ascii=False))
    else:
        click.echo(render(found, answer["ok"]))
    sys.exit(0 if answer["ok"] else 1)


@contextlib.contextmanager
def _quiet_logs():
    """Errors only, redacted, while the checks run (what goes wrong is a check, not a
    log line); the logging set-up as it was afterwards."""
    from chatkernel.core import logs

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    logs.configure("text", "error")
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def _doctor(config_file: str | None, fix: bool, offline: bool, timeout_ms: int):
    """``(report, checks)``: every check, the fixes made first."""
    from chatkernel.cli import _plugin_manager
    from chatkernel.cli.local import read_config_quietly
    from chatkernel.core.config import home_dir
    from chatkernel.core.health import doctor as checks
    from chatkernel.core.health.audit import audit, fix_modes

    path, raw, config, error = read_config_quietly(config_file)
    raw = _raw_anyway(path, raw)
    pm = _plugin_manager()
    found = checks.version_checks(pm) + checks.config_checks(path, raw, error)
    found += _deprecation_checks(path, raw, pm)
    fixed: list[str] = []
    checked = None  # the kernel a start would run (its accounts built, nothing open)
    if config is not None:
        start, checked = _startup_check(config, path, raw, pm)
        found.append(start)
    findings = audit(path, home_dir(), raw, config, pm=pm)
    if fix:
        fixed += [f"file mode: {change}" for change in fix_modes(findings)]
        if fixed:
            findings = audit(path, home_dir(), raw, config, pm=pm)
    if config is not None:
        gateway = _running_gateway()
        if fix:
            fixed += _fix_wal(config, gateway)
        found += _store_checks(config)
        found.append(checks.listen_check(config.gateway.listen, gateway))
        if not offline and checked is not None:
            probes, webhooks, more = _probe(config, path, pm, timeout_ms / 1000, fix=fix)
            found += checks.account_checks(probes) + checks.finding_checks(probes)
            found += webhooks + checks.webhook_url_checks(
                _public_urls(checked), gateway, timeout=timeout_ms / 1000)
            found += checks.clock_checks(probes)
            fixed += more
    found += checks.audit_checks(findings)
    found += [checks.Check("fixed", "ok", line) for line in fixed]
    return checks.report(found), found


def render(found, ok: bool) -> str:
    lines = []
    for check in found:
        lines.append(f"{MARK[check.status]}  {check.id}: {check.message}")
        if check.fix and check.status != "ok":
            lines.append(f"      fix: {check.fix}")
    failed = sum(check.status == "fail" for check in found)
    warned = sum(check.status == "warn" for check in found)
    lines.append(("healthy" if ok else "PROBLEMS") + f": {failed} failed, {warned} "
                 f"warning(s), {len(found)} check(s)")
    return "\n".join(lines)


def _raw_anyway(path, raw: dict[str, Any]) -> dict[str, Any]:
    """The config as written even when it does not validate (its ``${ENV}`` references
    and secrets are still checked)."""
    from chatkernel.core.config import ConfigError, read_raw

    if raw or not path.exists():
        return raw
    try:
        return read_raw(path)
    except ConfigError:
        return {}


def _running_gateway():
    from chatkernel.cli.client import running_gateway

    return running_gateway()


def _deprecation_checks(path, raw, pm) -> list:
    """The deprecated keys the config holds, the kernel's and each channel's."""
    from chatkernel.core.config.deprecations import find_deprecated
    from chatkernel.core.health.doctor import deprecation_checks
    from chatkernel.core.plugins import collect_channels

    models = {name: channel.account_model for name, channel in collect_channels(pm).items()}
    return deprecation_checks(find_deprecated(raw, models), path)


def _startup_check(config, path, raw, pm):
    """``(check, kernel or None)``: what a start checks before it opens anything (the
    listen address, every account built), and the kernel it built (nothing open); not
    run while a ``${ENV}`` reference is unset (its own check says so)."""
    import os

    from chatkernel.core import config as cfg
    from chatkernel.core.gateway.process import check_startup
    from chatkernel.core.health.doctor import Check, unset_references

    unset = unset_references(raw, os.environ)
    if unset:
        return Check("config.start", "warn", "not checked whole: "
                     + ", ".join(f"${{{name}}}" for name in sorted(unset)) + " unset",
                     "set them, then run chatkernel doctor again"), None
    try:
        kernel = check_startup(config, config_path=path, pm=pm)
    except cfg.ConfigError as exc:
        return Check("config.start", "fail", str(exc),
                     f"edit {path} (chatkernel config validate checks it)"), None
    return Check("config.start", "ok", "a start would accept it (accounts built)"), kernel


def _public_urls(kernel) -> list:
    """The public URL of each webhook account that has one: its transport's optional
    ``public_url``, else its ``webhook_url`` setting (docs/writing-a-channel.md)."""
    from chatkernel.channels import Webhook
    from chatkernel.core.health.doctor import PublicURL

    urls = []
    for account in kernel.accounts.values():
        if not isinstance(account.transport, Webhook):
            continue
        url = getattr(account.transport, "public_url", None)
        key = ""
        if not url and getattr(account.config, "webhook_url", None):
            url, key = account.config.webhook_url, account.config_key("webhook_url")
        if isinstance(url, str) and url:
            urls.append(PublicURL(account.key, url, key))
    return urls


def _store_checks(config) -> list:
    import anyio

    from chatkernel.core.health import doctor as checks

    if config.store.backend == "redis":
        url = config.store.url or "redis://127.0.0.1:6379/0"
        return anyio.run(checks.redis_checks, url, config.store.prefix)
    return checks.sqlite_checks(config.store_path())


def _fix_wal(config, gateway) -> list[str]:
    """Checkpoint the write-ahead log when no gateway has the database (a running one
    checkpoints it itself, in the background)."""
    from chatkernel.core.health.doctor import checkpoint_wal

    if config.store.backend != "sqlite" or gateway is not None:
        return []
    done = checkpoint_wal(config.store_path())
    return [f"write-ahead log: {done}"] if done else []


def _probe(config, path, pm, timeout: float, *, fix: bool):
    """``(probes, webhook checks, fixes)``: every enabled account probed, through the
    running gateway or a kernel of our own (then the webhooks are checked too)."""
    from chatkernel.cli.client import ask_gateway

    info, answer, _ = ask_gateway("/control/channels/probe",
                                  {"timeout_ms": int(timeout * 1000)}, timeout + 5)
    if answer is not None:
        from chatkernel.core.health.doctor import FINDINGS
        from chatkernel.sdk.models import ProbeResult

        return ({key: ProbeResult(ok=probe["ok"], detail=probe.get("detail") or "",
                                  restartable=probe.get("restartable", True),
                                  extra={FINDINGS: probe.get(FINDINGS) or []})
                 for key, probe in answer.get("probes", {}).items()}, [], [])
    if info is not None:  # a gateway runs but did not answer: probing here would race it
        from chatkernel.core.health.doctor import Check

        return {}, [Check("accounts", "warn", f"the gateway at {info.url} did not answer "
                          "the probe", "chatkernel health --verbose")], []
    import anyio

    return anyio.run(lambda: _probe_here(config, path, pm, timeout, fix))


async def _probe_here(config, path, pm, timeout: float, fix: bool):
    from chatkernel.core import config as cfg
    from chatkernel.core.gateway.homelock import HomeInUse, HomeLock
    from chatkernel.core.health.doctor import Check
    from chatkernel.core.kernel import Kernel

    try:
        lock = HomeLock(cfg.home_dir(), "chatkernel doctor").acquire()
    except HomeInUse as exc:
        return {}, [Check("accounts", "warn", f"not probed: {exc}")], []
    with lock:
        async with Kernel(config, config_path=path, pm=pm, recover=False) as kernel:
            accounts = [account for account in kernel.accounts.values()]
            probes = await kernel.health.probe(accounts, timeout=timeout)
            webhooks, fixed = await _webhooks(accounts, probes, fix=fix)
    return probes, webhooks, fixed


async def _webhooks(accounts, probes, *, fix: bool):
    """Each webhook account whose transport can tell (its optional ``webhook_status()``,
    docs/writing-a-channel.md): registered where the platform posts; with ``fix``,
    registered again through the transport's ``register()``."""
    from chatkernel.core.health.doctor import Check
    from chatkernel.channels import Webhook

    checks, fixed = [], []
    for account in accounts:
        transport = account.transport
        status = getattr(transport, "webhook_status", None)
        result = probes.get(account.key)
        if not isinstance(transport, Webhook) or status is None or \
                result is None or not result.ok:
            continue
        try:
            registered, detail = await status()
        except Exception as exc:  # a platform error: say it, check the rest
            checks.append(Check(f"webhook.{account.key}", "warn",
                                f"{account.key}: cannot read the webhook: {exc}"))
            continue
        if not registered and fix:
            try:
                await transport.register()
                fixed.append(f"webhook: {account.key} registered again")
                registered, detail = await status()
            except Exception as exc:
                detail = f"{detail}; registering it again failed: {exc}"
        checks.append(Check(f"webhook.{account.key}", "ok" if registered else "fail",
                            f"{account.key}: {detail}",
                            "" if registered else "chatkernel doctor --fix registers it "
                            "again (or restart the gateway)"))
    return checks, fixed
