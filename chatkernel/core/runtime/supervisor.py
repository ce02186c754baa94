"""Supervision of one account's receive loop.

A :class:`Supervisor` runs the account's receive loop (``account.transport.run``, given
the kernel's :class:`~chatkernel.core.inbound.pipeline.Receiver`) and keeps it
running: a loop that fails (or returns) is started again with exponential backoff (1 s
doubling to 60 s, back to 1 s after a loop that ran a minute). The health monitor (or an
operator) can ask for a restart: the running loop's cancel scope is cancelled
and the next loop starts only once the old one has ended, so two loops of one
account never run at once, however long the old one takes to stop. An account
a channel paused is not restarted until the gateway is. A loop that ended on a
refused identity (``Trouble.refused``) leaves the account ``failed`` with what to
do, and waits at least as long as the kit's loops wait for one.

The supervisor keeps the account's runtime state (``Account.runtime``): state,
loop start, restarts with their times, last error. :class:`Supervisors` holds this
process's supervisors by account key: the gateway's receive loops (or the cluster) add
them, the health monitor restarts through them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anyio

from chatkernel.sdk import receiving
from chatkernel.sdk.models import Account

if TYPE_CHECKING:
    from chatkernel.core.health.metrics import Metrics
    from chatkernel.core.inbound.pipeline import Receiver
    from chatkernel.sdk.channel import Channel

log = logging.getLogger("chatkernel.gateway")

RESTART_BACKOFF_INITIAL = 1.0
RESTART_BACKOFF_MAX = 60.0
HEALTHY_AFTER_SECONDS = 60.0  # a loop that ran this long starts its backoff afresh
STOP_TIMEOUT_SECONDS = 30.0


class Supervisor:
    """Runs one account's receive loop forever (until cancelled)."""

    def __init__(self, account: Account, *, receiver: "Receiver", metrics: "Metrics",
                 sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
                 clock: Callable[[], float] = time.time) -> None:
        if account.channel is None:
            raise ValueError(f"{account.key} has no channel to run")
        self.account = account
        self._receiver = receiver  # what transport.run is given as `deliver`
        self._metrics = metrics
        self._sleep = sleep
        self._clock = clock
        self._scope: anyio.CancelScope | None = None
        self._ended: anyio.Event | None = None
        self._restart_reason: str | None = None
        #: Receive loops of this account running right now: 0 or 1, never more.
        self.loops_running = 0
        #: How many times ``transport.run`` was started.
        self.loops_started = 0

    @property
    def restarting(self) -> bool:
        """A restart was asked for and the old loop has not ended yet."""
        return self._restart_reason is not None

    async def run(self) -> None:
        """Start the loop, restart it when it fails, until cancelled."""
        account, runtime = self.account, self.account.runtime
        channel, transport = account.channel, account.transport
        assert channel is not None and transport is not None
        metrics = self._metrics
        backoff = RESTART_BACKOFF_INITIAL
        try:
            while True:
                if runtime.state == "paused":
                    # Only a person can help (a new login): the loop starts again with
                    # the gateway, the account red until then.
                    log.warning("%s: paused (%s); not restarted until the gateway is",
                                account.key, runtime.detail)
                    await anyio.sleep_forever()
                runtime.loop_started(self._clock())
                started = anyio.current_time()
                error: Exception | None = None
                self._ended = anyio.Event()
                with anyio.CancelScope() as scope:
                    self._scope = scope
                    self.loops_running += 1
                    self.loops_started += 1
                    try:
                        await transport.run(self._receiver)
                    except Exception as exc:
                        error = exc
                    finally:
                        self.loops_running -= 1
                        self._scope = None
                        self._ended.set()
                reason, self._restart_reason = self._restart_reason, None
                if reason is not None:
                    # Asked for (and counted) by restart(): start again at once.
                    log.warning("%s: receive loop restarted (%s)", account.key, reason)
                    continue
                if runtime.state == "paused":
                    continue
                refused = _refused(channel, error)
                message = refused[0] if refused else _describe(error)
                if refused:
                    log.error("%s: %s", account.key, message)
                elif error is not None:
                    log.error("%s: receive loop failed: %s", account.key, message,
                              exc_info=(type(error), error, error.__traceback__)
                              if log.isEnabledFor(logging.DEBUG) else None)
                else:
                    log.warning("%s: receive loop returned; restarting", account.key)
                now = self._clock()
                runtime.error(message, now)
                runtime.set_state("failed", now, message)
                if anyio.current_time() - started >= HEALTHY_AFTER_SECONDS:
                    backoff = RESTART_BACKOFF_INITIAL
                metrics.restarts.labels(account.channel_name, account.name).inc()
                runtime.record_restart(now, "crash")
                # A refused identity is not fixed by trying sooner (see receiving).
                delay = max(backoff, refused[1]) if refused else backoff
                log.info("%s: restarting the receive loop in %.0fs", account.key, delay)
                await self._sleep(delay)
                backoff = min(backoff * 2, RESTART_BACKOFF_MAX)
        finally:
            if runtime.state != "paused":
                runtime.set_state("stopped", self._clock())

    async def restart(self, reason: str, *, timeout: float = STOP_TIMEOUT_SECONDS) -> bool:
        """Stop the running loop so the supervisor starts a fresh one.

        Returns True once the old loop has ended (the new one starts right after).
        Returns False, without starting anything, when no loop is running, a restart
        is already under way, or the old loop did not stop within ``timeout``
        seconds; in the last case the new loop starts whenever the old one ends.
        """
        scope, ended = self._scope, self._ended
        if scope is None or ended is None or self._restart_reason is not None:
            return False
        account, runtime = self.account, self.account.runtime
        now = self._clock()
        self._restart_reason = reason
        runtime.record_restart(now, reason)
        self._metrics.restarts.labels(account.channel_name, account.name).inc()
        scope.cancel()
        with anyio.move_on_after(timeout):
            await ended.wait()
            return True
        message = (f"restart ({reason}): the receive loop did not stop within {timeout:g} s; "
                   "no new loop starts until it does")
        log.error("%s: %s", account.key, message)
        runtime.error(message, self._clock())
        return False


def _refused(channel: Channel, error: Exception | None) -> tuple[str, float] | None:
    """For a loop that ended on a refused identity (a channel's own loop, outside the
    kit's, let it out): the words with what to do, and how long to wait at least."""
    if error is None:
        return None
    try:
        trouble = channel.receive_trouble(error)
    except Exception:  # noqa: BLE001 - classifying must not stop the supervisor
        return None
    if not trouble.refused:
        return None
    return receiving.refusal_words(channel, trouble), receiving.refused_delay(trouble, 1)


def _describe(error: Exception | None) -> str:
    if error is None:
        return "the receive loop returned"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


class Supervisors:
    """This process's receive-loop supervisors, by account key: one per account whose
    loop runs here. The kernel makes it with what every loop is given; the gateway's
    receive loops (or the cluster's) add and discard supervisors as loops start and
    end, the health monitor restarts through it, the kernel pauses and resumes."""

    def __init__(self, *, receiver: "Receiver", metrics: "Metrics") -> None:
        self._receiver = receiver
        self._metrics = metrics
        self._by_key: dict[str, Supervisor] = {}

    def add(self, account: Account, *,
            sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
            clock: Callable[[], float] = time.time) -> Supervisor:
        """A new supervisor for the account's loop (not started: run it), registered
        under the account's key in place of any before it."""
        supervisor = self._by_key[account.key] = Supervisor(
            account, receiver=self._receiver, metrics=self._metrics, sleep=sleep,
            clock=clock)
        return supervisor

    def get(self, key: str) -> Supervisor | None:
        """The supervisor of the account ``channel:account`` (None: no loop runs here)."""
        return self._by_key.get(key)

    def discard(self, key: str, supervisor: Supervisor | None = None) -> None:
        """Forget the account's supervisor (only if it is still ``supervisor``, when
        given: a newer loop's stays)."""
        if supervisor is None or self._by_key.get(key) is supervisor:
            self._by_key.pop(key, None)


async def supervise(supervisors: Supervisors, account: Account, *,
                    sleep: Callable[[float], Awaitable[None]] = anyio.sleep) -> None:
    """Run an account's receive loop forever, restarting it with backoff when it fails."""
    await supervisors.add(account, sleep=sleep).run()
