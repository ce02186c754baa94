"""The gateway: a kernel, its accounts' receive loops and one HTTP server.

Each account's receive loop (its transport's ``run``, given the kernel's receiver) runs
under a :class:`~chatkernel.core.runtime.supervisor.Supervisor`:
a crashed loop is restarted with exponential backoff, and the health monitor
restarts one that went silent. The HTTP server carries every channel's routes,
the control API, ``/healthz``, ``/metrics`` and ``/status``. SIGINT/SIGTERM stop
the receive loops, let in-flight turns and sends drain (bounded), close the
store and return. SIGHUP reloads the config file (chatkernel.core.runtime.reload).
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
from aiohttp import web
from anyio.abc import TaskGroup

from chatkernel.core import config as cfg
from chatkernel.core.config.listen import check_listen, is_loopback_host, parse_listen
from chatkernel.core.gateway import http_server
from chatkernel.core.runtime.cluster import Cluster
from chatkernel.core.gateway.gc_tuning import tune_for_serving
from chatkernel.core.gateway.homelock import HomeLock
from chatkernel.core.kernel import Kernel
from chatkernel.sdk.models import Account
from chatkernel.core.runtime.reload import ConfigReloader
from chatkernel.core.runtime.parts import GatewayParts
from chatkernel.core.runtime.pairing_control import PairingControl
from chatkernel.core.runtime.supervisor import Supervisors, supervise

__all__ = ["DRAIN_SECONDS", "Listening", "ReceiveLoops", "build_app", "check_listen",
           "check_startup", "run_gateway", "supervise"]

log = logging.getLogger("chatkernel.gateway")

DRAIN_SECONDS = 10.0


@dataclass(slots=True)
class Listening:
    """Where the gateway's HTTP server is bound."""

    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def check_startup(config: cfg.KernelConfig, *, config_path=None, listen: str | None = None,
                  pm=None) -> Kernel:
    """Every check a start makes before it binds or opens anything (the listen address,
    then :meth:`Kernel.check`): ``chatkernel config validate`` runs it too, so what it
    calls ok, ``run`` accepts; so does a reload. Returns the checked kernel (not
    started: its accounts are built, nothing is open)."""
    host, _ = parse_listen(listen or config.gateway.listen)
    check_listen(config, host, config_path=config_path)
    # Channel constructors open nothing (clients connect on first use): no cleanup.
    kernel = Kernel(config, config_path=config_path, pm=pm)
    kernel.check()
    return kernel


def cannot_listen(host: str, port: int, error: OSError, origin: str | None) -> str:
    """Why ``host:port`` cannot be bound, where the address came from, and what to try."""
    shown = f"[{host}]" if ":" in host else host
    # asyncio's strerror repeats the address; the errno's own words do not.
    reason = os.strerror(error.errno) if error.errno else str(error)
    message = f"cannot listen on {shown}:{port} (from {origin or 'gateway.listen'}): {reason}"
    if error.errno == errno.EADDRINUSE:
        free = free_port(host)
        message += ("; another program (another gateway?) holds it: stop it, or choose "
                    + (f"a free port, e.g. --listen {shown}:{free}" if free else
                       f"another port (--listen {shown}:0 picks a free one)"))
    return message


def free_port(host: str) -> int | None:
    """A port free on ``host`` right now (the system's pick for port 0), or None."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
            return probe.getsockname()[1]
    except OSError:
        return None


#: aiohttp's settings for each connection's handler (no access log: the kernel's
#: own lines say what happened).
HANDLER_ARGS: dict[str, object] = {"access_log": None}


def connection_limits(gateway: cfg.GatewayConfig) -> http_server.ConnectionLimits:
    """The HTTP server's limits from ``[gateway]``; raises the descriptor limit first,
    so the cap can be as high as the system allows (see chatkernel.core.gateway.http_server)."""
    descriptors = http_server.raise_nofile_limit()
    cap = http_server.connection_cap(gateway.max_connections, descriptors)
    log.debug("HTTP connections: at most %d (descriptor limit %s)", cap, descriptors)
    return http_server.ConnectionLimits(header_timeout=gateway.header_timeout,
                                        idle_timeout=gateway.idle_timeout, max_connections=cap)


class ReceiveLoops:
    """The accounts' receive loops, each under its :class:`Supervisor`, in one task group:
    where loops start (for every account at start, for one a reload adds) and stop
    (an account a reload removes or restarts on new settings)."""

    def __init__(self, supervisors: Supervisors, task_group: TaskGroup) -> None:
        self._supervisors = supervisors
        self._tg = task_group
        self._running: dict[str, tuple[anyio.CancelScope, anyio.Event]] = {}

    def start(self, account: Account) -> None:
        supervisor = self._supervisors.add(account)
        scope, ended = self._running[account.key] = anyio.CancelScope(), anyio.Event()

        async def run() -> None:
            try:
                with scope:
                    await supervisor.run()
            finally:
                ended.set()

        self._tg.start_soon(run, name=f"receive {account.key}")

    def stop(self, key: str) -> anyio.Event | None:
        """Cancel an account's loop; the event is set once it ended (None: none ran)."""
        self._supervisors.discard(key)
        found = self._running.pop(key, None)
        if found is None:
            return None
        scope, ended = found
        scope.cancel()
        return ended


def build_app(kernel: Kernel, control_token: str, *, loopback: bool = True,
              host: str = "127.0.0.1") -> web.Application:
    """The HTTP app: every channel's routes (web chat, webhooks), the control API and
    the health endpoints (open on loopback, see :mod:`chatkernel.core.gateway.endpoints`),
    behind the request checks of :mod:`chatkernel.core.gateway.http_guard` (``host``: the
    listen host)."""
    from chatkernel.core.gateway import control
    from chatkernel.core.gateway import endpoints as health_http
    from chatkernel.core.gateway import hooks, http_guard

    middlewares = [http_server.track_requests]
    traced = kernel.tracer.http_middleware()  # a webhook's request: its message's trace
    if traced is not None:
        middlewares.append(traced)
    app = web.Application(client_max_size=http_guard.MAX_BODY_BYTES, middlewares=middlewares)
    seen: set[tuple[str, str]] = set()
    owned = [(account, route) for account in kernel.accounts.values()
             if account.transport is not None for route in account.transport.http_routes()]
    owned += [(None, route) for route in control.routes(kernel.control, control_token,
                                                        PairingControl(kernel.pairing))]
    owned += [(None, route) for route in [
        *hooks.hook_routes(lambda: kernel.jobs, lambda: kernel.config),
        *hooks.control_routes(kernel.jobs_control, control_token)]]
    page = health_http.root_page(kernel.pm, kernel.config, kernel.channel_types,
                                 kernel.accounts.values(), loopback=loopback)
    owned += [(None, route) for route in health_http.routes(
        kernel.health, kernel.metrics, control_token, loopback=loopback, root_page=page)]
    # The operator's console at /ui/, its API at /api/ (chatkernel.console).
    from chatkernel.console.api import Console

    console = Console(kernel, control_token)
    owned += [(None, route) for route in console.routes()]
    for account, (method, path, handler) in owned:
        if (method, path) in seen:
            where = f"channels.{account.channel_name}" if account else "gateway"
            raise cfg.ConfigError(f"two handlers want the HTTP route {method} {path}",
                                  key=where)
        seen.add((method, path))
        app.router.add_route(method, path, handler)
    webhooks = [path for account, (_, path, _) in owned if account is not None and
                http_guard.is_webhook_path(path, account.channel_name, account.name)]
    webhooks += hooks.HOOK_PATHS  # triggers' callers: their credential is the check
    hosts = http_guard.HostCheck(host.lower(), frozenset(kernel.config.gateway.public_hosts))
    http_guard.install(app, hosts=hosts, webhooks=webhooks)
    console.install(app)
    # Every answer says it is this process's: doctor checks a webhook's public URL with it.
    from chatkernel.core.health.doctor import mark_answers

    mark_answers(app)
    return app


async def run_gateway(config: cfg.KernelConfig, *, config_path=None,
                      listen: str | None = None, pm=None,
                      on_ready: Callable[[Listening], None] | None = None,
                      stop: anyio.Event | None = None, handle_signals: bool = True,
                      listen_origin: str | None = None) -> None:
    """Run until SIGINT/SIGTERM (or ``stop`` is set), then shut down in order.

    ``listen_origin`` says where the listen address came from ("--listen on the
    command line"), for the error when it cannot be bound.
    Holds the home's lock (:mod:`chatkernel.core.gateway.homelock`) all along: raises
    :class:`~chatkernel.core.gateway.homelock.HomeInUse` when another process has it."""
    host, port = parse_listen(listen or config.gateway.listen)
    check_listen(config, host, config_path=config_path)
    from chatkernel.core import gateway_state
    from chatkernel.core.gateway import control

    token = config.gateway.control_token or control.new_token()
    limits = connection_limits(config.gateway)
    # The gateway's own parts, filled as they come up; the kernel's components read them.
    parts = GatewayParts()
    # Before the store opens: a second gateway must not replay the first one's work
    # (nor poll its accounts, nor take over gateway.json).
    with HomeLock(cfg.home_dir(), "gateway"):
        async with Kernel(config, config_path=config_path, pm=pm, gateway=parts) as kernel:
            kernel.secrets.add(token)  # in gateway.json, which an agent could read
            app = build_app(kernel, token, loopback=is_loopback_host(host), host=host)
            runner = web.AppRunner(app, handle_signals=False, **HANDLER_ARGS)
            await runner.setup()
            restore_gc = None
            try:
                site = http_server.GuardedSite(runner, host, port, limits=limits,
                                               handler_args=HANDLER_ARGS)
                try:
                    await site.start()
                except OSError as exc:
                    raise cfg.ConfigError(cannot_listen(host, port, exc, listen_origin)) from None
                bound = runner.addresses[0]
                listening = Listening(host, bound[1])
                parts.url = listening.url
                try:
                    gateway_state.write_state(cfg.home_dir(), listening.url, token)
                except OSError as exc:
                    raise cfg.ConfigError(
                        f"cannot write {gateway_state.state_path(cfg.home_dir())}: "
                        f"{exc.strerror or exc}. The chatkernel commands find the running gateway "
                        "through it: make the directory writable for this user, or set "
                        "CHATKERNEL_HOME to a writable one") from None
                names = ", ".join(sorted(kernel.accounts)) or "none"
                log.info("chatkernel listening on %s (accounts: %s; agent: %s)", listening.url,
                         names, config.agent.kind)
                if on_ready is not None:
                    on_ready(listening)
                # Started: what start-up built is never garbage (chatkernel.core.gateway.gc_tuning).
                restore_gc = tune_for_serving()
                async with anyio.create_task_group() as loops:
                    if kernel.cluster is not None:
                        # Several instances: each account's loop runs where its lease is.
                        receive: ReceiveLoops | Cluster = kernel.cluster
                        kernel.cluster.run_receive_loops()
                    else:
                        receive = ReceiveLoops(kernel.supervisors, loops)
                        for account in kernel.accounts.values():
                            receive.start(account)
                    parts.reloader = reloader = ConfigReloader(
                        kernel.reload, receive,
                        listen_in_effect=lambda: kernel.config.gateway.listen,
                        config_path=config_path, listen=listen or config.gateway.listen)
                    loops.start_soon(kernel.health.run_refresher, name="health refresher")
                    loops.start_soon(kernel.monitor.run, name="health monitor")
                    def ready() -> None:
                        # What scripts wait for (docs/gateway.md): the control API, the
                        # webhooks and every account's loop are up, and a signal stops
                        # the gateway in order from now on.
                        log.info("chatkernel ready on %s (%d account(s) started)",
                                 listening.url, len(kernel.accounts))

                    await _wait_for_stop(stop, handle_signals, reloader.reload_and_log, ready)
                    log.info("stopping: no new messages; draining in-flight turns")
                    if kernel.cluster is not None:
                        # The leases are renewed while the turns and sends drain, then
                        # given back (another instance replaying them would answer twice).
                        kernel.cluster.stop_receiving()
                        await _drain(kernel)
                        await kernel.cluster.release()
                    loops.cancel_scope.cancel()
                if kernel.cluster is None:
                    await _drain(kernel)
            finally:
                if restore_gc is not None:
                    restore_gc()
                gateway_state.remove_state(cfg.home_dir())
                await runner.cleanup()
    log.info("stopped")


async def _drain(kernel: Kernel) -> None:
    """Let turns and sends finish (bounded), and say what is left, by what it is."""
    left = await kernel.drain(DRAIN_SECONDS)
    if left.turns:
        log.warning("%d turn(s) still running or queued after %.0fs: their messages are "
                    "replayed on the next start", left.turns, DRAIN_SECONDS)
    if left.sends:
        log.warning("%d outbox payload(s) still being sent after %.0fs: one in flight is "
                    "reported as delivery unknown on the next start, the others are sent "
                    "then", left.sends, DRAIN_SECONDS)
    if left.waiting:
        log.info("%d outbox payload(s) wait for a retry or for their platform: they stay "
                 "queued in the state database and are sent on the next start", left.waiting)


async def _wait_for_stop(stop: anyio.Event | None, handle_signals: bool,
                         on_hangup: Callable[[], Awaitable[None]],
                         ready: Callable[[], None] = lambda: None) -> None:
    """Until ``stop`` is set or SIGINT/SIGTERM arrives (SIGHUP reloads). ``ready`` is
    called once the signals are handled, so nothing that waits for it can stop the
    process before its shutdown runs."""
    async with anyio.create_task_group() as tg:
        async def cancel_on(waiter: Callable[[], Awaitable[object]]) -> None:
            await waiter()
            tg.cancel_scope.cancel()

        if stop is not None:
            tg.start_soon(cancel_on, stop.wait)
        if handle_signals:
            async def signals() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM,
                                                signal.SIGHUP) as received:
                    ready()
                    async for signum in received:
                        log.info("received %s", signal.Signals(signum).name)
                        if signum != signal.SIGHUP:
                            return
                        tg.start_soon(on_hangup, name="reload")

            tg.start_soon(cancel_on, signals)
        if stop is None and not handle_signals:
            raise ValueError("nothing could ever stop this gateway")
        if not handle_signals:
            ready()
