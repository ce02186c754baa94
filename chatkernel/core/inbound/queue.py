"""Session lanes: one turn at a time per session, a global cap across sessions.

While a session is busy, new messages wait in its lane and are handled by
the lane's mode (docs/gateway.md, "Queue modes"):

``collect``   merged into ONE follow-up turn once the running turn ends;
``followup``  one follow-up turn each, in order;
``interrupt`` the running turn is aborted and the newest message runs;
``steer``     handed to the running turn if the agent can take it, else follow-up.

Follow-up turns wait for ``debounce_ms`` of quiet first. A lane holds at most
``cap`` waiting messages; on overflow ``drop`` decides: ``old`` drops the
oldest, ``new`` refuses the newcomer, ``summarize`` drops the oldest but keeps
a short bullet list of them for the follow-up turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from anyio.abc import TaskGroup

from chatkernel.core.durations import parse_duration_ms
from chatkernel.sdk.models import InboundMessage

log = logging.getLogger("chatkernel.queue")

QueueMode = Literal["collect", "followup", "interrupt", "steer"]
QUEUE_MODES: tuple[str, ...] = ("collect", "followup", "interrupt", "steer")
DROP_POLICIES: tuple[str, ...] = ("old", "new", "summarize")
#: Seconds a worker may run turns back to back (turns that never wait, like an
#: echo's) before it lets the other tasks in.
TURN_SLICE = 0.001


@dataclass(slots=True, frozen=True)
class QueueSettings:
    """A lane's effective settings (session override > channel > global)."""

    mode: str = "collect"
    debounce_ms: int = 1000
    cap: int = 20
    drop: str = "old"

    def merged(self, override: dict[str, Any] | None) -> "QueueSettings":
        if not override:
            return self
        values = {name: override.get(name, getattr(self, name))
                  for name in ("mode", "debounce_ms", "cap", "drop")}
        return QueueSettings(**values)


def parse_queue_args(args: str) -> dict[str, Any]:
    """Parse ``/queue`` arguments: ``<mode> [debounce:2s] [cap:25] [drop:summarize]``.

    Raises ValueError naming the first thing that is wrong.
    """
    settings: dict[str, Any] = {}
    for token in args.split():
        name, sep, value = token.partition(":")
        name = name.lower()
        if not sep:
            if name not in QUEUE_MODES:
                raise ValueError(f"unknown mode {token!r} (modes: {', '.join(QUEUE_MODES)})")
            settings["mode"] = name
        elif name == "debounce":
            settings["debounce_ms"] = parse_duration_ms(value)
        elif name == "cap":
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"cap must be a whole number of at least 1, not {value!r}")
            settings["cap"] = int(value)
        elif name == "drop":
            if value not in DROP_POLICIES:
                raise ValueError(f"drop must be one of {', '.join(DROP_POLICIES)}, not {value!r}")
            settings["drop"] = value
        else:
            raise ValueError(f"unknown setting {name!r} (debounce, cap, drop)")
    return settings


@dataclass(slots=True)
class QueuedMessage:
    """A message waiting in a lane, with its journal seq, and the span of its trace it
    is at (core/telemetry.py; None: tracing off)."""

    message: InboundMessage
    seq: int | None
    trace: Any = None


@dataclass(slots=True)
class Batch:
    """What one turn handles: one message, or several merged (collect)."""

    items: list[QueuedMessage]
    dropped_summary: list[str] = field(default_factory=list)

    @property
    def last(self) -> InboundMessage:
        return self.items[-1].message


#: runner(session_key, batch): runs one turn. Cancelled when interrupted.
TurnRunner = Callable[[str, Batch], Awaitable[None]]
#: called with the messages a lane refused or dropped, and why.
DropHandler = Callable[[str, list[QueuedMessage], str], Awaitable[None]]
#: steer(session_key, item) -> True when the running turn took the message (and with it
#: the finishing of its journal entry).
Steerer = Callable[[str, QueuedMessage], Awaitable[bool]]
#: told a session key when its lane becomes busy, or idle again (no await: it runs inline).
LaneObserver = Callable[[str], None]


class Lane:
    """The queue of one session."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.pending: list[QueuedMessage] = []
        self.dropped_summary: list[str] = []
        self.active = False  # scheduled, running or waiting out a debounce
        self.running = False  # a turn is running right now
        self.busy_hint_sent = False
        self.last_enqueue = 0.0
        self.turns = 0  # turns run in the current busy period
        self._scope: anyio.CancelScope | None = None

    @property
    def busy(self) -> bool:
        return self.active


class SessionQueue:
    """All lanes, and the workers that run their turns.

    ``max_concurrent`` long-lived workers take ready lanes from one queue and
    run one turn each, so the global cap costs nothing per message (no task
    spawn, no limiter) and lanes are served in the order they became ready.
    Call :meth:`start` once, inside the task group the workers live in.
    :attr:`lanes` holds the busy sessions' lanes only.
    """

    def __init__(self, task_group: TaskGroup, runner: TurnRunner,
                 settings: Callable[[str], QueueSettings], *, max_concurrent: int = 4,
                 on_drop: DropHandler | None = None, steer: Steerer | None = None,
                 on_busy: LaneObserver | None = None, on_idle: LaneObserver | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep_until: Callable[[float], Awaitable[None]] | None = None) -> None:
        self._tg = task_group
        # The heartbeat scheduler listens: a user message preempts a heartbeat turn in
        # its session, and a heartbeat that waited for the lane fires when it is idle.
        self._on_busy = on_busy
        self._on_idle = on_idle
        self._runner = runner
        self._settings = settings
        self._on_drop = on_drop
        self._steer = steer
        self._clock = clock
        # Returns once ``clock`` reads the deadline given (a test's manual clock's);
        # None: the deadline is that many seconds of real time away.
        self._sleep_until = sleep_until
        self.max_concurrent = max_concurrent
        self.lanes: dict[str, Lane] = {}
        # Lanes ready for a turn, in the order they became ready, and the workers
        # waiting for one (a deque and a future per idle worker: cheaper per turn
        # than a memory stream).
        self._ready: deque[Lane] = deque()
        self._idle_workers: deque[asyncio.Future[None]] = deque()
        self._closed = False
        for number in range(max_concurrent):
            task_group.start_soon(self._worker, name=f"queue worker {number + 1}")

    def close(self) -> None:
        """Take no more turns (the workers end with the task group)."""
        self._closed = True
        self._ready.clear()

    def lane(self, key: str) -> Lane:
        """The session's lane. Only busy sessions have one kept here (a lane is dropped
        when it goes idle: a lane per session ever seen would grow with traffic); an
        idle session's is a fresh, empty one."""
        return self.lanes.get(key) or Lane(key)

    def is_busy(self, key: str) -> bool:
        lane = self.lanes.get(key)
        return lane is not None and lane.active

    def running(self) -> int:
        """Turns running right now."""
        return sum(1 for lane in self.lanes.values() if lane.running)

    def depth(self) -> int:
        """Messages waiting in all lanes (computed on demand: for metrics scrapes)."""
        return sum(len(lane.pending) for lane in self.lanes.values())

    async def enqueue(self, key: str, item: QueuedMessage) -> str:
        """Queue a message for its session; returns what happened:

        ``started`` (the lane was idle), ``queued``, ``steered``, ``interrupted``,
        ``refused`` (cap reached with drop=new).
        """
        lane = self.lanes.get(key)
        if lane is None:
            lane = self.lanes[key] = Lane(key)
        lane.last_enqueue = self._clock()
        if not lane.active:
            lane.pending.append(item)
            lane.active = True
            lane.turns = 0
            self._make_ready(lane)
            if self._on_busy is not None:
                self._on_busy(key)
            return "started"
        settings = self._settings(key)
        if settings.mode == "steer" and lane.running and self._steer is not None:
            if await self._steer(key, item):
                return "steered"
        if settings.mode == "interrupt":
            superseded, lane.pending = lane.pending, [item]
            if superseded and self._on_drop is not None:
                await self._on_drop(key, superseded, "superseded by a newer message")
            if lane._scope is not None:
                lane._scope.cancel()
            return "interrupted"
        if len(lane.pending) >= settings.cap:
            if settings.drop == "new":
                if self._on_drop is not None:
                    await self._on_drop(key, [item], "queue full")
                return "refused"
            overflow = lane.pending[: len(lane.pending) - settings.cap + 1]
            del lane.pending[: len(overflow)]
            if settings.drop == "summarize":
                lane.dropped_summary.extend(_summary_line(q.message) for q in overflow)
            if self._on_drop is not None:
                await self._on_drop(key, overflow, "queue full")
        lane.pending.append(item)
        return "queued"

    async def _worker(self) -> None:
        # One cancel scope serves a worker's turns until an interrupt cancels it:
        # entering and leaving one per turn cost ~9 us a turn. It is the running
        # backend's CancelScope class, looked up once, and the waits are asyncio's
        # own (docs/ARCHITECTURE.md, "Hot-path primitives").
        cancel_scope = type(anyio.CancelScope())
        running: list[Lane] = []  # the lane whose turn runs, if any
        while True:
            closed = False
            with cancel_scope() as scope:
                closed = await self._serve(scope, running)
            if running:  # its turn was interrupted: the scope caught the cancellation
                lane = running.pop()
                log.info("turn interrupted in session %s", lane.key)
                self._after_turn(lane)
            if closed:
                return

    async def _serve(self, scope: anyio.CancelScope, running: list[Lane]) -> bool:
        """Run turns inside ``scope`` until the queue closes (True) or an interrupt
        cancelled ``scope`` (False: the worker goes on in a fresh one)."""
        loop = asyncio.get_running_loop()
        slice_ends = loop.time() + TURN_SLICE
        while True:
            if not self._ready:
                waiter = loop.create_future()
                self._idle_workers.append(waiter)
                try:
                    await waiter
                except BaseException:  # cancelled: the kernel is stopping
                    if waiter.cancelled():  # not woken: out of the line, if still in it
                        with contextlib.suppress(ValueError):
                            self._idle_workers.remove(waiter)
                    elif self._ready:  # woken, then cancelled: pass the wake-up on
                        self._wake_one()
                    raise
                slice_ends = loop.time() + TURN_SLICE
                continue
            if self._closed:
                return True
            lane = self._ready.popleft()
            if not lane.pending:  # an interrupt can empty a lane while it waits
                self._finish(lane)
                continue
            batch = self._take(lane, self._settings(lane.key))
            lane.turns += 1
            running.append(lane)
            lane._scope = scope
            lane.running = True
            try:
                await self._runner(lane.key, batch)
            except Exception:
                log.exception("turn failed in session %s", lane.key)
            finally:
                lane.running = False
                lane._scope = None
            running.pop()
            self._after_turn(lane)
            if scope.cancel_called:
                # Interrupted after the turn's last wait: leave the cancelled scope
                # now, rather than let its cancellation land in the next wait.
                return False
            if self._ready and loop.time() >= slice_ends:
                # More work at once, and this worker had its slice: let the other
                # tasks (receive loops, senders) in first; a turn may not have
                # waited for anything. (A yield after every turn cost a task
                # switch per message.)
                await asyncio.sleep(0)
                slice_ends = loop.time() + TURN_SLICE

    def _make_ready(self, lane: Lane) -> None:
        if self._closed:
            return
        self._ready.append(lane)
        self._wake_one()

    def _wake_one(self) -> None:
        while self._idle_workers:
            waiter = self._idle_workers.popleft()
            if not waiter.done():  # done: cancelled, its worker is stopping
                waiter.set_result(None)
                return

    def _after_turn(self, lane: Lane) -> None:
        if not lane.pending:
            self._finish(lane)
            return
        settings = self._settings(lane.key)  # /queue may have changed it
        quiet = settings.debounce_ms / 1000
        if quiet and settings.mode != "interrupt":
            self._tg.start_soon(self._debounce, lane, quiet, name=f"debounce {lane.key}")
        else:
            self._make_ready(lane)

    async def _debounce(self, lane: Lane, quiet: float) -> None:
        """Wait for ``quiet`` seconds without a new message, then make the lane ready."""
        while True:
            quiet_from = lane.last_enqueue + quiet
            remaining = quiet_from - self._clock()
            if remaining <= 0:
                break
            if self._sleep_until is None:
                await anyio.sleep(remaining)
            else:
                await self._sleep_until(quiet_from)
        self._make_ready(lane)

    def _finish(self, lane: Lane) -> None:
        lane.active = False
        lane.busy_hint_sent = False
        if self.lanes.get(lane.key) is lane:
            del self.lanes[lane.key]  # idle: nothing of it is needed until its next message
        if self._on_idle is not None:
            self._on_idle(lane.key)

    @staticmethod
    def _take(lane: Lane, settings: QueueSettings) -> Batch:
        if settings.mode == "collect":
            items, lane.pending = lane.pending, []
        else:
            items = [lane.pending.pop(0)]
        summary, lane.dropped_summary = lane.dropped_summary, []
        return Batch(items, summary)


def _summary_line(message: InboundMessage) -> str:
    text = " ".join(message.text.split())
    if len(text) > 80:
        text = text[:79] + "…"
    who = message.sender_name or message.sender_id
    return f"{who}: {text}" if text else f"{who}: (media)"
