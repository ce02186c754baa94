"""The console's routes: the page at ``/ui/`` and its JSON API under ``/api/``.

Every ``/api/`` route but the live stream needs ``Authorization: Bearer <token>`` (the
gateway's control token, :mod:`chatkernel.console.auth`); one that changes something is
a POST with a JSON body, and refused (403) when its ``Origin`` is not the gateway's own
page, on top of the gateway's own checks (:mod:`chatkernel.core.gateway.http_guard`).
Every answer passes the kernel's secret filter as it leaves, after each value that
could hold a secret was masked by its key: no answer carries a token or a password.

The actions are the CLI's: a send is ``chatkernel sessions send``'s, a policy switch
``sessions policy``'s, a retry ``deliveries retry``'s, through the kernel's ``Control``;
with several gateways on one store they reach the account's owner the way the CLI's
do (the store, the account's inbox). The Overview asks the other instances for their
own accounts with the same token (``gateway.control_token``, which the gateways of one
store share); an account whose owner refuses it says so in its row.
"""

from __future__ import annotations

import json
import logging
import time
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from aiohttp import web

from chatkernel import __version__
from chatkernel.console.auth import FORGET_SECONDS, Gate
from chatkernel.console.events import Watch, stream
from chatkernel.console.logbuffer import LogBuffer
from chatkernel.console.logins import Logins
from chatkernel.core.gateway.http_guard import RequestError, read_json_object
from chatkernel.core.runtime.pairing_control import PairingControl

if TYPE_CHECKING:
    from chatkernel.core.kernel import Kernel

log = logging.getLogger("chatkernel.console")

#: The largest body an API request may have (a message's text, an id).
MAX_BODY_BYTES = 256 * 1024
#: Static files the page is made of (nothing else under /ui/ is served).
STATIC_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css",
                ".svg": "image/svg+xml"}
#: The page's own content security: its files only, no inline script, no frames.
PAGE_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
               " connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action "
               "'none'")
#: Seconds an answer of another instance is kept.
PEER_SECONDS = 2.0
#: Seconds another instance's refusal of this gateway's token is kept. Asked sooner, it
#: would count each ask as a wrong guess and lock this gateway's address out of its
#: console (chatkernel.console.auth), operators at that address included. An instance
#: started again (a new holder, its token perhaps put right) is asked at once.
REFUSED_SECONDS = FORGET_SECONDS
#: What an account's row says when its owner refuses this gateway's token.
TOKEN_REFUSED = ("its console refused this gateway's token: the gateways sharing a store "
                 "need the same gateway.control_token")
HOUR = 3600.0


def health_class(account: dict[str, Any]) -> str:
    """``ok`` (green), ``warn`` (amber: starting, not judged), ``bad`` (red), ``off``; as
    the ``/status`` page colours an account."""
    if not account.get("enabled", True):
        return "off"
    if account.get("ok") is False:
        return "bad"
    if account.get("state") == "elsewhere" and account.get("ok") is None:
        return "off"
    if account.get("ok") is None or account.get("state") == "starting":
        return "warn"
    return "ok"


def session_account(key: str) -> str:
    """``<channel>:<account>`` of a session or outbox key ``<channel>:<account>:<chat>...``."""
    return ":".join(key.split(":", 2)[:2])


def masked(value: Any, key: str = "") -> Any:
    """A config value with every secret masked: by its key's name, and every
    ``${ENV}`` reference kept as written (it shows no value)."""
    from chatkernel.core import config as cfg

    return cfg.redact(value, key)


class Console:
    """The console of one gateway: its routes, its token gate, its log buffer, its
    logins and its live stream."""

    def __init__(self, kernel: "Kernel", token: str) -> None:
        from chatkernel.core import logs

        from chatkernel.core.wiring import Running

        self._kernel = kernel
        #: The kernel's started parts (store, queue), read on each use.
        self._running = Running(kernel)
        self._store = self._running.store
        self._token = token
        self.gate = Gate(token)
        #: What every answer, stream and log line passes: the kernel's secrets, and the
        #: token (which a gateway adds to them, a test's app may not).
        self.redact = lambda text: kernel.secrets.redact(text).replace(token, "***")
        self._stopping = anyio.Event()
        self.logs = LogBuffer(lambda text: self.redact(logs.secret_filter.redact(text)),
                              lambda: kernel.channel_types)
        self.watch = Watch(self._look)
        self.logins = Logins(flows=self._flows, config_path=self._config_path,
                             store=self._store,
                             reload=lambda: kernel.control.reload(None),
                             redact=self.redact,
                             changed=lambda: self.watch.bump("logins", "overview"))
        #: The last answer of each other instance (by holder): when, its accounts, and
        #: why it gave none (None when it did).
        self._peers: dict[str, tuple[float, list[dict[str, Any]], str | None]] = {}
        #: The owner's side of pairing, as ``chatkernel pairing`` asks it.
        self._pairing = PairingControl(kernel.pairing)

    # -- the app's lifetime ------------------------------------------------------------

    async def on_startup(self, app: web.Application) -> None:
        self.logs.install()

    async def on_shutdown(self, app: web.Application) -> None:
        """The gateway stops: the live streams end (the server waits for its handlers)."""
        self._stopping.set()

    async def on_cleanup(self, app: web.Application) -> None:
        self._stopping.set()
        await self.logins.close()
        self.logs.uninstall()

    def install(self, app: web.Application) -> None:
        """Start and stop with ``app`` (its routes are added by the caller)."""
        app.on_startup.append(self.on_startup)
        app.on_shutdown.append(self.on_shutdown)
        app.on_cleanup.append(self.on_cleanup)

    # -- routes --------------------------------------------------------------------------

    def routes(self) -> list[tuple[str, str, Any]]:
        api = [
            ("GET", "/api/overview", self.overview),
            ("GET", "/api/sessions", self.sessions),
            ("GET", "/api/sessions/log", self.session_log),
            ("POST", "/api/sessions/send", self.session_send),
            ("POST", "/api/sessions/policy", self.session_policy),
            ("GET", "/api/pairing", self.pairing),
            ("POST", "/api/pairing/approve", self.pairing_action("approve")),
            ("POST", "/api/pairing/deny", self.pairing_action("deny")),
            ("POST", "/api/pairing/revoke", self.pairing_action("revoke")),
            ("GET", "/api/deliveries", self.deliveries),
            ("POST", "/api/deliveries/retry", self.delivery_retry),
            ("POST", "/api/deliveries/discard", self.delivery_discard),
            ("GET", "/api/logins", self.login_list),
            ("POST", "/api/logins/start", self.login_start),
            ("POST", "/api/logins/cancel", self.login_cancel),
            ("GET", "/api/config", self.config),
            ("GET", "/api/logs", self.log_lines),
            ("POST", "/api/events/ticket", self.ticket),
        ]
        return [("GET", "/ui", self.to_page), ("GET", "/ui/", self.page),
                ("GET", "/ui/{name}", self.static), ("GET", "/api/events", self.events),
                *((method, path, self._guarded(handler)) for method, path, handler in api)]

    # -- the page -----------------------------------------------------------------------

    async def to_page(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/ui/")

    async def page(self, request: web.Request) -> web.Response:
        return self._file("index.html")

    async def static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name == "index.html" or Path(name).suffix not in STATIC_TYPES or \
                not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
            raise web.HTTPNotFound()
        return self._file(name)

    def _file(self, name: str) -> web.Response:
        item = resources.files("chatkernel.console").joinpath("static", name)
        if not item.is_file():
            raise web.HTTPNotFound()
        return web.Response(body=item.read_bytes(),
                            content_type=STATIC_TYPES[Path(name).suffix], charset="utf-8",
                            headers={"Cache-Control": "no-cache",
                                     "Content-Security-Policy": PAGE_POLICY,
                                     "Referrer-Policy": "no-referrer"})

    # -- the guard -----------------------------------------------------------------------

    def _guarded(self, handler):
        async def guarded(request: web.Request) -> web.StreamResponse:
            verdict = self.gate.check(request.headers.get("Authorization"), request.remote)
            if verdict.status == 429:
                return self._json({"error": "too many wrong tokens from this address: wait"},
                                  status=429,
                                  headers={"Retry-After": str(max(1, round(verdict.retry_after)))})
            if not verdict.ok:
                return self._json({"error": "missing or wrong token: send Authorization: "
                                            "Bearer <the gateway's control token>"},
                                  status=401, headers={"WWW-Authenticate": "Bearer"})
            if request.method != "GET":
                origin = request.headers.get("Origin")
                if origin is not None and not _same_origin(origin, request):
                    return self._json({"error": f"a request from another site ({origin[:80]!r}) "
                                                "is refused"}, status=403)
            try:
                answer = await handler(request)
            except RequestError as exc:
                return self._json({"error": str(exc)}, status=exc.status)
            except _Refused as exc:
                return self._json({"error": str(exc)}, status=exc.status)
            if isinstance(answer, web.StreamResponse):
                return answer
            return self._json(answer)
        return guarded

    def _json(self, data: Any, *, status: int = 200,
              headers: dict[str, str] | None = None) -> web.Response:
        # The last net: whatever a value held, no secret the kernel knows leaves.
        text = self.redact(json.dumps(data, ensure_ascii=False, default=str))
        return web.Response(text=text, status=status, content_type="application/json",
                            headers={"Cache-Control": "no-store", **(headers or {})})

    async def _body(self, request: web.Request) -> dict[str, Any]:
        return await read_json_object(request, limit=MAX_BODY_BYTES)

    async def _control(self, action, body: dict[str, Any]) -> dict[str, Any]:
        """A ``Control`` request, its refusal as the same HTTP status."""
        from chatkernel.core.runtime.control import ControlError

        try:
            return await action(body)
        except ControlError as exc:
            raise _Refused(exc.status, str(exc)) from None

    # -- the live stream -----------------------------------------------------------------

    async def ticket(self, request: web.Request) -> dict[str, Any]:
        return {"ticket": self.gate.ticket()}

    async def events(self, request: web.Request) -> web.StreamResponse:
        if not self.gate.use_ticket(request.query.get("ticket")):
            return self._json({"error": "no valid ticket: POST /api/events/ticket with the "
                                        "token for one"}, status=401)
        return await stream(request, watch=self.watch, logs=self.logs,
                            redact=lambda data: self.redact(data.decode()).encode(),
                            stopping=self._stopping,
                            hello={"instance": self._instance(), "version": __version__})

    async def _look(self) -> dict[str, Any]:
        """What each topic's page shows, in short (see chatkernel.console.events)."""
        kernel = self._kernel
        snapshot = await kernel.health.snapshot(sessions=False)
        accounts = tuple((a.key, health_class(a.model_dump()), a.state, a.detail,
                          tuple(a.problems)) for a in snapshot.accounts())
        store = self._store()
        since = time.time() - HOUR
        failed = await store.outbox_failed_count(since)
        newest = tuple((f.at, f.reply_id, f.part) for a in snapshot.accounts()
                       for f in a.recent_failures[:1])
        pending = await self._pairing_pending()
        return {"overview": (accounts, failed, newest, pending,
                             snapshot.store.ok if snapshot.store else None),
                "deliveries": (failed, newest), "pairing": pending}

    # -- overview ---------------------------------------------------------------------------

    async def overview(self, request: web.Request) -> dict[str, Any]:
        kernel = self._kernel
        snapshot = (await kernel.health.snapshot()).model_dump(mode="json")
        local_only = request.query.get("local") == "1"
        accounts = self._accounts(snapshot)
        cluster = snapshot.get("cluster")
        if cluster and not local_only:
            accounts = await self._with_peers(accounts, cluster, request)
        failed = await self._store().outbox_failed_count(0)
        gateway = snapshot["gateway"]
        store = snapshot.get("store") or {}
        return {
            "ok": snapshot["ok"], "problems": snapshot["problems"],
            "gateway": {"version": gateway.get("version"), "pid": gateway.get("pid"),
                        "instance": gateway.get("instance_id"),
                        "started_at": gateway.get("started_at"),
                        "uptime_s": gateway.get("uptime_s"),
                        "store": kernel.config.store.backend, "store_ok": store.get("ok"),
                        "role": self._role(cluster)},
            "accounts": accounts,
            "counts": {"failed_sends": failed,
                       "failed_last_hour": snapshot.get("failed_sends_last_hour"),
                       "pairing_pending": await self._pairing_pending(),
                       "sessions": snapshot["sessions"].get("total"),
                       "running_turns": snapshot["sessions"].get("running_turns"),
                       "queued_messages": snapshot["sessions"].get("queued_messages")},
            "instances": [{"holder": i["holder"], "host": i.get("host"), "pid": i.get("pid"),
                           "owned": i.get("owned", []), "self": i.get("is_self", False)}
                          for i in (cluster or {}).get("instances", [])],
        }

    def _role(self, cluster: dict[str, Any] | None) -> str:
        if not cluster:
            return "single instance"
        count = len(cluster.get("instances") or [])
        return f"one of {count} instance(s) sharing the store, as {cluster['holder']}"

    def _accounts(self, snapshot: dict[str, Any]) -> list[dict[str, Any]]:
        kernel = self._kernel
        queued: dict[str, int] = {}
        for key, lane in self._running.queue().lanes.items():
            queued[session_account(key)] = queued.get(session_account(key), 0) + \
                len(lane.pending)
        outbox: dict[str, int] = {}
        lines = kernel.outbox.lines
        for key in lines.keys():
            outbox[session_account(key)] = outbox.get(session_account(key), 0) + lines.count(key)
        found = []
        for channel in snapshot["channels"].values():
            for account in channel["accounts"].values():
                key = account["key"]
                found.append({
                    "key": key, "channel": account["channel"], "account": account["account"],
                    "health": health_class(account), "ok": account.get("ok"),
                    "state": account["state"], "detail": account.get("detail", ""),
                    "problems": account.get("problems", []),
                    "last_inbound_at": account.get("last_inbound_at"),
                    "last_sent_at": account.get("last_sent_at"),
                    "last_event_at": account.get("last_event_at"),
                    "last_error": account.get("last_error"),
                    "restarts_last_hour": account.get("restarts_last_hour", 0),
                    "queue": queued.get(key, 0), "outbox": outbox.get(key, 0),
                    "instance": self._instance() if account["state"] != "elsewhere" else None})
        return sorted(found, key=lambda a: a["key"])

    def _instance(self) -> str | None:
        return self._kernel.presence.own.instance_id

    async def _with_peers(self, accounts: list[dict[str, Any]], cluster: dict[str, Any],
                          request: web.Request) -> list[dict[str, Any]]:
        """The accounts other instances own, as those instances see them (asked with this
        gateway's token). An instance that does not answer leaves its accounts as
        ``elsewhere``, their ``detail`` saying why, and ``peer`` how: ``refused`` (the
        token is not its token) or ``unreachable``."""
        by_key = {a["key"]: a for a in accounts}
        elsewhere = {a["key"] for a in accounts if a["state"] == "elsewhere"}
        for instance in cluster.get("instances", []):
            url = instance.get("url")
            owned = elsewhere & set(instance.get("owned") or ())
            if instance.get("is_self") or not url or not owned:
                continue
            name = instance.get("instance") or instance["holder"]
            found, problem = await self._peer_accounts(instance["holder"], url)
            for account in found:
                if account["key"] in owned and account.get("state") != "elsewhere":
                    by_key[account["key"]] = {**account, "instance": name}
            if problem is not None:
                for key in owned:
                    account = by_key[key]
                    by_key[key] = {**account, "instance": name,
                                   "peer": "refused" if problem == TOKEN_REFUSED
                                   else "unreachable",
                                   "detail": "; ".join(filter(None, (account["detail"], problem)))}
        return sorted(by_key.values(), key=lambda a: a["key"])

    async def _peer_accounts(self, holder: str, url: str
                             ) -> tuple[list[dict[str, Any]], str | None]:
        """The accounts the instance ``holder`` at ``url`` serves itself, and why there
        are none when it gave none (None when it answered)."""
        now = time.monotonic()
        cached = self._peers.get(holder)
        if cached is not None and now - cached[0] < (
                REFUSED_SECONDS if cached[2] == TOKEN_REFUSED else PEER_SECONDS):
            return cached[1], cached[2]
        import aiohttp

        found: list[dict[str, Any]] = []
        problem: str | None = None
        try:
            timeout = aiohttp.ClientTimeout(total=2.0)
            async with aiohttp.ClientSession(timeout=timeout) as client, client.get(
                    f"{url}/api/overview?local=1",
                    headers={"Authorization": f"Bearer {self._token}"}) as response:
                if response.status in (401, 429):  # 429: wrong tokens before this one
                    problem = TOKEN_REFUSED
                    log.warning("console: the instance at %s refused this gateway's token: "
                                "give the gateways sharing the store the same "
                                "gateway.control_token to see its accounts here", url)
                elif response.status != 200:
                    problem = f"its console at {url} answered {response.status}"
                else:
                    found = (await response.json()).get("accounts") or []
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.debug("console: instance at %s did not answer: %s", url, exc)
            problem = f"its console at {url} did not answer"
        for gone in [key for key, (at, _, _) in self._peers.items()
                     if now - at >= REFUSED_SECONDS]:
            del self._peers[gone]  # instances long gone (each start is a new holder)
        self._peers[holder] = (now, found, problem)
        return found, problem

    # -- sessions ---------------------------------------------------------------------------

    async def sessions(self, request: web.Request) -> dict[str, Any]:
        limit = _int(request.query.get("limit", "200"), "limit", 1, 1000)
        records = await self._store().list_sessions()
        return {"total": len(records), "sessions": [{
            "key": r.key, "channel": r.channel, "account": r.account, "chat_id": r.chat_id,
            "thread_id": r.thread_id, "agent": r.agent, "last_active_at": r.last_active_at,
            "created_at": r.created_at, "policy": (r.settings or {}).get("send") or "inherit"}
            for r in records[:limit]]}

    async def session_log(self, request: web.Request) -> dict[str, Any]:
        key = request.query.get("key", "")
        if not key or len(key) > 1024:
            raise RequestError(400, "'key' (a session key) is required")
        limit = _int(request.query.get("limit", "200"), "limit", 1, 1000)
        store = self._store()
        entries = await store.read_log(key, limit=limit)
        if not entries and await store.get_session(key) is None:
            raise _Refused(404, f"no session {key!r}")
        return {"key": key, "entries": [{"seq": e.seq, "role": e.role, "text": e.text,
                                         "ts": e.ts, "kind": (e.meta or {}).get("kind")}
                                        for e in entries]}

    async def session_send(self, request: web.Request) -> dict[str, Any]:
        body = await self._body(request)
        text, session = body.get("text"), body.get("session")
        if not isinstance(session, str) or not session or not isinstance(text, str):
            raise RequestError(400, "'session' and 'text' must be strings")
        answer = await self._control(self._kernel.control.send,
                                     {"session": session, "text": text, "wait": 10})
        self.watch.bump("sessions", "overview")
        return {"outcome": answer.get("outcome"), "reply_id": answer.get("reply_id"),
                "session": answer.get("session"),
                "parts": [{"status": p["status"], "error": p.get("error")}
                          for p in answer.get("parts") or []]}

    async def session_policy(self, request: web.Request) -> dict[str, Any]:
        body = await self._body(request)
        session, policy = body.get("session"), body.get("policy")
        if not isinstance(session, str) or not isinstance(policy, str):
            raise RequestError(400, "'session' and 'policy' must be strings")
        control = self._kernel.control
        answer = await self._control(
            lambda _: control.set_session_policy(session, policy), body)
        self.watch.bump("sessions")
        return answer

    # -- pairing ----------------------------------------------------------------------------

    async def _pairing_pending(self) -> int:
        return len((await self._pairing.list({}))["requests"])

    async def pairing(self, request: web.Request) -> dict[str, Any]:
        return {"requests": (await self._pairing.list({}))["requests"],
                "allowed": (await self._pairing.allowed({}))["allowed"]}

    def pairing_action(self, name: str):
        async def act(request: web.Request) -> dict[str, Any]:
            body = await self._body(request)
            answer = await self._control(getattr(self._pairing, name), body)
            self.watch.bump("pairing", "overview")
            return answer
        return act

    # -- deliveries -------------------------------------------------------------------------

    async def deliveries(self, request: web.Request) -> dict[str, Any]:
        limit = _int(request.query.get("limit", "200"), "limit", 1, 500)
        return await self._control(self._kernel.control.deliveries, {"limit": limit})

    async def delivery_retry(self, request: web.Request) -> dict[str, Any]:
        answer = await self._control(self._kernel.control.retry_delivery,
                                     await self._body(request))
        self.watch.bump("deliveries", "overview")
        return answer

    async def delivery_discard(self, request: web.Request) -> dict[str, Any]:
        answer = await self._control(self._kernel.control.discard_delivery,
                                     await self._body(request))
        self.watch.bump("deliveries", "overview")
        return answer

    # -- logins -----------------------------------------------------------------------------

    def _flows(self) -> dict[str, Any]:
        from chatkernel.core.plugins import collect_registered
        from chatkernel.sdk.login import Login

        flows = collect_registered(self._kernel.pm.hook.register_logins, "login")
        return {name: flow for name, flow in flows.items() if isinstance(flow, Login)}

    def _config_path(self) -> Path:
        from chatkernel.core import config as cfg

        return Path(self._kernel.config_path) if self._kernel.config_path else \
            cfg.config_path(None)

    async def login_list(self, request: web.Request) -> dict[str, Any]:
        from chatkernel.core import config as cfg

        configured = cfg.effective_accounts(self._kernel.config, self._kernel.pm)
        return {"channels": [{"channel": name, "description": flow.description,
                              "accounts": sorted(account for channel, account, _, _ in
                                                 configured if channel == name)}
                             for name, flow in sorted(self._flows().items())],
                "logins": [run.as_dict() for run in reversed(self.logins.runs.values())]}

    async def login_start(self, request: web.Request) -> dict[str, Any]:
        body = await self._body(request)
        channel, account = body.get("channel"), body.get("account") or "main"
        api_base = body.get("api_base") or None
        if not isinstance(channel, str) or not isinstance(account, str) or \
                not isinstance(api_base, (str, type(None))):
            raise RequestError(400, "'channel', 'account' and 'api_base' must be strings")
        if api_base is not None and not api_base.startswith(("http://", "https://")):
            raise RequestError(400, "'api_base' must be an http:// or https:// URL")
        try:
            run = self.logins.start(channel, account, api_base)
        except LookupError as exc:
            raise _Refused(404, str(exc)) from None
        except ValueError as exc:
            raise _Refused(409, str(exc)) from None
        return run.as_dict()

    async def login_cancel(self, request: web.Request) -> dict[str, Any]:
        body = await self._body(request)
        try:
            return self.logins.cancel(str(body.get("id", ""))).as_dict()
        except LookupError as exc:
            raise _Refused(404, str(exc)) from None

    # -- config -----------------------------------------------------------------------------

    async def config(self, request: web.Request) -> dict[str, Any]:
        from chatkernel.core import config as cfg
        from chatkernel.core.health.audit import audit, critical

        kernel = self._kernel
        path = self._config_path()
        effective = masked(kernel.config.model_dump(mode="json"))
        validation: dict[str, Any] = {"ok": True, "error": None}
        raw: dict[str, Any] = {}
        config = None
        try:
            raw = cfg.read_raw(path)
            config = cfg.parse(raw, path=path)
            from chatkernel.core.gateway.process import check_startup

            check_startup(config, config_path=path, pm=kernel.pm)
        except cfg.ConfigError as exc:
            validation = {"ok": False, "error": str(exc)}
        findings = await anyio.to_thread.run_sync(
            lambda: audit(path, cfg.home_dir(), raw, config, pm=kernel.pm))
        return {"path": str(path), "exists": path.exists(), "file": masked(raw),
                "effective": effective, "validation": validation,
                "audit": {"ok": not critical(findings),
                          "findings": [finding.as_dict() for finding in findings]}}

    # -- logs -------------------------------------------------------------------------------

    async def log_lines(self, request: web.Request) -> dict[str, Any]:
        query = request.query
        level = query.get("level") or None
        channel = query.get("channel") or None
        try:
            lines = self.logs.recent(after=_int(query.get("after", "0"), "after", 0, 10**18),
                                     level=level, channel=channel,
                                     limit=_int(query.get("limit", "500"), "limit", 1, 2000))
        except ValueError as exc:
            raise RequestError(400, str(exc)) from None
        return {"lines": lines, "channels": sorted(self._kernel.channel_types)}


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _int(text: str, name: str, low: int, high: int) -> int:
    if not (text.isascii() and text.isdigit() and len(text) <= 19 and low <= int(text) <= high):
        raise RequestError(400, f"{name!r} must be a whole number from {low} to {high}")
    return int(text)


def _same_origin(origin: str, request: web.Request) -> bool:
    """Whether ``Origin`` is the page this gateway served (the host the request was
    sent to, or one of ``gateway.public_hosts``: a reverse proxy may rewrite Host)."""
    import urllib.parse

    parts = urllib.parse.urlsplit(origin.strip().lower())
    host = (request.headers.get("Host") or "").strip().lower()
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    default = ":443" if parts.scheme == "https" else ":80"
    return parts.netloc.removesuffix(default) == host.removesuffix(default)
