"""What the gateway serves about its health: ``/healthz``, ``/metrics``, ``/status``.

* ``GET /healthz`` — 200 ``{"ok": true, ...}`` when every enabled account is
  healthy, 503 with ``reasons`` otherwise (from the cached snapshot: cheap to
  poll).
* ``GET /metrics`` — the kernel's Prometheus metrics, text exposition format.
* ``GET /status`` — a page for people: channels, accounts, health colour, last
  events, restarts, sessions, presence; server-rendered (every value escaped),
  refreshing itself every few seconds.
* ``GET /favicon.ico`` — 204, cached for a day: browsers opening the web chat or
  the status page ask for it, and a 404 logged for each would be noise.
* ``GET /`` — when the web chat does not serve its page there, the page of the
  ``gateway_root_page`` hook: the built-in one says the gateway runs, why the web
  chat is off and how to turn it on (:mod:`chatkernel.builtin.landing`), instead of a
  bare 404.

On a loopback address all three are open. When the gateway listens beyond
loopback (which needs ``gateway.control_token``), ``/metrics`` and ``/status``
need ``Authorization: Bearer <control_token>`` and ``/healthz`` answers
without it but says only ``ok`` (a load balancer needs the status code, not
the account names); with the token it gives the reasons too.
"""

from __future__ import annotations

import datetime
import html
import secrets
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from chatkernel.core.health.snapshot import AccountSnapshot, HealthSnapshot

if TYPE_CHECKING:
    from aiohttp import web

    from chatkernel.core.config import KernelConfig
    from chatkernel.core.health.metrics import Metrics
    from chatkernel.core.health.probes import HealthProbes
    from chatkernel.core.plugins import PluginManager
    from chatkernel.sdk.channel import Channel
    from chatkernel.sdk.models import Account

STATUS_REFRESH_SECONDS = 10


def bearer_ok(request: "web.Request", token: str) -> bool:
    """Whether the request carries ``Authorization: Bearer <token>`` (constant time)."""
    given = request.headers.get("Authorization", "")
    return secrets.compare_digest(given.encode(), f"Bearer {token}".encode())


def routes(health: "HealthProbes", metrics: "Metrics", token: str, *, loopback: bool,
           root_page: str | None = None) -> list[tuple[str, str, Any]]:
    """The ``/healthz``, ``/metrics``, ``/status`` and ``/favicon.ico`` routes of the
    gateway's app, and ``/`` when given its page (see :func:`root_page`)."""
    from aiohttp import web

    def allowed(request: web.Request) -> bool:
        return loopback or bearer_ok(request, token)

    def refused() -> web.Response:
        return web.json_response({"error": "this gateway listens beyond loopback: send "
                                           "Authorization: Bearer <gateway.control_token>"},
                                 status=401)

    async def healthz(request: web.Request) -> web.Response:
        snapshot = await health.snapshot(sessions=False)
        status = 200 if snapshot.ok else 503
        body: dict[str, Any] = {"ok": bool(snapshot.ok), "ts": snapshot.ts}
        if allowed(request):
            body["reasons"] = snapshot.problems
            body["accounts"] = {a.key: a.state for a in snapshot.accounts() if a.enabled}
        return web.json_response(body, status=status, headers={"Cache-Control": "no-store"})

    async def metrics_page(request: web.Request) -> web.Response:
        if not allowed(request):
            return refused()
        from prometheus_client import CONTENT_TYPE_LATEST

        return web.Response(body=metrics.render(),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def status(request: web.Request) -> web.Response:
        if not allowed(request):
            return refused()
        snapshot = await health.snapshot()
        return web.Response(text=render_status_page(snapshot), content_type="text/html",
                            headers={"Cache-Control": "no-store"})

    async def favicon(request: web.Request) -> web.Response:
        return web.Response(status=204, headers={"Cache-Control": "max-age=86400"})

    found = [("GET", "/healthz", healthz), ("GET", "/metrics", metrics_page),
             ("GET", "/status", status), ("GET", "/favicon.ico", favicon)]
    if root_page is not None:

        async def landing(request: web.Request) -> web.Response:
            return web.Response(text=root_page, content_type="text/html",
                                headers={"Cache-Control": "no-store"})

        found.append(("GET", "/", landing))
    return found


def root_page(pm: "PluginManager", config: "KernelConfig",
              channel_types: Mapping[str, type["Channel"]], accounts: Iterable["Account"], *,
              loopback: bool) -> str | None:
    """The page the gateway serves at ``/``: None when an account's channel serves
    ``GET /`` itself (the web chat's default account), else the ``gateway_root_page``
    hook's (None when no plugin gives one)."""
    accounts = list(accounts)
    serves_root = any(method == "GET" and path == "/" for account in accounts
                      if account.transport is not None
                      for method, path, _ in account.transport.http_routes())
    if serves_root:
        return None
    from chatkernel.core.plugins import config_view

    return pm.hook.gateway_root_page(config=config_view(config), channel_types=channel_types,
                                     loopback=loopback)


# -- the status page -------------------------------------------------------------------


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def ago(ts: float | None, now: float) -> str:
    """``"3m ago"``; ``"never"`` for None."""
    if ts is None:
        return "never"
    seconds = max(0, int(now - ts))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def _when(ts: float | None, now: float) -> str:
    if ts is None:
        return '<span class="muted">never</span>'
    exact = datetime.datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")
    return f'<time datetime="{_e(exact)}" title="{_e(exact)}">{_e(ago(ts, now))}</time>'


def health_class(account: AccountSnapshot) -> str:
    """``ok`` (green), ``warn`` (amber: starting, or not judged), ``bad`` (red), ``off``."""
    if not account.enabled:
        return "off"
    if account.ok is False:
        return "bad"
    if account.state == "elsewhere" and account.ok is None:
        return "off"  # another instance owns it and judges it
    if account.ok is None or account.state == "starting":
        return "warn"
    return "ok"


_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2330;
background:#f5f6f8}
header{background:#1d2330;color:#fff;padding:14px 24px;display:flex;align-items:center;gap:16px}
header h1{font-size:18px;margin:0;font-weight:600}
main{padding:16px 24px;max-width:1400px}
.badge{padding:3px 10px;border-radius:12px;font-weight:600;font-size:13px}
.badge.ok{background:#1f9d55}.badge.bad{background:#d64545}.badge.warn{background:#c98a12}
.meta{color:#c9ced8;font-size:13px}
section{background:#fff;border:1px solid #dde1e8;border-radius:8px;margin:0 0 16px;
padding:12px 16px}
h2{font-size:15px;margin:0 0 8px}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:6px 8px;border-bottom:1px solid #eef0f4;vertical-align:top}
th{font-size:12px;text-transform:uppercase;color:#667085;font-weight:600}
.dot{display:inline-block;width:12px;height:12px;border-radius:50%;vertical-align:middle}
.dot.ok{background-color:rgb(31,157,85)}.dot.bad{background-color:rgb(214,69,69)}
.dot.warn{background-color:rgb(201,138,18)}.dot.off{background-color:rgb(160,166,176)}
tr.bad td{background:#fff5f5}
.muted{color:#98a2b3}.err{color:#b42318}
ul.problems{margin:0;padding-left:18px;color:#b42318}
code{font:12px ui-monospace,monospace}
footer{color:#667085;font-size:12px;padding:0 24px 24px}
"""


def _cluster_section(snapshot: HealthSnapshot, now: float) -> str:
    """The gateway instances sharing the store and their leases (empty: one instance)."""
    cluster = snapshot.cluster
    if cluster is None:
        return ""
    instances = "".join(
        f'<tr data-holder="{_e(i.holder)}"><td><code>{_e(i.holder)}</code>'
        f'{" (this one)" if i.is_self else ""}</td><td>{_e(i.host)}</td><td>{_e(i.pid)}</td>'
        f'<td>{_e(ago(i.started_at, now).removesuffix(" ago") if i.started_at else "?")}</td>'
        f'<td>{_e(", ".join(i.owned) or "-")}</td><td>{"yes" if i.heartbeats else "-"}</td>'
        f'</tr>' for i in cluster.instances)
    leases = "".join(
        f'<tr data-lease="{_e(lease.name)}"><td><code>{_e(lease.name)}</code></td>'
        f'<td><code>{_e(lease.holder)}</code></td><td>{lease.token}</td>'
        f'<td>{lease.expires_in_s:.1f} s</td></tr>' for lease in cluster.leases)
    store = snapshot.store
    rtt = f" · store round trip {store.round_trip_ms:g} ms" if store and \
        store.round_trip_ms is not None else ""
    return (f'<section id="instances"><h2>Instances sharing the store</h2>'
            f'<p>Leases of {cluster.lease_seconds:g} s{rtt}</p>'
            "<table><thead><tr><th>Instance</th><th>Host</th><th>Pid</th><th>Up</th>"
            f"<th>Owns</th><th>Heartbeats</th></tr></thead><tbody>{instances}</tbody></table>"
            "<table id=leases><thead><tr><th>Lease</th><th>Holder</th><th>Token</th>"
            f"<th>Expires in</th></tr></thead><tbody>{leases}</tbody></table></section>")


def render_status_page(snapshot: HealthSnapshot, *, now: float | None = None) -> str:
    """The ``/status`` page for a snapshot. Every value from the snapshot is escaped."""
    now = snapshot.ts if now is None else now
    overall = "ok" if snapshot.ok else "bad"
    gateway = snapshot.gateway
    rows = []
    for account in sorted(snapshot.accounts(), key=lambda a: a.key):
        colour = health_class(account)
        probe = account.probe
        if probe is None:
            probe_cell = '<span class="muted">not probed yet</span>'
        else:
            latency = f" ({probe.latency_ms:.0f} ms)" if probe.latency_ms is not None else ""
            probe_cell = (f'<span class="{"" if probe.ok else "err"}">{_e(probe.detail)}'
                          f'{_e(latency)}</span><br><span class="muted">'
                          f'{_e(ago(probe.at, now))}</span>')
        state = _e(account.state) + (f'<br><span class="muted">{_e(account.detail)}</span>'
                                     if account.detail else "")
        error = (f'<span class="err">{_e(account.last_error)}</span><br>'
                 f'{_when(account.last_error_at, now)}' if account.last_error
                 else '<span class="muted">none</span>')
        problems = "".join(f"<li>{_e(p)}</li>" for p in account.problems)
        monitor = account.monitor
        monitor_cell = ('<span class="muted">off</span>' if monitor is None or not monitor.enabled
                        else _e(monitor.note or "not checked yet"))
        rows.append(
            f'<tr class="account {colour}" data-account="{_e(account.key)}" '
            f'data-health="{colour}">'
            f'<td><span class="dot {colour}" title="{_e(colour)}"></span></td>'
            f'<td><strong>{_e(account.channel)}</strong>:{_e(account.account)}'
            f'{"<br><span class=muted>quiet: judged by its probe</span>" if account.quiet else ""}'
            f'{f"<ul class=problems>{problems}</ul>" if problems else ""}</td>'
            f'<td class="state">{state}</td><td class="probe">{probe_cell}</td>'
            f'<td>{_when(account.last_inbound_at, now)}</td>'
            f'<td>{_when(account.last_event_at, now)}</td>'
            f'<td>{_when(account.last_sent_at, now)}</td>'
            f'<td class="restarts">{account.restarts_last_hour}</td>'
            f'<td>{error}</td><td>{monitor_cell}</td></tr>')
    accounts_table = (
        "<table id=accounts><thead><tr><th></th><th>Account</th><th>State</th><th>Probe</th>"
        "<th>Last inbound</th><th>Last event</th><th>Last sent</th><th>Restarts (1 h)</th>"
        "<th>Last error</th><th>Monitor</th></tr></thead><tbody>" + "".join(rows)
        + "</tbody></table>") if rows else "<p class=muted>No accounts configured.</p>"
    sessions = snapshot.sessions
    recent = "".join(f"<li><code>{_e(r.key)}</code> — {_when(r.last_active_at, now)}</li>"
                     for r in sessions.recent)
    presence_rows = "".join(
        f'<tr data-instance="{_e(p.get("instance_id"))}"><td><code>{_e(p.get("instance_id"))}'
        f'</code></td><td>{_e(p.get("kind"))}</td><td>{_e(p.get("mode"))}</td>'
        f'<td>{_e(p.get("host"))}</td><td>{_e(p.get("ip") or "")}</td>'
        f'<td>{_e(p.get("version"))}</td><td>{_when(p.get("ts"), now)}</td></tr>'
        for p in snapshot.presence)
    problems = "".join(f"<li>{_e(p)}</li>" for p in snapshot.problems)
    failure_rows = "".join(
        f'<tr class="failure" data-account="{_e(account.key)}"><td>{_when(f.at, now)}</td>'
        f'<td><code>{_e(f.session)}</code></td><td>{_e(f.part)} {_e(f.message)}</td>'
        f'<td class="err">{_e(f.status)}{f" ({_e(f.why)})" if f.why else ""}: {_e(f.error)}'
        f'</td></tr>'
        for account in sorted(snapshot.accounts(), key=lambda a: a.key)
        for f in account.recent_failures[:5])
    failures = (
        '<section id="failures"><h2>Recent delivery failures</h2><table><thead><tr>'
        "<th>When</th><th>Session</th><th>Message</th><th>What happened</th></tr></thead>"
        f"<tbody>{failure_rows}</tbody></table></section>") if failure_rows else ""
    cluster = _cluster_section(snapshot, now)
    uptime = ago(gateway.started_at, now).removesuffix(" ago") if gateway.started_at else "?"
    generated = datetime.datetime.fromtimestamp(snapshot.ts).astimezone().isoformat(
        timespec="seconds")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="{STATUS_REFRESH_SECONDS}">
<title>chatkernel status — {"ok" if snapshot.ok else "problems"}</title>
<style>{_STYLE}</style></head>
<body data-ok="{str(bool(snapshot.ok)).lower()}">
<header><h1>chatkernel</h1>
<span id="overall" class="badge {overall}">{"All healthy" if snapshot.ok else
                                             "Problems"}</span>
<span class="meta">v{_e(gateway.version)} · pid {_e(gateway.pid)} · up {_e(uptime)} ·
instance <code>{_e(gateway.instance_id)}</code></span></header>
<main>
{f'<section id="problems"><h2>Problems</h2><ul class="problems">{problems}</ul></section>'
 if problems else ""}
<section><h2>Channels and accounts</h2>{accounts_table}</section>
{failures}
<section id="sessions"><h2>Sessions</h2>
<p>{sessions.total} in all · {sessions.active_last_hour} active in the last hour ·
{sessions.active_last_day} in the last day · {_e(sessions.running_turns)} turn(s) running ·
{_e(sessions.queued_messages)} message(s) queued</p>
{f"<ul>{recent}</ul>" if recent else ""}</section>
{cluster}
<section id="presence"><h2>Presence</h2><table><thead><tr><th>Instance</th><th>Kind</th>
<th>Mode</th><th>Host</th><th>Address</th><th>Version</th><th>Last seen</th></tr></thead>
<tbody>{presence_rows}</tbody></table></section>
</main>
<footer>Generated {_e(generated)} in {snapshot.duration_ms:.0f} ms; refreshes every
{STATUS_REFRESH_SECONDS} s. Machine-readable: <a href="/healthz">/healthz</a>,
<a href="/metrics">/metrics</a>, <code>chatkernel health --json</code>.</footer>
</body></html>
"""

