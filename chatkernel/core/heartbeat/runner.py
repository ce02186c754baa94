"""One heartbeat turn: the agent's turn in the destination session, then what
becomes of its answer.

The turn goes through the agent like any turn, outside the session queue, at most
:data:`MAX_RUNNING` at once. Its reply is judged by the reply contract
(``HEARTBEAT_OK``, :mod:`chatkernel.core.heartbeat.ack`) and the visibility settings,
and sent through the same :class:`~chatkernel.core.outbound.responder.Responder` and
outbox as any reply, or noted in the session log with why it was not sent.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio

from chatkernel.core.config import HeartbeatConfig
from chatkernel.core.heartbeat.ack import HEARTBEAT_TOKEN, judge_heartbeat_reply
from chatkernel.core.heartbeat.checklist import TaskPrompt
from chatkernel.core.heartbeat.hours import when, zone_for
from chatkernel.core.heartbeat.targets import Destination
from chatkernel.core.health.metrics import Metrics
from chatkernel.core.store.base import Store
from chatkernel.core.turns.agents import AgentEvent, TurnRequest
from chatkernel.core.turns.indicators import Indicators

if TYPE_CHECKING:
    from chatkernel.core.outbound.responder import Responder
    from chatkernel.core.turns.roster import Roster

log = logging.getLogger("chatkernel.heartbeat")

#: How many heartbeat turns may run at once (background work: a small share).
MAX_RUNNING = 2


async def collect_turn(agents: "Roster", name: str, request: TurnRequest,
                       what: str) -> tuple[list[str], list[str]]:
    """Run agent ``name``'s turn on ``request`` outside the session queue (a heartbeat's,
    a scheduled job's): its final texts and its errors (an agent that failed is one,
    logged as ``what``'s)."""
    texts: list[str] = []
    errors: list[str] = []
    agent = agents.get(name)
    try:
        if agent is None:
            raise LookupError(f"the config has no agent {name!r}")
        async with agents.using(agent), contextlib.aclosing(agent.turn(request)) as events:
            async for event in events:
                if event.kind == "text" and event.final and event.text.strip():
                    texts.append(event.text)
                elif event.kind == "error":
                    errors.append(event.text)
    except Exception as exc:
        log.exception("%s: the agent failed", what)
        errors.append(f"the agent failed: {exc}")
    return texts, errors


class HeartbeatRunner:
    """Runs heartbeat turns for one kernel and handles their answers."""

    def __init__(self, *, store: Store, agents: "Roster", indicators: Indicators,
                 session_busy: Callable[[str], bool], responder: Callable[..., "Responder"],
                 metrics: Metrics) -> None:
        """``store``: the session log a turn writes; ``agents``: the running agents (a
        turn runs on its destination's, :attr:`Destination.agent`);
        ``indicators``: the typing indicator meanwhile; ``session_busy(key)``: whether a
        user turn runs or waits in the session (its indicator stays); ``responder(account,
        session_key, session_id, route, journal_seqs, heartbeat=True)``: the
        :class:`~chatkernel.core.outbound.responder.Responder` an answer goes out
        through; ``metrics``: where a skipped send is counted."""
        self._store = store
        self._agents = agents
        self._indicators = indicators
        self._session_busy = session_busy
        self._responder = responder
        self._metrics = metrics
        self._slots = anyio.CapacityLimiter(MAX_RUNNING)

    async def turn(self, heartbeat: str, scope: anyio.CancelScope, destination: Destination,
                   settings: HeartbeatConfig, prompt: TaskPrompt, fired_at: float, *,
                   typing: bool) -> tuple[list[str], list[str]]:
        """Run the agent's turn within ``scope`` (cancelled when a user message arrives
        or the heartbeat is cleared): its final texts and its errors. ``typing``: show
        the typing indicator in the destination's chat meanwhile."""
        key = destination.session_key
        texts: list[str] = []
        errors: list[str] = []
        try:
            if typing:
                self._indicators.begin(destination.account, key)
            with scope:
                async with self._slots:
                    seq = await self._store.append_log(key, destination.session_id,
                                                       "heartbeat", prompt.text,
                                                       {"heartbeat": heartbeat})
                    request = TurnRequest(
                        session_key=key, session_id=destination.session_id, text=prompt.text,
                        envelope=self.envelope(fired_at, settings, destination),
                        heartbeat=True, log_seq=seq,
                        meta={"heartbeat": heartbeat, "tasks": list(prompt.tasks)})
                    texts, errors = await collect_turn(self._agents, destination.agent,
                                                       request, f"heartbeat {heartbeat}")
        finally:
            if typing and not self._session_busy(key):  # a user turn's indicator stays
                self._indicators.end(key)
        return texts, errors

    async def answer(self, heartbeat: str, destination: Destination,
                     settings: HeartbeatConfig, visibility: dict[str, bool],
                     texts: list[str], errors: list[str]) -> tuple[str, bool]:
        """What a completed turn's answer becomes: ``(outcome, sent)``, the outcome
        ``error``, ``alert`` or ``ok``. An error is noted in the session log; an answer
        is sent, or logged with why it was not (a skip reason is counted)."""
        store = self._store
        key = destination.session_key
        if errors:
            detail = "; ".join(errors)
            log.warning("heartbeat %s failed in %s: %s", heartbeat, key, detail)
            await store.append_log(key, destination.session_id, "notification",
                                   f"heartbeat failed: {detail}",
                                   {"kind": "heartbeat", "heartbeat": heartbeat})
            return "error", False
        judged = judge_heartbeat_reply("\n\n".join(texts), settings.ack_max_chars)
        if judged.kind == "alert":
            outcome, show, text = "alert", visibility["show_alerts"], judged.text
        else:
            outcome, show = "ok", visibility["show_ok"]
            text = judged.text or HEARTBEAT_TOKEN
        reason = self.not_sent_reason(outcome, show, settings, destination)
        if reason is None:
            await self.deliver(destination, text)
            return outcome, True
        if reason:
            log.info("heartbeat %s: %s not sent (%s%s)", heartbeat, outcome, reason,
                     f": {destination.problem}" if reason == "no-target" else "")
            self._metrics.heartbeat_skips.labels(reason).inc()
        await store.append_log(key, destination.session_id, "heartbeat", text,
                               {"heartbeat": heartbeat, "outcome": outcome,
                                "not_sent": reason or "acknowledged"})
        return outcome, False

    @staticmethod
    def not_sent_reason(outcome: str, show: bool, settings: HeartbeatConfig,
                        destination: Destination) -> str | None:
        """None: send it. ``""``: an acknowledgement nobody asked to see (the normal
        case, not a skip). Otherwise the skip reason."""
        if not show:
            return "alerts-hidden" if outcome == "alert" else ""
        if destination.account is None or destination.route is None:
            return "no-target"
        if settings.direct_policy == "block" and not destination.route.is_group:
            return "dm-blocked"
        return None

    async def deliver(self, destination: Destination, text: str) -> None:
        """Through the Responder and the outbox, like any reply."""
        assert destination.account is not None and destination.route is not None
        responder = self._responder(destination.account, destination.session_key,
                                    destination.session_id, destination.route, [],
                                    heartbeat=True, agent=destination.agent)
        await responder.handle(AgentEvent.reply(text))
        await responder.flush()

    @staticmethod
    def envelope(ts: float, settings: HeartbeatConfig, destination: Destination) -> str:
        zone = zone_for(settings.active_hours.timezone if settings.active_hours else "local",
                        destination.user_zone)
        return f"[heartbeat | {when(ts, zone)}]"
