"""One run of a job or a trigger: the agent's turn, then its answer to each target.

The turn runs in the job's own session (``job:<name>``, ``trigger:<name>``: its
transcript is kept there) or, with ``session = "target"``, in the session of the first
target's chat, so the agent sees that conversation. An answer that is empty or says
there is nothing to report goes nowhere: the heartbeats' reply contract
(:mod:`chatkernel.core.heartbeat.ack`), ``HEARTBEAT_OK`` at the start or the end with at
most :data:`ACK_MAX_CHARS` characters besides. Any other answer goes to every target
through a :class:`~chatkernel.core.outbound.responder.Responder` and the outbox, as any
reply does: its retries, rate limits and order. That is the run's one delivery path: the
agent's events are collected here and sent once per target, never also by a turn of the
target's session.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chatkernel.core.config.jobs import parse_target
from chatkernel.core.heartbeat.ack import judge_heartbeat_reply
from chatkernel.core.heartbeat.runner import collect_turn
from chatkernel.core.store.base import Store
from chatkernel.core.turns.agents import AgentEvent, TurnRequest
from chatkernel.sdk.models import Account, Route, Session

if TYPE_CHECKING:
    from chatkernel.core.inbound.sessions import Sessions
    from chatkernel.core.outbound.responder import Responder
    from chatkernel.core.turns.roster import Roster

log = logging.getLogger("chatkernel.jobs")

#: What besides ``HEARTBEAT_OK`` still counts as "nothing to report" (as heartbeats').
ACK_MAX_CHARS = 300

#: resolve_target(channel, account, chat): a proactive send's (account, route, session key).
ResolveTarget = Callable[[str, "str | None", str], Awaitable[tuple[Account, Route, str]]]


@dataclass(slots=True)
class Target:
    """A ``deliver_to`` entry resolved: the account to send from, the route, the chat's
    session key."""

    text: str
    account: Account
    route: Route
    session_key: str


@dataclass(slots=True)
class Outcome:
    """What became of a run: its status (``done`` or ``failed``) and a line saying how."""

    status: str
    detail: str
    sent_to: list[str]


class JobRunner:
    """Runs the turns of jobs and triggers for one kernel and sends their answers."""

    def __init__(self, *, store: Callable[[], Store], agents: Callable[[], "Roster"],
                 sessions: Callable[[], "Sessions"], resolve_target: ResolveTarget,
                 responder: Callable[..., "Responder"]) -> None:
        """``store()``: the session logs; ``agents()``: the running agents;
        ``sessions()``: the session records; ``resolve_target(channel, account, chat)``:
        a target's account, route and session key (LookupError says what is missing);
        ``responder(account, session_key, session_id, route, journal_seqs, agent=)``:
        the Responder an answer goes out through."""
        self._store = store
        self._agents = agents
        self._sessions = sessions
        self._resolve_target = resolve_target
        self._responder = responder

    async def targets(self, deliver_to: list[str], agent: str | None
                      ) -> tuple[list[Target], list[str]]:
        """The targets that can be reached now, and why the others cannot."""
        found: list[Target] = []
        problems: list[str] = []
        for text in deliver_to:
            channel, account, chat = parse_target(text)
            try:
                resolved, route, key = await self._resolve_target(channel, account, chat)
            except LookupError as exc:
                problems.append(f"{text}: {exc}")
                continue
            if agent is not None:  # the chat's session with this job's agent
                key = Session.make_key(route.channel, route.account, route.chat_id,
                                       route.thread_id, agent)
            found.append(Target(text, resolved, route, key))
        return found, problems

    async def run(self, name: str, kind: str, settings: Any, prompt: str,
                  envelope: str) -> Outcome:
        """Run ``settings``' agent on ``prompt`` (``kind``: ``job`` or ``trigger``) and send
        its answer to ``settings.deliver_to``."""
        targets, problems = await self.targets(list(settings.deliver_to), settings.agent)
        session = getattr(settings, "session", "isolated")
        if session == "target" and targets:
            key = targets[0].session_key
            record = await self._sessions().get(key)
            session_id = record.session_id if record is not None else kind
            agent = settings.agent or (record.agent if record is not None else None) \
                or _agent_of(key)
        else:
            key, session_id, agent = f"{kind}:{name}", kind, settings.agent or "default"
        store = self._store()
        seq = await store.append_log(key, session_id, kind, prompt, {kind: name})
        request = TurnRequest(session_key=key, session_id=session_id, text=prompt,
                              envelope=envelope, log_seq=seq, meta={kind: name})
        texts, errors = await collect_turn(self._agents(), agent, request, f"{kind} {name}")
        if errors:
            detail = "; ".join(errors)
            await store.append_log(key, session_id, "notification", f"{kind} failed: {detail}",
                                   {kind: name})
            return Outcome("failed", detail, [])
        judged = judge_heartbeat_reply("\n\n".join(texts), ACK_MAX_CHARS)
        if judged.kind != "alert":
            await store.append_log(key, session_id, kind, judged.text or "(no answer)",
                                   {kind: name, "not_sent": "nothing to report"})
            return Outcome("done", "nothing to report", [])
        if not settings.deliver_to:
            await store.append_log(key, session_id, "assistant", judged.text, {kind: name})
            return Outcome("done", f"answered in {key} (no deliver_to)", [])
        sent: list[str] = []
        for target in targets:
            try:
                await self.deliver(target, judged.text, agent=agent)
            except Exception as exc:  # the store, a lost lease: this target's failure
                log.warning("%s %s: its answer to %s could not be queued: %s", kind, name,
                            target.text, exc)
                problems.append(f"{target.text}: {exc}")
                continue
            sent.append(target.text)
        detail = f"sent to {', '.join(sent)}" if sent else "sent nowhere"
        if problems:
            detail += f"; not to {'; '.join(problems)}"
        return Outcome("done" if sent else "failed", detail, sent)

    async def deliver(self, target: Target, text: str, *, agent: str) -> None:
        """Queue ``text`` to one target through the outbox, in the chat's session."""
        record = await self._sessions().get(target.session_key)
        session_id = record.session_id if record is not None else "job"
        responder = self._responder(target.account, target.session_key, session_id,
                                    target.route, [], agent=agent)
        await responder.handle(AgentEvent.reply(text))
        await responder.flush()


def _agent_of(session_key: str) -> str:
    """The agent a session key names (``...#name``; none: the default agent)."""
    return session_key.rpartition("#")[2] if "#" in session_key else "default"
