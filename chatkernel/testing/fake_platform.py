"""The parts every fake chat platform shares, for plugins' protocol-faithful fakes.

A fake platform is a real aiohttp server on 127.0.0.1 that speaks one platform's wire
format, so a channel's real client runs against it in tests. What differs per platform
(URL shapes, JSON shapes, error wording) is the fake's own; what every fake needs is here,
each part usable on its own and all of them together through :class:`FakePlatform`:

- :class:`Signal`: wakes every waiter; the base of long polls and ``wait_until``.
- :class:`Call`: the record of one request (method, params, time, HTTP status).
- :class:`ErrorAnswer`: an error answer (status, JSON body, headers).
- :class:`FaultQueue`: the next N calls of a method answer an error, lose their
  connection before or after taking effect, or take effect and hold their answer.
- :class:`RateWindows`: rolling-window limits, with a count of throttled requests.
- :class:`WebhookPusher`: POSTs events to a webhook with retries, signed by a signer:
  :class:`SecretTokenSigner` (a shared secret in a header), :class:`HmacSigner` (an
  HMAC of the body; Slack's and Meta's configurations are in their plugins' fakes).

A fake is a subclass that adds routes and serves its API calls through
:meth:`FakePlatform.serve_call`::

    class FakeChat(FakePlatform):
        def routes(self):
            return [web.post("/api/{method}", self._api)]

        async def _api(self, request):
            call = Call(method=request.match_info["method"], params=await request.json())
            return await self.serve_call(request, call, lambda: self._send(call))

        async def _send(self, call):
            self.check_rates([(("chat", call.params["chat"]), 1, 1.0)])
            self.record_sent(call.params)
            return web.json_response({"ok": True})

    async with FakeChat() as fake:
        ...                                   # a client talks to fake.base_url
        await fake.wait_for_sent(1)
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import math
import random
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

import aiohttp
import anyio
from aiohttp import web

__all__ = [
    "Call",
    "ErrorAnswer",
    "FakePlatform",
    "Fault",
    "FaultQueue",
    "HmacSigner",
    "RateWindows",
    "SecretTokenSigner",
    "Signal",
    "Signer",
    "WebhookAttempt",
    "WebhookPusher",
    "json_object",
    "serve_routes",
]


class Signal:
    """Wakes every task waiting on it, each time it fires.

    Waiters check their condition, wait, and check again: with no ``await`` between the
    check and :meth:`wait`, a change (and its :meth:`fire`) cannot slip in between.
    """

    def __init__(self) -> None:
        self._event: anyio.Event | None = None

    def fire(self) -> None:
        """Wake every task waiting now."""
        if self._event is not None:
            self._event.set()
            self._event = None

    async def wait(self, timeout: float | None = None) -> None:
        """Wait for the next :meth:`fire`, at most ``timeout`` seconds (None: no bound)."""
        if self._event is None:
            self._event = anyio.Event()
        event = self._event
        with anyio.move_on_after(timeout):
            await event.wait()


def json_object(body: bytes | str) -> dict[str, Any] | None:
    """A request body decoded as a JSON object; None when it is not JSON or not an object
    (each platform words that error its own way)."""
    try:
        decoded = json.loads(body)
    except ValueError:
        return None
    return decoded if isinstance(decoded, dict) else None


@contextlib.asynccontextmanager
async def serve_routes(*routes: web.RouteDef) -> AsyncIterator[str]:
    """An HTTP server on 127.0.0.1 with ``routes`` while the block runs; yields its base
    URL (``http://127.0.0.1:PORT``). For a test's own small endpoint (a webhook receiver,
    a server that holds its answers) where a whole fake platform is too much."""
    app = web.Application()
    app.add_routes(routes)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


class ErrorAnswer(Exception):
    """An error answer: HTTP ``status``, a JSON ``body`` and extra ``headers``.

    Raised by a handler that :meth:`FakePlatform.serve_call` runs, or queued as a fault;
    a fake subclasses it for its platform's error shape.
    """

    def __init__(self, status: int, body: Any, headers: Mapping[str, str] | None = None,
                 *, message: str | None = None) -> None:
        super().__init__(message or f"HTTP {status}: {body!r}")
        self.status = status
        self.body = body
        self.headers = dict(headers or {})

    def response(self) -> web.Response:
        """The answer as aiohttp sends it."""
        return web.json_response(self.body, status=self.status, headers=self.headers)


@dataclass(kw_only=True)
class Call:
    """One request the fake served (see :meth:`FakePlatform.serve_call`), in arrival order."""

    method: str                    # the platform's name for what was asked ("sendMessage")
    params: dict[str, Any]         # the decoded parameters
    when: float = field(default_factory=time.time)
    http_method: str = "POST"
    content_type: str = ""
    status: int | None = None      # HTTP status answered; None: dropped, or not answered yet
    error: ErrorAnswer | None = None  # the error answered, if one was


# -- faults ---------------------------------------------------------------------------------


@dataclass
class Fault:
    """What the next ``times`` matching calls do instead of their usual answer."""

    methods: frozenset[str] | None  # case-folded method names; None: every method
    times: int
    #: Answer this error; the call has no effect.
    error: ErrorAnswer | None = None
    #: Without an error the connection is dropped: before the call takes effect, or with
    #: this, after (the effect happened, the answer is lost on the way back).
    after_processing: bool = False
    #: A further condition on the call (one bot's token...); None: any call of the methods.
    match: Callable[[Call], bool] | None = None
    #: The call takes effect, then its answer waits until :meth:`FakePlatform.release`
    #: (or the platform closes): a request that landed while its client waits.
    stall: bool = False

    def matches(self, call: Call) -> bool:
        return ((self.methods is None or call.method.casefold() in self.methods)
                and (self.match is None or self.match(call)))


class FaultQueue:
    """Faults for the next calls, applied in the order they were queued.

    ``method`` is a method name, several names, or ``"*"`` for every method; names are
    compared case-insensitively.
    """

    def __init__(self) -> None:
        #: The faults not used up yet, oldest first.
        self.pending: list[Fault] = []

    @staticmethod
    def _methods(method: str | Iterable[str]) -> frozenset[str] | None:
        names = (method,) if isinstance(method, str) else tuple(method)
        return None if "*" in names else frozenset(name.casefold() for name in names)

    def fail(self, method: str | Iterable[str], error: ErrorAnswer, *, times: int = 1,
             match: Callable[[Call], bool] | None = None) -> None:
        """The next ``times`` calls of ``method`` answer ``error`` and have no effect."""
        self.pending.append(Fault(self._methods(method), times, error=error, match=match))

    def drop(self, method: str | Iterable[str], *, after_processing: bool = False,
             times: int = 1, match: Callable[[Call], bool] | None = None) -> None:
        """The next ``times`` calls of ``method`` lose their connection without an answer:
        before taking effect, or with ``after_processing`` after it."""
        self.pending.append(Fault(self._methods(method), times,
                                  after_processing=after_processing, match=match))

    def stall(self, method: str | Iterable[str], *, times: int = 1,
              match: Callable[[Call], bool] | None = None) -> None:
        """The next ``times`` calls of ``method`` take effect, then hold their answer
        until :meth:`FakePlatform.release` (or the platform closes): a test can act
        (kill the client's process) exactly while a request has landed unanswered."""
        self.pending.append(Fault(self._methods(method), times, stall=True, match=match))

    def clear(self) -> None:
        """Forget every pending fault."""
        self.pending.clear()

    def take(self, call: Call) -> Fault | None:
        """The first pending fault matching ``call``, used once (None: answer as usual)."""
        for fault in self.pending:
            if fault.matches(call):
                fault.times -= 1
                if fault.times <= 0:
                    self.pending.remove(fault)
                return fault
        return None


# -- rate limits ----------------------------------------------------------------------------

#: ``(key, limit, window seconds)``: at most ``limit`` requests in any ``window`` per key.
Rule = tuple[Hashable, int, float]


class RateWindows:
    """Rolling-window rate limits (never a bucket that bursts), as platforms enforce them."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        #: Requests refused so far.
        self.throttled = 0
        self._hits: dict[Hashable, deque[float]] = {}

    def admit(self, rules: Iterable[Rule]) -> float:
        """0.0 when every rule has room: the request then counts against each key.
        Otherwise the seconds until the fullest window has room; the request does not
        count, and :attr:`throttled` goes up."""
        rules = list(rules)
        now = self.clock()
        wait = 0.0
        for key, limit, window in rules:
            hits = self._hits.setdefault(key, deque())
            while hits and hits[0] <= now - window:
                hits.popleft()
            if len(hits) >= limit:
                wait = max(wait, hits[0] + window - now)
        if wait > 0:
            self.throttled += 1
            return wait
        for key, _, _ in rules:
            self._hits[key].append(now)
        return 0.0

    def count(self, key: Hashable, window: float) -> int:
        """How many requests under ``key`` the last ``window`` seconds admitted."""
        now = self.clock()
        return sum(1 for at in self._hits.get(key, ()) if at > now - window)

    def reset(self) -> None:
        """Empty every window (the throttled count stays)."""
        self._hits.clear()


# -- webhooks -------------------------------------------------------------------------------

#: Headers that authenticate a webhook request, made from its exact body bytes.
Signer = Callable[[bytes], Mapping[str, str]]


@dataclass(frozen=True)
class SecretTokenSigner:
    """A shared secret sent as it is in a header: Telegram's ``secret_token``, echoed in
    ``X-Telegram-Bot-Api-Secret-Token``."""

    secret: str = field(repr=False)
    header: str = "X-Telegram-Bot-Api-Secret-Token"

    def __call__(self, body: bytes) -> dict[str, str]:
        return {self.header: self.secret}


@dataclass(frozen=True)
class HmacSigner:
    """The signer of :class:`chatkernel.channels.HmacSignature`'s scheme: ``header:
    <prefix><hex HMAC-SHA256(secret, signed bytes)>``, where the signed bytes are the
    raw body, or ``signed(timestamp, body)`` with the time of sending in
    ``timestamp_header`` (each attempt is signed anew). Platform plugins configure it
    in their fakes (Slack's ``SlackSigner``, Meta's ``MetaSigner``)."""

    secret: str = field(repr=False)
    header: str
    prefix: str = ""
    timestamp_header: str | None = None
    signed: Callable[[str, bytes], bytes] | None = None
    clock: Callable[[], float] = time.time

    def __call__(self, body: bytes) -> dict[str, str]:
        headers: dict[str, str] = {}
        signed = body
        if self.timestamp_header is not None:
            timestamp = str(int(self.clock()))
            headers[self.timestamp_header] = timestamp
            signed = self.signed(timestamp, body) if self.signed else body
        digest = hmac.new(self.secret.encode(), signed, hashlib.sha256).hexdigest()
        headers[self.header] = self.prefix + digest
        return headers


@dataclass(kw_only=True)
class WebhookAttempt:
    """One POST of an event to a webhook."""

    url: str
    attempt: int                   # 1 for the first try
    status: int | None             # HTTP status; None when no answer came
    error: str | None              # why no answer came ("Read timeout expired"...)
    reason: str = ""               # the answer's HTTP reason phrase
    headers: dict[str, str] = field(repr=False)  # the request's, signature included
    body: bytes = field(repr=False)
    timestamp: float

    @property
    def ok(self) -> bool:
        """Delivered: the webhook answered 2xx."""
        return self.status is not None and 200 <= self.status < 300


class WebhookPusher:
    """POSTs events to webhooks, retrying what failed, as platforms deliver webhooks.

    An attempt fails when no answer comes within ``timeout`` seconds, the connection
    fails, or the answer is not 2xx; the next attempt follows after the next of
    ``delays``, and after the last one the event is given up. Every attempt is in
    :attr:`attempts`. Use it as an async context manager, or :meth:`aclose` it.
    """

    def __init__(self, *, delays: Iterable[float] = (0.05, 0.1, 0.2, 0.4),
                 timeout: float = 10.0) -> None:
        self.delays = tuple(delays)
        self.timeout = timeout
        self.attempts: list[WebhookAttempt] = []
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client (a later push opens a new one)."""
        if self._http is not None:
            http, self._http = self._http, None
            await http.close()

    async def push(self, url: str, event: Any, *, signer: Signer | None = None,
                   headers: Mapping[str, str] | Callable[[int], Mapping[str, str]] | None = None,
                   wanted: Callable[[], bool] | None = None,
                   on_attempt: Callable[[WebhookAttempt], None] | None = None,
                   delays: Iterable[float] | None = None,
                   timeout: float | None = None) -> WebhookAttempt | None:
        """Deliver ``event`` to ``url``, retrying; returns the last attempt.

        ``event`` is sent as JSON (bytes are sent as they are); the body is encoded once
        and ``signer`` signs exactly those bytes, anew for each attempt. ``headers`` are
        added to each request, or made per attempt by a function of its number (Slack's
        ``X-Slack-Retry-Num`` on retries). ``on_attempt``
        sees each attempt as it is recorded. ``wanted()`` is asked after a failed attempt
        and after each delay: when it turns false (the webhook was changed, the platform
        is closing) the push stops and returns None: the event is not settled. Otherwise
        the last attempt is ``ok`` when delivered, not when given up. ``delays`` and
        ``timeout`` override the pusher's for this event.
        """
        body = event if isinstance(event, bytes) else json.dumps(event).encode()
        pending = list(self.delays if delays is None else delays)
        limit = self.timeout if timeout is None else timeout
        for number in range(1, len(pending) + 2):
            extra = headers(number) if callable(headers) else headers
            sent = {"Content-Type": "application/json", **(extra or {}),
                    **(signer(body) if signer is not None else {})}
            attempt = await self._post(url, body, sent, number, limit)
            self.attempts.append(attempt)
            if on_attempt is not None:
                on_attempt(attempt)
            if attempt.ok:
                return attempt
            if wanted is not None and not wanted():
                return None
            if not pending:
                break
            await anyio.sleep(pending.pop(0))
            if wanted is not None and not wanted():
                return None
        return attempt

    async def _post(self, url: str, body: bytes, headers: dict[str, str], number: int,
                    timeout: float) -> WebhookAttempt:
        if self._http is None:
            self._http = aiohttp.ClientSession()
        status: int | None = None
        reason = ""
        error: str | None = None
        try:
            with anyio.fail_after(timeout):
                async with self._http.post(url, data=body, headers=headers) as response:
                    status, reason = response.status, response.reason or ""
                    await response.read()
        except TimeoutError:
            error = "Read timeout expired"
        except (aiohttp.ClientError, OSError) as exc:
            error = f"Connection failed: {exc.__class__.__name__}"
        return WebhookAttempt(url=url, attempt=number, status=status, error=error,
                              reason=reason, headers=headers, body=body,
                              timestamp=time.time())


# -- the server -----------------------------------------------------------------------------


class FakePlatform:
    """A fake platform's HTTP server on 127.0.0.1: ``async with MyFake() as fake``.

    Give clients :attr:`base_url`. Subclasses return their routes from :meth:`routes`
    and serve API calls through :meth:`serve_call`, which records them in :attr:`calls`,
    adds :attr:`latency` (plus up to :attr:`jitter`, drawn from :attr:`random`, seeded)
    and applies :attr:`faults`. Handlers check :meth:`check_rates`, record what the bot
    sent with :meth:`record_sent`, long-poll with :meth:`hold`, and call :meth:`changed`
    after any change a test may wait for (:meth:`wait_until`). Background work (webhook
    deliveries through :attr:`webhooks`) runs in the platform's task group
    (:meth:`start_soon`). On exit long polls are answered at once and background work is
    cancelled, so cleanup never hangs.
    """

    #: The largest request body accepted.
    client_max_size: int = 1024 * 1024
    #: Seconds the server waits for open requests at exit.
    shutdown_timeout: float = 1.0

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0,
                 extra_routes: Callable[[Any], list[web.RouteDef]] | None = None,
                 seed: int = 0) -> None:
        self.host = host
        self.port = port
        #: More routes, made at start from the platform (a dev server's own routes).
        self.extra_routes = extra_routes
        #: ``http://127.0.0.1:<port>`` once started.
        self.base_url = ""
        #: Seconds added before answering every call served.
        self.latency = 0.0
        #: Up to this many seconds more, drawn per call from :attr:`random`.
        self.jitter = 0.0
        self.random = random.Random(seed)
        self.calls: list[Call] = []
        self.faults = FaultQueue()
        #: Calls that took effect and whose answer a ``stall`` fault holds back.
        self.stalled: list[Call] = []
        self.rates = RateWindows()
        self.webhooks = WebhookPusher()
        #: What the bot sent, in order; a subclass decides what an entry is.
        self.sent_messages: list[Any] = []
        #: Fired on every change the fake sees.
        self.activity = Signal()
        #: Where :meth:`narrate` tells a person what happened (a dev server's stderr).
        self.narrator: Callable[[str], Any] | None = None
        #: True from the moment the platform starts shutting down.
        self.closing = False
        #: Requests waiting in :meth:`hold` now (long polls, answers a stall holds back):
        #: a test waits for its poll to be held before it makes what the poll waits for.
        self.holding = 0
        self._signals = [self.activity]
        self._task_group: Any = None
        self._stack: contextlib.AsyncExitStack | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        """The platform's routes (a subclass's); anything else goes to :meth:`unknown_route`."""
        return []

    def developer_routes(self) -> list[web.RouteDef]:
        """The fake's control surface, ``/_fake/*`` by convention, which the real platform
        has not: a user writes, what the bot sent... A dev server
        (:mod:`chatkernel.testing.devserver`) serves them beside :meth:`routes`; tests
        drive the fake's methods directly. None here; a subclass returns its own."""
        return []

    def developer_info(self) -> dict[str, Any]:
        """What a dev server's first line tells a script once the fake listens: where it
        is, and the credentials an account needs to talk to it. A subclass adds its own
        (tokens, ids) to this ``base_url``."""
        return {"base_url": self.base_url}

    def config_snippet(self) -> str | None:
        """The config a dev server prints on stderr once the fake listens: an account
        pointed at it (its secrets as ``${ENV}`` references, with the ``export`` lines
        that give them) and the ``curl`` calls that write as a user. None: no snippet."""
        return None

    def narrate(self, line: str) -> None:
        """Tell :attr:`narrator` (a person watching a dev server) ``line``; without one,
        nothing (tests read :attr:`calls` and :attr:`sent_messages` instead)."""
        if self.narrator is not None:
            self.narrator(line)

    async def unknown_route(self, request: web.Request) -> web.StreamResponse:
        """The answer to a path no route serves (aiohttp's 404 unless overridden)."""
        raise web.HTTPNotFound()

    async def __aenter__(self) -> Self:
        # Whatever was entered is closed again if a later step fails.
        async with contextlib.AsyncExitStack() as stack:
            app = web.Application(client_max_size=self.client_max_size)
            app.router.add_routes(self.routes())
            if self.extra_routes is not None:
                app.router.add_routes(self.extra_routes(self))
            app.router.add_route("*", "/{tail:.*}", self.unknown_route)
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=self.shutdown_timeout)
            await runner.setup()
            stack.push_async_callback(runner.cleanup)
            await web.TCPSite(runner, self.host, self.port).start()
            host, port = runner.addresses[0][:2]
            self.port = port
            self.base_url = f"http://{host}:{port}"
            stack.push_async_callback(self.webhooks.aclose)
            self._task_group = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._task_group.cancel_scope.cancel)
            self._stack = stack.pop_all()  # open until __aexit__
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        self.closing = True
        for signal in self._signals:
            signal.fire()  # long polls answer now: the server's cleanup waits for them
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.aclose()

    @property
    def running(self) -> bool:
        """Started and not closing."""
        return self._task_group is not None and self._stack is not None and not self.closing

    def start_soon(self, function: Callable[..., Awaitable[Any]], *args: Any) -> bool:
        """Run ``function(*args)`` in the platform's task group, cancelled on exit.
        False (and nothing started) when the platform is not running."""
        if not self.running:
            return False
        self._task_group.start_soon(function, *args)
        return True

    # -- waking and waiting ----------------------------------------------------------------

    def new_signal(self) -> Signal:
        """A :class:`Signal` that also fires when the platform closes (for long polls)."""
        signal = Signal()
        self._signals.append(signal)
        return signal

    def changed(self) -> None:
        """Something a test may wait for changed: wake :meth:`wait_until`."""
        self.activity.fire()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until ``predicate()`` is true, checked after every change the fake sees
        (and every 50 ms, for conditions outside it); TimeoutError after ``timeout``."""
        with anyio.fail_after(timeout):
            while not predicate():
                await self.activity.wait(0.05)

    async def hold(self, ready: Callable[[], bool], timeout: float,
                   signal: Signal | None = None) -> bool:
        """A long poll: wait until ``ready()``, ``timeout`` seconds, or the platform
        closes, re-checking whenever ``signal`` (default :attr:`activity`) fires.
        Returns ``ready()``."""
        signal = signal or self.activity
        deadline = anyio.current_time() + timeout
        self.holding += 1
        try:
            while not ready() and not self.closing:
                remaining = deadline - anyio.current_time()
                if remaining <= 0:
                    break
                await signal.wait(remaining)
        finally:
            self.holding -= 1
        return ready()

    # -- calls -------------------------------------------------------------------------------

    def request_delay(self) -> float:
        """Seconds the next call waits: :attr:`latency` plus its share of :attr:`jitter`."""
        return self.latency + (self.jitter * self.random.random() if self.jitter else 0.0)

    async def serve_call(self, request: web.Request, call: Call,
                         answer: Callable[[], Awaitable[web.StreamResponse]]
                         ) -> web.StreamResponse:
        """Record ``call``, wait the latency, then answer it, unless a fault says otherwise.

        ``answer()`` makes the platform's answer and may raise :class:`ErrorAnswer`,
        which becomes the answer. A fault answers its error instead (``answer`` is not
        run), or drops the connection before ``answer`` runs, or after, or holds the
        answer back until :meth:`release`.
        """
        self.calls.append(call)
        self.changed()
        delay = self.request_delay()
        if delay:
            await anyio.sleep(delay)
        fault = self.faults.take(call)
        if (fault is not None and fault.error is None and not fault.after_processing
                and not fault.stall):
            return self.drop(request)
        try:
            if fault is not None and fault.error is not None:
                raise fault.error
            response = await answer()
        except ErrorAnswer as error:
            call.error = error
            response = error.response()
        finally:
            self.changed()
        if fault is not None and fault.after_processing:
            return self.drop(request)
        if fault is not None and fault.stall:
            self.stalled.append(call)
            self.changed()
            await self.hold(lambda: call not in self.stalled, math.inf)
        call.status = response.status
        return response

    def release(self) -> None:
        """Answer every call a ``stall`` fault holds back (a client still there gets it)."""
        self.stalled.clear()
        self.changed()

    @staticmethod
    def drop(request: web.Request) -> web.StreamResponse:
        """Close the connection with no answer: the client sees a disconnect."""
        if request.transport is not None:
            request.transport.close()
        return web.Response(status=500)  # never reaches the client

    def calls_to(self, method: str) -> list[Call]:
        """The calls of ``method`` (case-insensitive), in order."""
        return [call for call in self.calls if call.method.casefold() == method.casefold()]

    # -- rate limits ---------------------------------------------------------------------------

    @property
    def throttled(self) -> int:
        """Requests refused by :meth:`check_rates` so far."""
        return self.rates.throttled

    def check_rates(self, rules: Iterable[Rule]) -> None:
        """Count the request against ``rules``, or raise :meth:`rate_limited` when a
        window is full (the request then does not count)."""
        wait = self.rates.admit(rules)
        if wait > 0:
            raise self.rate_limited(wait)

    def rate_limited(self, wait: float) -> ErrorAnswer:
        """The platform's 429 for a request ``wait`` seconds too early. This default sends
        ``Retry-After`` in whole seconds; a fake overrides it with its platform's body."""
        retry_after = max(1, math.ceil(wait))
        return ErrorAnswer(429, {"error": "rate limited", "retry_after": retry_after},
                             {"Retry-After": str(retry_after)})

    # -- what the bot sent -----------------------------------------------------------------------

    def record_sent(self, message: Any) -> None:
        """Add what the bot sent to :attr:`sent_messages`."""
        self.sent_messages.append(message)
        self.changed()

    async def wait_for_sent(self, count: int, timeout: float = 10.0, *,
                            where: Callable[[Any], bool] | None = None) -> list[Any]:
        """Wait until ``count`` sent messages (those ``where`` accepts) are recorded;
        returns them."""
        def chosen() -> list[Any]:
            return [m for m in self.sent_messages if where is None or where(m)]

        await self.wait_until(lambda: len(chosen()) >= count, timeout)
        return chosen()
