"""What the control requests do: the :class:`Control` a gateway's ``/control`` routes
answer through (chatkernel.core.gateway.control), and a CLI command asks directly when
no gateway runs (its own kernel's).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from chatkernel.core.outbound.failed import FailedSends, NotFailed

if TYPE_CHECKING:
    from chatkernel.core.health.presence import Presence
    from chatkernel.core.health.probes import HealthProbes
    from chatkernel.core.heartbeat.scheduler import HeartbeatScheduler
    from chatkernel.core.inbound.sessions import Sessions
    from chatkernel.core.outbound.deliveries import Deliveries
    from chatkernel.core.outbound.delivery_statuses import DeliveryStatuses
    from chatkernel.core.outbound.policy import SendPolicies
    from chatkernel.core.outbound.replies import Replies
    from chatkernel.core.runtime.parts import GatewayParts
    from chatkernel.core.store.base import Store
    from chatkernel.sdk.models import Account, Route

    #: Where a send goes: the account, the route and the session key.
    Target = tuple[Account, Route, str]


class ControlError(Exception):
    """A control request that cannot be done; ``status`` is its HTTP status."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


#: The longest probe a control request may ask for, in milliseconds (10 minutes).
MAX_PROBE_TIMEOUT_MS = 600_000


def probe_timeout(body: dict[str, Any]) -> float | None:
    """``timeout_ms`` of a request, in seconds (None: the configured default)."""
    value = body.get("timeout_ms")
    if value is None:
        return None
    # Compared, never converted first: a JSON integer may be too large for a float.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not 0 < value <= MAX_PROBE_TIMEOUT_MS:
        raise ControlError(f"'timeout_ms' must be a positive number of milliseconds, at most "
                           f"{MAX_PROBE_TIMEOUT_MS:,}")
    return value / 1000


def strings(body: dict[str, Any], *names: str) -> dict[str, str | None]:
    """The named fields of a request, each a string or absent (None); ControlError names
    those that are something else."""
    wrong = [name for name in names
             if body.get(name) is not None and not isinstance(body[name], str)]
    if wrong:
        raise ControlError(" and ".join(repr(name) for name in wrong)
                           + (" must be a string" if len(wrong) == 1 else " must be strings"))
    return {name: body.get(name) for name in names}


def entry_id(body: dict[str, Any]) -> int:
    """The outbox entry ``id`` of a request (a whole number; its digits will do)."""
    value = body.get("id")
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 18:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ControlError("'id' must be an outbox entry id (chatkernel deliveries list "
                           "shows them)")
    return value


#: What ``chatkernel send`` reports (see :func:`send_outcome`; ``nothing``: the text
#: made no payload). On a channel that reports delivery later (WhatsApp), a reply the
#: platform took is ``accepted``, then ``delivered`` or ``failed`` once the platform
#: says so, or ``unconfirmed`` when ``wait_delivery`` ran out before it did.
SEND_OUTCOMES = ("sent", "accepted", "delivered", "unconfirmed", "failed", "unknown",
                 "pending", "queued", "nothing")


def send_outcome(parts: list[dict[str, Any]] | None) -> str:
    """One word for a send: ``sent`` (every part), ``failed`` (a part did not arrive),
    ``unknown`` (a part may have arrived: no answer after it went out), ``pending``
    (not done yet), or ``queued`` (nobody waited)."""
    if parts is None:
        return "queued"
    statuses = {part["status"] for part in parts}
    if not parts or "failed" in statuses:
        return "failed"
    if "unknown" in statuses:
        return "unknown"
    return "sent" if statuses == {"sent"} else "pending"


class ControlRuntime(Protocol):
    """What the control requests read of a running kernel, on each call."""

    def sessions(self) -> Sessions:
        """The sessions (RuntimeError before the start)."""

    def heartbeats(self) -> HeartbeatScheduler:
        """The heartbeat scheduler (RuntimeError before the start)."""

    def send_policy(self) -> SendPolicies:
        """The send policies in effect (a reload replaces them)."""

    def started_at(self) -> float | None:
        """When the kernel started (None: not yet)."""

    def store(self) -> Store:
        """The opened store (RuntimeError before the start)."""


class SendTargets(Protocol):
    """Where a proactive send goes. LookupError says what is missing."""

    async def resolve_target(self, channel: str, account: str | None, to: str, *,
                             thread: str | None = None) -> Target:
        """A send to a chat id, or ``last`` (the account's last active chat)."""

    async def session_target(self, key: str) -> Target:
        """A send into a session: its account and current route."""

    def chat_agent(self, route: Route) -> str:
        """The agent a chat is bound to (``default`` when none is)."""


class Control:
    """What the control requests do, for the gateway's ``/control`` routes and for a
    CLI command that runs its own kernel when no gateway runs.

    Given by name what the requests read and act on: ``health``, the kernel's
    ``accounts`` by key (read only), ``presence``, ``replies``, ``deliveries`` and
    ``delivery_statuses``, the config file's path, ``runtime`` (:class:`ControlRuntime`)
    and ``targets`` (:class:`SendTargets`), its ports to the kernel, and ``gateway``,
    the gateway's parts (no URL and no reloader in a kernel of its own)."""

    def __init__(self, *, health: "HealthProbes", accounts: Mapping[str, Account],
                 presence: "Presence", replies: "Replies", deliveries: "Deliveries",
                 delivery_statuses: "DeliveryStatuses", config_path: Path | None,
                 runtime: ControlRuntime, targets: SendTargets,
                 gateway: "GatewayParts") -> None:
        self._health = health
        self._accounts = accounts
        self._presence = presence
        self._replies = replies
        self._deliveries = deliveries
        self._delivery_statuses = delivery_statuses
        self._config_path = config_path
        self._resolve_target = targets.resolve_target
        self._session_target = targets.session_target
        self._chat_agent = targets.chat_agent
        self._sessions = runtime.sessions
        self._heartbeats = runtime.heartbeats
        self._send_policy = runtime.send_policy
        self._started_at = runtime.started_at
        self._gateway = gateway
        #: The failed sends, from the store (``chatkernel deliveries``).
        self.failed_sends = FailedSends(store=runtime.store, accounts=accounts,
                                        requeue=replies.requeue)

    async def status(self, body: dict[str, Any]) -> dict[str, Any]:
        """``chatkernel status``: the health snapshot, the pid and the accounts."""
        snapshot = await self._health.snapshot(live=bool(body.get("live")),
                                               timeout=probe_timeout(body))
        return {**snapshot.model_dump(mode="json"), "pid": os.getpid(),
                "accounts": sorted(self._accounts), "started_at": self._started_at()}

    async def health(self, body: dict[str, Any]) -> dict[str, Any]:
        """``chatkernel health``: the health snapshot (``live``: probed now)."""
        snapshot = await self._health.snapshot(live=bool(body.get("live")),
                                               timeout=probe_timeout(body))
        return snapshot.model_dump(mode="json")

    async def presence(self, body: dict[str, Any]) -> dict[str, Any]:
        """The gateway's presence table: who is around."""
        return {"presence": [entry.as_dict() for entry in self._presence.entries()]}

    async def heartbeat_status(self, body: dict[str, Any]) -> dict[str, Any]:
        """``chatkernel heartbeat status``: the heartbeats and the scheduler's time."""
        heartbeats = self._heartbeats()
        return {**heartbeats.status(), "now": heartbeats.clock.now()}

    async def reload(self, config: str | None = None) -> dict[str, Any]:
        """``chatkernel reload``: read the config file again and apply it (see
        chatkernel.core.runtime.reload). A config the start-up checks refuse is a 422
        naming what is wrong, and nothing of it is applied. ``config``: the file the
        caller means; a gateway that reads another one refuses (409) rather than
        switch files."""
        from chatkernel.sdk.errors import ConfigError
        from chatkernel.core.runtime.reload import ReloadBusy

        reloader = self._gateway.reloader
        if reloader is None:
            raise ControlError("this kernel cannot reload its config (it is not a gateway)",
                               409)
        running = self._config_path
        if config and running is not None and \
                Path(config).resolve() != Path(running).resolve():
            raise ControlError(f"the running gateway reads {running}, not {config}: edit "
                               "that file, or restart the gateway with --config to switch "
                               "files", 409)
        try:
            report = await reloader.reload()
        except ConfigError as exc:
            raise ControlError(f"{exc} (nothing was applied: the running config stays)",
                               422) from None
        except ReloadBusy as exc:
            raise ControlError(str(exc), 409) from None
        return {**report.as_dict(), "lines": report.lines(), "pid": os.getpid()}

    async def wake_heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        """``chatkernel heartbeat wake``: run a heartbeat now, or leave a note for its
        next run."""
        from chatkernel.core.heartbeat.jobs import HeartbeatError

        fields = strings(body, "text", "mode", "session", "agent")
        text, mode, session = fields["text"], fields["mode"] or "now", fields["session"]
        heartbeats = self._heartbeats()
        try:
            job = await heartbeats.wake_up(text, mode=mode, session_key=session or None,
                                           agent=fields["agent"] or None)
        except HeartbeatError as exc:
            raise ControlError(str(exc), 404 if "no heartbeat" in str(exc) else 400) \
                from None
        return {"heartbeat": heartbeats.describe(job), "mode": mode}

    async def deliveries(self, body: dict[str, Any]) -> dict[str, Any]:
        """``chatkernel deliveries list``: the failed sends, newest first (``limit``), and
        how many failed in the last hour."""
        limit = body.get("limit", 100)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ControlError("'limit' must be a whole number, 1 or more")
        failed = self.failed_sends
        return {"failed": await failed.list(limit),
                "failed_last_hour": await failed.count_since(time.time() - 3600)}

    async def retry_delivery(self, body: dict[str, Any]) -> dict[str, Any]:
        """``chatkernel deliveries retry ID``: queue a failed send again, once."""
        try:
            return await self.failed_sends.retry(entry_id(body))
        except NotFailed as exc:
            raise ControlError(str(exc), 404) from None
        except LookupError as exc:
            raise ControlError(str(exc), 409) from None

    async def discard_delivery(self, body: dict[str, Any]) -> dict[str, Any]:
        """``chatkernel deliveries discard ID``: forget a failed send."""
        try:
            return await self.failed_sends.discard(entry_id(body))
        except NotFailed as exc:
            raise ControlError(str(exc), 404) from None

    def report_presence(self, client: dict[str, Any], remote: str | None) -> None:
        """Record the caller in the gateway's presence table (``client.instance_id``...)."""
        fields = {key: value for key, value in client.items()
                  if key != "instance_id" and isinstance(value, (str, int, float))}
        try:
            self._presence.report(str(client.get("instance_id") or ""), ip=remote, **fields)
        except ValueError as exc:
            raise ControlError(f"client: {exc}") from None

    async def probe(self, body: dict[str, Any]) -> dict[str, Any]:
        """Live probes of ``target`` (``CHANNEL`` or ``CHANNEL:ACCOUNT``; all when empty)."""
        from chatkernel.core.health.probes import select_accounts
        from chatkernel.core.health.snapshot import ProbeInfo

        target = body.get("target")
        if target is not None and not isinstance(target, str):
            raise ControlError("'target' must be CHANNEL or CHANNEL:ACCOUNT")
        try:
            accounts = select_accounts(self._accounts.values(), target)
        except LookupError as exc:
            raise ControlError(str(exc), 404) from None
        results = await self._health.probe(accounts, timeout=probe_timeout(body))
        probes = {}
        for account in accounts:
            info = ProbeInfo.of(results[account.key], account.runtime.last_probe_at)
            assert info is not None
            probes[account.key] = info.model_dump(mode="json")
        return {"ok": all(p["ok"] for p in probes.values()), "probes": probes}

    async def set_session_policy(self, key: str, policy: str) -> dict[str, Any]:
        """A session's own send setting: ``allow``, ``deny`` or ``inherit`` (the rules)."""
        if policy not in ("allow", "deny", "inherit"):
            raise ControlError(f"policy must be allow, deny or inherit, not {policy!r}")
        sessions = self._sessions()
        record = await sessions.get(key)
        if record is None:
            raise ControlError(f"no session {key!r} (chatkernel sessions list shows them)",
                               404)
        await sessions.update_settings(record, send=None if policy == "inherit" else policy)
        return {"session": key, "policy": policy}

    async def send(self, body: dict[str, Any]) -> dict[str, Any]:
        """Do what ``chatkernel send`` / ``sessions send`` asked (validated here).

        ``wait`` (seconds, default 0) waits for the outcome of every part; the answer then
        has ``parts`` (``status``, ``error`` each) and ``outcome`` (:func:`send_outcome`).
        On a channel that reports delivery later (``Capabilities.delivery_statuses``) a reply
        the platform took is ``accepted``, and ``delivery_later`` is true; ``wait_delivery``
        (seconds) then waits for the platform's report on every part (each part gets a
        ``delivery`` status): ``delivered``, ``failed`` or, when it ran out, ``unconfirmed``.
        Refused before anything is queued: an unknown target, a file the media-path policy
        refuses, a send the send policy blocks, a web chat message with no web chat served,
        a wait for delivery with no gateway to receive the reports.
        """
        text = body.get("text", "")
        media = body.get("media") or []
        wait = body.get("wait") or 0
        wait_delivery = body.get("wait_delivery") or 0
        if not isinstance(text, str) or not isinstance(media, list) or not all(
                isinstance(item, str) for item in media):
            raise ControlError("'text' must be a string and 'media' a list of paths")
        for name, value in (("wait", wait), ("wait_delivery", wait_delivery)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ControlError(f"{name!r} must be a number of seconds, 0 or more")
        if not text.strip() and not media:
            raise ControlError("nothing to send: give a text or a file")
        where = strings(body, "session", "channel", "account", "to", "thread")
        try:
            if where["session"]:
                account, route, key = await self._session_target(where["session"])
            else:
                account, route, key = await self._resolve_target(
                    where["channel"] or "", where["account"], where["to"] or "",
                    thread=where["thread"])
        except LookupError as exc:
            raise ControlError(str(exc), 404) from None
        for path in media:  # the sender hears of a refused file now, not the chat later
            allowed, reason = await self._replies.check_media(account, path)
            if allowed is None:
                raise ControlError(f"{path}: {reason}", 403)
        if getattr(account.channel, "needs_http_server", False) and self._gateway.url is None:
            # The web chat's page is the gateway's: with none running, nobody would see it.
            raise ControlError(f"{account.key} shows messages only on the gateway's page, and no "
                               "gateway is running: nothing was sent (start one with "
                               "`chatkernel run`, then send again)", 409)
        later = account.channel is not None and account.channel.capabilities.delivery_statuses
        if later and wait_delivery and self._gateway.url is None:
            raise ControlError(f"{account.key} reports delivery on the gateway's webhook, and no "
                               "gateway is running: nothing was sent (start one with "
                               "`chatkernel run`, or send without --wait-delivery)", 409)
        sessions = self._sessions()
        session = sessions.cached(key) or await sessions.get(key)
        verdict = self._send_policy().check(route, session)
        if not verdict:
            raise ControlError(f"not sent to {key}: {verdict.reason}", 403)
        if session is None:  # a first send to this chat: a session it shows in
            session = await sessions.open(key, route, self._chat_agent(route))
        reply_id = await self._replies.send_text(
            account, route, text, session_key=key, session_id=session.session_id, media=media,
            log=True)
        answer: dict[str, Any] = {"reply_id": reply_id, "session": key, "account": account.key,
                                  "chat_id": route.chat_id, "delivery_later": later}
        if reply_id is not None and (wait or wait_delivery):
            entries = await self._deliveries.wait(reply_id, wait or wait_delivery)
            answer["parts"] = [{"status": entry.status, "error": entry.error} for entry in entries]
        outcome = send_outcome(answer.get("parts")) if reply_id else "nothing"
        if later and outcome == "sent":
            outcome = "accepted"
            if wait_delivery:
                outcome = await self._wait_for_delivery(answer, wait_delivery)
        answer["outcome"] = outcome
        return answer


    async def _wait_for_delivery(self, answer: dict[str, Any], timeout: float) -> str:
        """Wait for the platform's report on every part of an accepted reply; its outcome."""
        parts = answer["parts"]
        found = await self._delivery_statuses.wait(answer["reply_id"], len(parts), timeout)
        for number, part in enumerate(parts, start=1):
            part["delivery"] = found.status(number)
            fate = found.parts.get(number)
            if fate is not None and fate.status == "failed":
                part["error"] = fate.reason or "no reason given"
        if found.failed:
            return "failed"
        return "delivered" if found.done else "unconfirmed"
