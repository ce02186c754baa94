"""The gateway: a kernel, its accounts' receive loops and one HTTP server.

Each account's ``Channel.run`` runs under supervision: a crashed loop is
restarted with exponential backoff. SIGINT/SIGTERM stop the receive loops,
let in-flight turns and sends drain (bounded), close the store and return.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
from aiohttp import web

from chatkernel.core import config as cfg
from chatkernel.core.kernel import Kernel
from chatkernel.core.models import Account

log = logging.getLogger("chatkernel.gateway")

RESTART_BACKOFF_INITIAL = 1.0
RESTART_BACKOFF_MAX = 60.0
HEALTHY_AFTER_SECONDS = 60.0  # a loop that ran this long starts its backoff afresh
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


def parse_listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host.strip("[]"), int(port)


KERNEL = web.AppKey("kernel", Kernel)


def build_app(kernel: Kernel, control_token: str) -> web.Application:
    """The HTTP app: every channel's routes (web chat, webhooks) and the control API."""
    from chatkernel.core import control

    app = web.Application(client_max_size=64 * 1024 * 1024)
    seen: set[tuple[str, str]] = set()
    owned = [(account, route) for account in kernel.accounts.values()
             if account.channel is not None for route in account.channel.http_routes()]
    owned += [(None, route) for route in control.routes(kernel, control_token)]
    for account, (method, path, handler) in owned:
        if (method, path) in seen:
            where = f"channels.{account.channel_name}" if account else "gateway"
            raise cfg.ConfigError(f"two handlers want the HTTP route {method} {path}",
                                  key=where)
        seen.add((method, path))
        app.router.add_route(method, path, handler)
    app[KERNEL] = kernel
    return app


async def supervise(kernel: Kernel, account: Account, *,
                    sleep: Callable[[float], Awaitable[None]] = anyio.sleep) -> None:
    """Run an account's receive loop forever, restarting it with backoff when it fails."""
    channel = account.channel
    assert channel is not None
    backoff = RESTART_BACKOFF_INITIAL
    while True:
        started = anyio.current_time()
        try:
            await channel.run(kernel.receiver)
            log.warning("%s: receive loop returned; restarting", account.key)
        except Exception as exc:
            log.error("%s: receive loop failed: %s", account.key, exc,
                      exc_info=log.isEnabledFor(logging.DEBUG))
        if anyio.current_time() - started >= HEALTHY_AFTER_SECONDS:
            backoff = RESTART_BACKOFF_INITIAL
        kernel.metrics.restarts.labels(account.channel_name, account.name).inc()
        log.info("%s: restarting the receive loop in %.0fs", account.key, backoff)
        await sleep(backoff)
        backoff = min(backoff * 2, RESTART_BACKOFF_MAX)


async def run_gateway(config: cfg.KernelConfig, *, config_path=None,
                      listen: str | None = None, pm=None,
                      on_ready: Callable[[Listening], None] | None = None,
                      stop: anyio.Event | None = None, handle_signals: bool = True) -> None:
    """Run until SIGINT/SIGTERM (or ``stop`` is set), then shut down in order."""
    host, port = parse_listen(listen or config.gateway.listen)
    from chatkernel.core import control

    token = config.gateway.control_token or control.new_token()
    async with Kernel(config, config_path=config_path, pm=pm) as kernel:
        app = build_app(kernel, token)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            try:
                await site.start()
            except OSError as exc:
                raise cfg.ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}",
                                      path=config_path, key="gateway.listen") from None
            bound = runner.addresses[0]
            listening = Listening(host, bound[1])
            control.write_state(cfg.home_dir(), listening.url, token)
            names = ", ".join(sorted(kernel.accounts)) or "none"
            log.info("chatkernel listening on %s (accounts: %s; agent: %s)", listening.url,
                     names, config.agent.kind)
            if on_ready is not None:
                on_ready(listening)
            async with anyio.create_task_group() as loops:
                for account in kernel.accounts.values():
                    loops.start_soon(supervise, kernel, account, name=f"receive {account.key}")
                await _wait_for_stop(stop, handle_signals)
                log.info("stopping: no new messages; draining in-flight turns")
                loops.cancel_scope.cancel()
            if not await kernel.drain(DRAIN_SECONDS):
                log.warning("turns still running after %.0fs: they will be replayed on the "
                            "next start", DRAIN_SECONDS)
        finally:
            control.remove_state(cfg.home_dir())
            await runner.cleanup()
    log.info("stopped")


async def _wait_for_stop(stop: anyio.Event | None, handle_signals: bool) -> None:
    async with anyio.create_task_group() as tg:
        async def cancel_on(waiter: Callable[[], Awaitable[object]]) -> None:
            await waiter()
            tg.cancel_scope.cancel()

        if stop is not None:
            tg.start_soon(cancel_on, stop.wait)
        if handle_signals:
            async def signals() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
                    async for signum in received:
                        log.info("received %s", signal.Signals(signum).name)
                        return

            tg.start_soon(cancel_on, signals)
        if stop is None and not handle_signals:
            raise ValueError("nothing could ever stop this gateway")
