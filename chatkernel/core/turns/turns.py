"""Turn execution: one agent turn for a session, from its batch to its replies.

:class:`Turns` is what the session queue (:mod:`chatkernel.core.inbound.queue`) calls:
:meth:`Turns.run` runs a lane's batch as one turn, :meth:`Turns.dropped` is
told of the messages a lane dropped or refused, and :meth:`Turns.steer` hands
a message to the session's running turn. The kernel builds it once the store,
the sessions and the agents exist, and gives it only what a turn uses. A turn runs on
its session's agent (:attr:`SessionRecord.agent`), and keeps that agent to its end
even when a reload replaces it (:class:`~chatkernel.core.turns.roster.Roster`).

A turn's messages are logged with its first reply, in the transaction that
finishes their journal entries (the :class:`~chatkernel.core.outbound.responder.Responder`
does that), or, when the turn ends without a reply, as it ends: a turn
replayed after a crash logs nothing twice, and while it runs the session log
is exactly the history before it, which is what the agent reads.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import anyio

from chatkernel.core.turns.agents import Agent, AgentEvent, TurnRequest
from chatkernel.core.turns.roster import Roster
from chatkernel.core.inbound.pipeline import envelope, text_with_media_notes
from chatkernel.core.turns.indicators import Indicators
from chatkernel.core.health.metrics import Metrics
from chatkernel.sdk.models import Account, InboundMessage, Route
from chatkernel.core.outbound.order import OutputOrder
from chatkernel.core.outbound.responder import Responder
from chatkernel.core.inbound.queue import Batch, QueuedMessage
from chatkernel.core.inbound.sessions import Sessions
from chatkernel.core.store.base import LogRow, SessionRecord, Store
from chatkernel.core.store.shared import LeaseLost
from chatkernel.core.telemetry import OFF, Span, Tracer

if TYPE_CHECKING:
    from chatkernel.core.outbound.live import TurnPreview
    from chatkernel.sdk.models import Route

#: The kernel's logger: turn failures and drops are logged under the name they always had.
log = logging.getLogger("chatkernel.kernel")

#: responder(account, session_key, session_id, route, journal_seqs, user_log=..., agent=...):
#: the Responder that queues one turn's replies (``agent``: the session's agent's name).
ResponderFactory = Callable[..., Responder]
#: live(account, session_key, route, journal_seqs): a turn's live preview, or None where
#: its route shows none (:meth:`chatkernel.core.outbound.live.Live.preview`).
LivePreviews = Callable[[Account, str, "Route", list[int]], "TurnPreview | None"]


class Turns:
    """Runs the turns of every session of one kernel.

    ``agents``: the running agents by name; ``account_for(channel, account)`` finds a
    session's account (raising when it is not running); ``responder`` makes the
    :class:`Responder` of one turn; ``live`` the turn's live preview, where its route
    shows one.
    """

    def __init__(self, *, store: Store, sessions: Sessions, agents: Roster,
                 account_for: Callable[[str, str], Account], responder: ResponderFactory,
                 indicators: Indicators, metrics: Metrics, order: OutputOrder,
                 live: LivePreviews | None = None, tracer: Tracer = OFF) -> None:
        self._store = store
        self._sessions = sessions
        self._agents = agents
        self._account_for = account_for
        self._responder = responder
        self._indicators = indicators
        self._metrics = metrics
        self._order = order
        self._live = live
        self._tracer = tracer
        self._tracing = tracer.on
        #: The responder and agent of each session's running turn (steered messages
        #: join it).
        self._running: dict[str, tuple[Responder, Agent]] = {}
        # The kernel is stopping: a turn cancelled now leaves its messages unfinished.
        self._stopping = False

    def stop(self) -> None:
        """The kernel stops (its drain is over): the turns cancelled from now on leave
        the messages no reply carried unfinished in the journal, replayed on the next
        start, rather than finish them unanswered. (A turn an interrupt cancels still
        finishes its messages: the newer message answers in their place.)"""
        self._stopping = True

    def running(self, key: str) -> bool:
        """Whether a turn of the session runs now."""
        return key in self._running

    async def run(self, key: str, batch: Batch) -> None:
        """One agent turn for a session, then the command answers that waited for it
        (see chatkernel.core.outbound.order)."""
        try:
            if self._tracing:
                await self._traced_turn(key, batch)
            else:
                await self._turn(key, batch)
        finally:
            if self._order.close(key, [item.seq for item in batch.items]):
                with anyio.CancelScope(shield=True):  # an interrupted turn is over too
                    await self._order.release(key)

    async def _traced_turn(self, key: str, batch: Batch) -> None:
        """:meth:`_turn` in its span: in the trace of its first message, linked to the
        others' (a collected turn answers several), current while it runs so that its
        replies' sends are its children."""
        traces = [item.trace for item in batch.items if item.trace is not None]
        tracer = self._tracer
        span = tracer.start("turn", parent=traces[0] if traces else None, root=not traces,
                            links=traces[1:], attributes={
                                "chatkernel.session.key": key,
                                "chatkernel.turn.messages": len(batch.items)})
        try:
            with tracer.use(span):
                await self._turn(key, batch)
        except anyio.get_cancelled_exc_class():
            span.set("chatkernel.outcome", "interrupted")
            raise
        except BaseException as exc:
            span.fail(exc)
            raise
        finally:
            span.end()

    async def _turn(self, key: str, batch: Batch) -> None:
        """Ask the agent, queue its replies, log the turn."""
        sessions = self._sessions
        record = await sessions.get(key)
        if record is None:
            raise RuntimeError(f"session {key} vanished")
        account = self._account_for(record.channel, record.account)
        # Logged with the turn's first reply, or as it ends (see the module's docstring).
        user_log = [user_log_row(item.message) for item in batch.items]
        request = TurnRequest(
            session_key=key, session_id=record.session_id,
            text=merge_batch(batch, [text for _, text, _ in user_log]),
            envelope=envelope(batch.last),
            media=[media for item in batch.items for media in item.message.media])
        route = await sessions.route(key)
        if route is None:
            raise RuntimeError(f"session {key} has no reply route")
        seqs = [item.seq for item in batch.items if item.seq is not None]
        agent = self._agents.get(record.agent)
        if agent is None:  # a reload removed the agent while these waited
            self._metrics.dropped.labels("agent removed").inc(len(user_log))
            log.warning("session %s: %d message(s) not answered: the config has no agent "
                        "%r any more", key, len(user_log), record.agent)
            await self._finish(key, record.session_id, user_log, seqs)
            return
        self._agents.hold(agent)  # this turn keeps it across a reload
        try:
            await self._run_agent(key, agent, record, account, request, route, seqs,
                                  user_log)
        finally:
            await self._agents.release(agent)

    async def _run_agent(self, key: str, agent: Agent, record: SessionRecord,
                         account: Account, request: TurnRequest, route: Route,
                         seqs: list[int], user_log: list[LogRow]) -> None:
        """The turn on ``agent``: its events through a Responder, its books closed."""
        preview = self._live(account, key, route, seqs) if self._live is not None else None
        responder = self._responder(account, key, record.session_id, route, seqs,
                                    user_log=user_log, agent=record.agent, live=preview)
        self._running[key] = (responder, agent)
        indicators = self._indicators
        indicators.begin(account, key)
        started = time.monotonic()
        outcome = "ok"
        lost = False
        try:
            # The preview's updates run beside the agent, and end with the turn.
            async with preview if preview is not None else contextlib.nullcontext():
                events = agent.turn(request)
                if self._tracing:
                    events = self._traced_agent(agent, request, events)
                try:
                    async for event in events:
                        await responder.handle(event)
                finally:  # what contextlib.aclosing does, without its two coroutines
                    await events.aclose()
                await responder.flush()
        except anyio.get_cancelled_exc_class():
            outcome = "interrupted"
            lost = self._stopping  # left for the next start, which replays them
            raise
        except LeaseLost:
            # Another instance owns the account now and runs these messages again: their
            # journal entries stay unfinished, nothing of this turn is kept.
            outcome = "interrupted"
            lost = True
            log.warning("turn in %s left to the account's new owner", key)
        except Exception as exc:
            outcome = "error"
            log.exception("agent turn failed in %s", key)
            await responder.flush()
            await responder.handle(AgentEvent.error(f"the agent failed: {exc}"))
        finally:
            del self._running[key]
            indicators.end(key)
            metrics = self._metrics
            metrics.count(metrics.turns, outcome)
            metrics.turn_seconds.observe(time.monotonic() - started)
            # A turn with no reply (or none since these joined it) finishes them here.
            unlogged, unfinished = responder.unlogged(), responder.unfinished_journal()
            if (unlogged or unfinished) and not lost:
                await self._finish(key, record.session_id, unlogged, unfinished)

    async def _traced_agent(self, agent: Agent, request: TurnRequest,
                            events: AsyncIterator[AgentEvent]) -> AsyncIterator[AgentEvent]:
        """The agent's events, its call a span of the turn (gen_ai's conventions): the
        model and the tokens where the agent reports them (``AgentEvent.usage``)."""
        tracer = self._tracer
        model = getattr(agent.config, "model", "") or ""
        operation = "chat" if model else "invoke_agent"
        attributes = {"gen_ai.operation.name": operation, "gen_ai.system": agent.name,
                      "gen_ai.agent.name": agent.name}
        if model:
            attributes["gen_ai.request.model"] = model
        if tracer.capture_content:
            attributes["chatkernel.agent.input"] = request.prompt
        span = tracer.start(f"{operation} {model or agent.name}", kind="client",
                            attributes=attributes)
        tokens = {"input_tokens": 0, "output_tokens": 0}
        answer: list[str] = []
        try:
            async for event in events:
                if event.kind == "usage" and event.meta:
                    _add_usage(span, tokens, event.meta)
                elif event.kind == "text" and event.final and tracer.capture_content:
                    answer.append(event.text)
                elif event.kind == "error":
                    span.set("error.type", "agent_error")
                yield event
        except BaseException as exc:
            if not isinstance(exc, (GeneratorExit, anyio.get_cancelled_exc_class())):
                span.fail(exc)
            raise
        finally:
            if answer:
                span.set("chatkernel.agent.output", "\n\n".join(answer))
            span.end()
            await events.aclose()  # type: ignore[attr-defined]

    async def _finish(self, key: str, session_id: str, log_rows: list[LogRow],
                      journal_seqs: list[int]) -> None:
        """Log messages no reply carried and finish their journal entries (shielded:
        a cancelled turn still closes its books)."""
        if not log_rows and not journal_seqs:
            return
        with anyio.CancelScope(shield=True):
            if log_rows:
                await self._store.append_logs(key, session_id, log_rows)
            for seq in journal_seqs:
                await self._store.set_journal_status(seq, "done")

    async def dropped(self, key: str, items: list[QueuedMessage], reason: str) -> None:
        """Messages a lane dropped or refused: counted, logged, their entries finished."""
        self._metrics.dropped.labels(reason).inc(len(items))
        for item in items:
            log.info("session %s: message %s dropped (%s)", key, item.message.message_id,
                     reason)
            if item.seq is not None:
                await self._store.set_journal_status(item.seq, "done")
        await self._order.closed(key, [item.seq for item in items])  # no answer to wait for

    async def steer(self, key: str, item: QueuedMessage) -> bool:
        """Hand a message to the session's running turn; False when the agent cannot
        take it (the queue then runs it as a follow-up)."""
        running = self._running.get(key)
        if running is None or not running[1].supports_steer:
            return False
        if not await running[1].steer(key, text_with_media_notes(item.message)):
            return False
        running = self._running.get(key)
        if running is not None:
            responder = running[0]
            # Part of the turn now: logged and finished with its next reply, or its end.
            responder.join(user_log_row(item.message), item.seq)
        else:  # the turn ended while the agent took it: it is over for this message too
            record = self._sessions.cached(key)
            await self._finish(key, record.session_id if record else "",
                               [user_log_row(item.message)] if record else [],
                               [item.seq] if item.seq is not None else [])
        return True


def _add_usage(span: Span, tokens: dict[str, int], usage: dict) -> None:
    """A usage report on the agent's span: tokens add up over the turn's model calls."""
    if usage.get("model"):
        span.set("gen_ai.response.model", str(usage["model"]))
    for name in ("input_tokens", "output_tokens"):
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            tokens[name] += value
            span.set(f"gen_ai.usage.{name}", tokens[name])


def user_log_row(message: InboundMessage) -> LogRow:
    """A message's session-log entry: the clean text, who sent it, its platform id."""
    return ("user", text_with_media_notes(message),
            {"sender_id": message.sender_id, "message_id": message.message_id})


def merge_batch(batch: Batch, texts: list[str] | None = None) -> str:
    """The text of a turn: one message as is; several (collect) one after another.

    ``texts``: the messages' texts with their media notes, if the caller has them.
    """
    if texts is None:
        texts = [text_with_media_notes(item.message) for item in batch.items]
    if len(texts) == 1 and not batch.dropped_summary:
        return texts[0]
    body = "\n\n".join(text for text in texts if text)
    if batch.dropped_summary:
        bullets = "\n".join(f"• {line}" for line in batch.dropped_summary)
        body = (f"[{len(batch.dropped_summary)} earlier message(s) were dropped while the "
                f"queue was full:\n{bullets}]\n\n{body}")
    return body
