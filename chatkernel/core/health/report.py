"""What ``chatkernel status``, ``health`` and ``channels`` print, and its redaction.

Everything here works on the snapshot as JSON (a dict, see
:class:`chatkernel.core.health.probes.HealthSnapshot`), whether it came from the running
gateway or from the local state, so the CLI needs no pydantic to print it.
Every text and JSON the commands print goes through a :class:`Redactor` first:
secrets from the config, every value resolved from ``${ENV}``, the control
token and anything shaped like a bot token become ``***``.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Iterable
from typing import Any

from chatkernel import __version__

# -- redaction ----------------------------------------------------------------------------


class Redactor:
    """Replaces known secrets, and what matches the log redaction's patterns (the
    installed channels' token shapes), in text before it is printed."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        from chatkernel.core.logs import SecretFilter, secret_filter

        variants: list[str] = []
        for secret in secrets:
            if not isinstance(secret, str) or not secret:
                continue
            variants.append(secret)
            escaped = json.dumps(secret, ensure_ascii=False)[1:-1]  # as it appears in JSON
            if escaped != secret:
                variants.append(escaped)
        self._filter = SecretFilter(variants)
        self._filter.add_patterns(*secret_filter.patterns)

    def __call__(self, text: str) -> str:
        return self._filter.redact(text)


def config_secrets(raw: dict[str, Any], *, extra: Iterable[str] = ()) -> list[str]:
    """The secrets of a raw config: secret-named values (resolved) and every value a
    ``${NAME}`` reference resolves to, whatever its key."""
    from chatkernel.core import config as cfg

    resolved = cfg.resolve_env(raw, strict=False)
    return [*cfg.secret_values(resolved), *cfg.env_values(raw), *extra]


# -- small formatting helpers -------------------------------------------------------------


def ago(ts: float | None, now: float | None = None) -> str:
    if ts is None:
        return "never"
    seconds = max(0, int((time.time() if now is None else now) - ts))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return ago(time.time() - seconds).removesuffix(" ago")


def table(rows: list[list[str]]) -> list[str]:
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1]
            for row in rows]


def accounts_of(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted((account for channel in snapshot.get("channels", {}).values()
                   for account in channel.get("accounts", {}).values()),
                  key=lambda a: a["key"])


def probe_text(probe: dict[str, Any] | None, *, local: bool = False,
               cached: bool = False) -> str:
    """A probe's verdict, detail and latency; ``cached``: with its age too (a probe
    from minutes ago says little about now, next to a failure since)."""
    if probe is None:
        return "-" if local else "not probed"
    latency = f" ({probe['latency_ms']:.0f} ms)" if probe.get("latency_ms") is not None else ""
    verdict = "ok" if probe["ok"] else ("TIMED OUT" if probe.get("timed_out") else "FAILED")
    age = f", probed {ago(probe['at'])}" if cached and probe.get("at") is not None else ""
    return f"{verdict}: {probe.get('detail') or '-'}{latency}{age}"


def state_text(account: dict[str, Any]) -> str:
    if not account.get("enabled", True):
        return "disabled"
    return account["state"]


def gateway_line(snapshot: dict[str, Any]) -> str:
    gateway = snapshot.get("gateway") or {}
    if gateway.get("reachable"):
        return (f"Gateway: running at {gateway.get('url') or '?'} (pid {gateway.get('pid')}, "
                f"up {duration(gateway.get('uptime_s'))}, v{gateway.get('version')})")
    why = f" ({gateway['error']})" if gateway.get("error") else ""
    return f"Gateway: not running{why} — local state shown"


def store_line(snapshot: dict[str, Any]) -> str | None:
    """The state database's line when its commits fail (None when they work)."""
    store = snapshot.get("store") or {}
    if store.get("ok", True):
        return None
    if store.get("reachable") is False:
        return f"Shared store: UNREACHABLE: {store.get('last_error') or '?'}"
    return (f"State database: commits FAILING since {ago(store.get('failing_since'))}: "
            f"{store.get('last_error') or '?'}")


def cluster_lines(snapshot: dict[str, Any]) -> list[str]:
    """The instances sharing the store, and who holds which lease (empty: one instance)."""
    cluster = snapshot.get("cluster")
    if not cluster:
        return []
    store = snapshot.get("store") or {}
    rtt = store.get("round_trip_ms")
    lines = [f"Instances sharing the store (leases of {cluster.get('lease_seconds'):g} s"
             + (f", store round trip {rtt:g} ms" if rtt is not None else "") + "):"]
    rows = [["INSTANCE", "HOST", "PID", "UP", "OWNS", "HEARTBEATS"]]
    for item in cluster.get("instances") or []:
        mark = " (this one)" if item.get("is_self") else ""
        rows.append([f"{item['holder']}{mark}", item.get("host") or "-",
                     str(item.get("pid") or "-"), duration(item.get("age_s")),
                     ", ".join(item.get("owned") or []) or "-",
                     "yes" if item.get("heartbeats") else "-"])
    lines += ["  " + row for row in table(rows)]
    rows = [["LEASE", "HOLDER", "TOKEN", "EXPIRES IN"]]
    for lease in cluster.get("leases") or []:
        rows.append([lease["name"], lease["holder"], str(lease["token"]),
                     f"{lease['expires_in_s']:.1f} s"])
    if len(rows) > 1:
        lines += ["", *("  " + row for row in table(rows))]
    return lines


def failure_lines(snapshot: dict[str, Any], limit: int = 5) -> list[str]:
    """The latest payloads that did not arrive, per account, newest first."""
    lines = []
    for account in accounts_of(snapshot):
        failures = (account.get("recent_failures") or [])[:limit]
        if not failures:
            continue
        lines.append(f"  {account['key']}:")
        for failure in failures:
            why = f" ({failure['why']})" if failure.get("why") else ""
            lines.append(f"    {ago(failure.get('at'))}  {failure['session']}  part "
                         f"{failure['part']} {failure['message']}: {failure['status']}{why}: "
                         f"{failure['error']}")
    return lines


def inbound_failure_lines(snapshot: dict[str, Any]) -> list[str]:
    """Per account, how many inbound messages failed in the pipeline, and the last reason."""
    return [f"  {account['key']}: {account['inbound_failures']}, the last "
            f"{ago(account.get('last_inbound_failure_at'))}: "
            f"{account.get('last_inbound_failure') or '?'}"
            for account in accounts_of(snapshot) if account.get("inbound_failures")]


def sessions_lines(sessions: dict[str, Any]) -> list[str]:
    line = (f"Sessions: {sessions.get('total', 0)} ({sessions.get('active_last_hour', 0)} "
            f"active in the last hour, {sessions.get('active_last_day', 0)} in the last day)")
    if sessions.get("running_turns") is not None:
        line += (f"; {sessions['running_turns']} turn(s) running, "
                 f"{sessions.get('queued_messages', 0)} message(s) queued")
    lines = [line]
    for recent in sessions.get("recent") or []:
        lines.append(f"  {recent['key']}  {ago(recent['last_active_at'])}  agent "
                     f"{recent.get('agent', 'default')}")
    return lines


# -- status ---------------------------------------------------------------------------------


def render_status(snapshot: dict[str, Any]) -> str:
    """``chatkernel status``: gateway, channels and accounts, sessions, recent activity."""
    local = snapshot.get("source") == "local"
    lines = [gateway_line(snapshot)]
    if snapshot.get("ok") is not None:
        problems = snapshot.get("problems") or []
        probes = "live probes" if snapshot.get("live") else "cached probes"
        lines.append(f"Health: {'ok' if snapshot['ok'] else f'{len(problems)} problem(s)'} "
                     f"({probes})")
    security = snapshot.get("security") or {}
    if security.get("critical"):
        lines.append(f"Security: {security['critical']} critical finding(s): run "
                     f"{security.get('command') or 'chatkernel security audit'}")
    rows = [["CHANNEL", "ACCOUNT", "STATE", "LAST INBOUND", "LAST SENT", "RESTARTS/H",
             "CREDENTIALS", "PROBE"]]
    for account in accounts_of(snapshot):
        age = account.get("credential_age_s")
        rows.append([account["channel"], account["account"], state_text(account),
                     ago(account.get("last_inbound_at")), ago(account.get("last_sent_at")),
                     str(account.get("restarts_last_hour", 0)),
                     "-" if age is None else f"{duration(age)} old",
                     probe_text(account.get("probe"), local=local)
                     if account.get("enabled", True) else "-"])
    lines += ["", *table(rows)]
    cluster = cluster_lines(snapshot)
    if cluster:
        lines += ["", *cluster]
    store = store_line(snapshot)
    if store:
        lines += ["", store]
    failures = failure_lines(snapshot)
    if failures:
        lines += ["", "Recent delivery failures:", *failures]
    inbound = inbound_failure_lines(snapshot)
    if inbound:
        lines += ["", "Messages that failed in the pipeline (their chats were told):", *inbound]
    lines += ["", *sessions_lines(snapshot.get("sessions") or {})]
    pending = (snapshot.get("sessions") or {}).get("pairing_pending")
    if pending:
        lines += ["", f"Pairing: {pending} request(s) waiting for your approval "
                      "(chatkernel pairing list)"]
    presence = snapshot.get("presence") or []
    if presence:
        lines += ["", f"Presence: {len(presence)} instance(s)"]
        lines += [f"  {p.get('instance_id')}  {p.get('mode') or p.get('kind')}  "
                  f"{p.get('ip') or p.get('host') or ''}  {ago(p.get('ts'))}" for p in presence]
    problems = snapshot.get("problems") or []
    if problems and snapshot.get("ok") is not None:
        lines += ["", "Problems:", *(f"  - {problem}" for problem in problems)]
    return "\n".join(lines)


# -- health ---------------------------------------------------------------------------------


def render_health(snapshot: dict[str, Any], *, verbose: bool = False) -> str:
    """``chatkernel health``: the verdict, then one line (or block) per account."""
    gateway = snapshot.get("gateway") or {}
    verdict = "ok" if snapshot.get("ok") else "UNHEALTHY"
    probes = "live probes" if snapshot.get("live") else "cached probes"
    lines = [f"{verdict} — gateway {gateway.get('url') or ''} (pid {gateway.get('pid')}, up "
             f"{duration(gateway.get('uptime_s'))}); {probes}; "
             f"{snapshot.get('duration_ms', 0):.0f} ms"]
    for account in accounts_of(snapshot):
        if not account.get("enabled", True):
            lines.append(f"  {account['key']}: disabled")
            continue
        ok = account.get("ok")
        mark = "ok " if ok else "-- " if ok is None else "BAD"  # --: another instance's
        probe = probe_text(account.get("probe"), cached=not snapshot.get("live"))
        lines.append(f"  {mark} {account['key']}: {account['state']}; probe "
                     f"{probe}; last event "
                     f"{ago(account.get('last_event_at'))}; "
                     f"restarts {account.get('restarts_last_hour', 0)} in the last hour")
        if not verbose:  # why it is red, in one line each (verbose lists them below)
            lines += [f"        {problem}" for problem in account.get("problems", [])]
        if verbose:
            monitor = account.get("monitor") or {}
            age = account.get("credential_age_s")
            details = [
                ("state since", ago(account.get("state_since"))),
                ("loop started", ago(account.get("loop_started_at"))),
                ("last inbound", ago(account.get("last_inbound_at"))),
                ("last sent", ago(account.get("last_sent_at"))),
                ("last error", f"{account['last_error']} ({ago(account.get('last_error_at'))})"
                 if account.get("last_error") else "none"),
                ("sends", f"FAILING since {ago(account.get('send_failing_since'))}"
                 if account.get("send_failing_since") else "working"),
                ("receiving", f"{account['problem']} (since {ago(account.get('problem_since'))})"
                 if account.get("problem") else "no problem reported"),
                ("credentials", "age unknown" if age is None else f"{duration(age)} old"),
                ("quiet", "yes: judged by its probe" if account.get("quiet") else "no"),
                ("monitor", (monitor.get("note") or "not checked yet")
                 if monitor.get("enabled") else "off"),
            ]
            lines += [f"        {name}: {value}" for name, value in details]
            lines += [f"        problem: {problem}" for problem in account.get("problems", [])]
    store = store_line(snapshot)
    if store:
        lines.append(f"  BAD {store}")
    cluster = cluster_lines(snapshot)
    if cluster:
        lines += ["", *cluster]
    if verbose:
        failures = failure_lines(snapshot)
        if failures:
            lines += ["  Recent delivery failures:", *("  " + line for line in failures)]
    lines.append("  " + sessions_lines(snapshot.get("sessions") or {})[0])
    failed = snapshot.get("failed_sends_last_hour")
    if failed is not None:
        lines.append(f"  {failed} send(s) failed in the last hour"
                     + (": chatkernel deliveries list" if failed else ""))
    return "\n".join(lines)


# -- channels -------------------------------------------------------------------------------


def render_channels(snapshot: dict[str, Any], channel_types: list[dict[str, Any]]) -> str:
    lines = [gateway_line(snapshot), ""]
    rows = [["CHANNEL", "ACCOUNT", "ENABLED", "STATE", "MODE", "PROBE"]]
    for account in accounts_of(snapshot):
        rows.append([account["channel"], account["account"],
                     "yes" if account.get("enabled", True) else "no", state_text(account),
                     {True: "quiet (judged by probe)", False: "listening"}.get(
                         account.get("quiet"), "-"),
                     probe_text(account.get("probe"), local=snapshot.get("source") == "local")
                     if account.get("enabled", True) else "-"])
    lines += table(rows) if len(rows) > 1 else ["No accounts configured."]
    if channel_types:
        lines += ["", "Installed channel types: " + ", ".join(
            f"{t['name']} ({t['source']})" for t in channel_types)]
    return "\n".join(lines)


def render_probes(answer: dict[str, Any]) -> str:
    lines = []
    if answer.get("via") == "direct":
        lines.append("(no gateway is running: probed from here)")
    for key, probe in answer.get("probes", {}).items():
        lines.append(f"{'ok ' if probe['ok'] else 'BAD'} {key}: {probe_text(probe)}")
    return "\n".join(lines)


# -- the full diagnosis (status --all) ------------------------------------------------------


def environment() -> dict[str, Any]:
    """Versions, platform and the CHATKERNEL_* variables (names; paths shown)."""
    shown = {"CHATKERNEL_HOME", "CHATKERNEL_CONFIG", "CHATKERNEL_LOAD_PLUGINS",
             "CHATKERNEL_DISABLE_PLUGINS", "CHATKERNEL_STRICT_PLUGINS",
             "CHATKERNEL_TRACE_PLUGINS"}
    variables = {name: (value if name in shown else "(set)")
                 for name, value in sorted(os.environ.items())
                 if name.startswith("CHATKERNEL_")}
    return {"chatkernel": __version__, "python": sys.version.split()[0],
            "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
            "executable": sys.executable, "environment": variables}


def render_diagnosis(diagnosis: dict[str, Any]) -> str:
    """``chatkernel status --all``: everything, for pasting into an issue."""
    env = diagnosis["environment"]
    lines = ["# chatkernel diagnosis (read-only; secrets redacted)", "",
             f"chatkernel {env['chatkernel']} · Python {env['python']} · {env['platform']}",
             f"home: {diagnosis['home']}",
             f"config: {diagnosis['config_path']}"
             f"{'' if diagnosis['config_exists'] else ' (missing: defaults apply)'}",
             f"state: {diagnosis['state']}"]
    if env["environment"]:
        lines.append("environment: " + ", ".join(f"{k}={v}" for k, v in
                                                  env["environment"].items()))
    lines += ["", "## Plugins"]
    for plugin in diagnosis["plugins"]:
        hooks = (f"FAILED: {plugin['error']}" if plugin.get("error")
                 else ", ".join(plugin.get("hooks") or []))
        source = "built-in" if plugin.get("builtin") else plugin.get("distribution") or "?"
        lines.append(f"  {plugin['name']} {plugin.get('version') or '-'} ({source}): {hooks}")
    lines += ["", "## Config check"]
    lines += [f"  {problem}" for problem in diagnosis["config_problems"]] or ["  ok"]
    lines += ["", "## Config (secrets redacted)", diagnosis["config_text"] or "  (empty)"]
    lines += ["", "## Status", render_status(diagnosis["snapshot"])]
    store = diagnosis.get("store") or {}
    if store:
        lines += ["", "## Store", *(f"  {key}: {value}" for key, value in store.items())]
    return "\n".join(lines)
