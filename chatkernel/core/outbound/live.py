"""Live replies: the agent's answer shown in the chat while it is written.

A channel that can show a reply in progress declares it
(:class:`chatkernel.sdk.live.LiveReplies`). For each turn on such a route, with
``streaming`` on, :class:`Live` makes a :class:`TurnPreview`: the turn's
:class:`~chatkernel.core.outbound.responder.Responder` feeds it the agent's non-final
text, and a task of its own shows that text at the channel's pace:

- at most one platform call every ``interval`` seconds, the first one at once;
- each call takes a slot of the account's rate limiter (the outbox's) with
  ``try_acquire``: when none is free the update waits for the next tick, so previews
  never go past the platform's limits nor ahead of a queued answer; a 429 blocks the
  chat in the limiter as it does for sends;
- the text shown is Markdown with its open marks closed (:func:`close_markup`), cut
  with the outbox's chunker at the channel's limit: a text that outgrows it goes on
  in a new preview;
- a failed call is logged and skipped (the next tick tries again); after
  :data:`GIVE_UP_AFTER` failures in a row the turn goes on without a preview.

When the agent's block is final, :meth:`TurnPreview.end_block` stops its previews
(no update comes after it) and returns the ids of the preview messages, which the
final payloads replace through the outbox (``OutboundPayload.replaces``): the answer
is queued, chunked, ordered, retried and logged as any reply is, exactly once.

A crash mid-answer: the ids of a turn's preview messages are kept in the store
(account state ``live:<session>``, with the journal entries of the turn) while they
are not yet handed to the outbox. When the turn runs again after a restart, its
stale previews are deleted before its first preview shows (or as it ends), and the
answer is delivered whole, once. The store is read for that once per session and
process, and written only while a preview message exists. A preview that is no answer
(the turn failed, or the block never became final) is deleted too, one still being
made as the turn ends included (the call in flight is let finish); an interrupted
turn's preview stops where it is.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from chatkernel.core.outbound.chunking import chunk_text, find_code_fences
from chatkernel.sdk.live import LiveMode, LiveReplies, Preview
from chatkernel.sdk.models import Account, OutboundPayload, Route

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from chatkernel.core.outbound.ratelimit import RateLimiter
    from chatkernel.core.store.base import Store

log = logging.getLogger("chatkernel.live")

#: Failed preview calls in a row after which a turn goes on without a preview.
GIVE_UP_AFTER = 3
#: The least wait before an update that found no free rate-limit slot tries again.
MIN_RETRY_SECONDS = 0.05
#: How long a turn's end waits for a native stream to be stopped or a preview deleted.
CLEANUP_SECONDS = 10.0
#: The account-state key of a session's preview messages not handed to the outbox.
STATE_PREFIX = "live:"

Sleep = Callable[[float], Awaitable[Any]]


# -- markup that stays valid -----------------------------------------------------------

#: Inline marks closed in a preview, longest first.
_MARKS = ("**", "__", "~~", "*", "_", "`")
#: An unfinished link at the end of the text: ``[label`` or ``[label](url``.
_OPEN_LINK = re.compile(r"\[[^\]\n]*(?:\]\([^)\s]*)?$")


def close_markup(text: str) -> str:
    """``text`` as a reader may see it before it is finished: an open code fence is
    closed, and so are bold, italic, strike-through and inline-code marks opened on
    the last paragraph; a link still being written is left out until it is whole."""
    fences = find_code_fences(text)
    if fences and fences[-1].close_start == len(text):  # a block still open
        fence = fences[-1]
        body = text if text.endswith("\n") else text + "\n"
        return body + "`" * fence.ticks
    # Marks do not span paragraphs in the renderers: only the last one can be open.
    start = text.rfind("\n\n") + 1
    if fences:
        start = max(start, fences[-1].close_end)
    head, tail = text[:start], text[start:]
    tail = _OPEN_LINK.sub("", tail)
    return head + tail + _closing_marks(tail)


def _closing_marks(text: str) -> str:
    """The marks that close what ``text`` left open, innermost first."""
    stack: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        mark = next((m for m in _MARKS if text.startswith(m, i)), None)
        if mark is None:
            i += 1
            continue
        if stack and stack[-1] == mark:
            stack.pop()
        elif mark == "`" or (i + len(mark) < len(text) and not text[i + len(mark)].isspace()
                             and mark not in stack
                             and not (mark[0] == "_" and i and text[i - 1].isalnum())):
            stack.append(mark)  # an opening mark (snake_case is no emphasis)
        i += len(mark)
        if stack and stack[-1] == "`":  # inside a code span, nothing else is a mark
            end = text.find("`", i)
            if end < 0:
                break
            stack.pop()
            i = end + 1
    return "".join(reversed(stack))


# -- the kernel's side -----------------------------------------------------------------


def streaming_setting(account: Account, channel_config: Any) -> tuple[bool, float | None]:
    """Whether live replies are on for ``account`` and its update interval (None: the
    channel's): the account's ``streaming``, else the channel's, else the channel
    type's default."""
    channel = account.channel
    if not isinstance(channel, LiveReplies):
        return False, None
    own = getattr(account.config, "streaming", None)
    shared = getattr(channel_config, "streaming", None) if channel_config else None
    setting = own or shared
    enabled = channel.streaming_default if setting is None else setting == "on"
    interval_ms = getattr(account.config, "streaming_interval_ms", None)
    if interval_ms is None and channel_config is not None:
        interval_ms = getattr(channel_config, "streaming_interval_ms", None)
    return enabled, None if interval_ms is None else interval_ms / 1000


class Live:
    """Makes the live preview of a turn, where its route can show one.

    ``limiter(account)``: the account's rate limiter (``Outbox.limiter``); ``store()``:
    the opened store; ``channel_config(name)``: the ``[channels.<name>]`` table;
    ``task_group()``: where a preview's updates run (the kernel's); ``sleep``: how the
    preview waits between updates.
    """

    def __init__(self, *, limiter: "Callable[[Account], RateLimiter]",
                 store: "Callable[[], Store]", channel_config: Callable[[str], Any],
                 task_group: "Callable[[], TaskGroup]",
                 sleep: Sleep = anyio.sleep) -> None:
        self._limiter = limiter
        self._store = store
        self._task_group = task_group
        self._channel_config = channel_config
        self._sleep = sleep
        #: Sessions whose stale previews were looked for since this process started.
        self._checked: set[str] = set()

    def preview(self, account: Account, session_key: str, route: Route,
                journal_seqs: list[int]) -> "TurnPreview | None":
        """The preview of one turn, or None when the route shows no reply in progress."""
        enabled, interval = streaming_setting(account,
                                              self._channel_config(account.channel_name))
        if not enabled:
            return None
        channel = account.channel
        assert isinstance(channel, LiveReplies)
        mode = channel.live_mode(route)
        if mode is None:
            return None
        return TurnPreview(
            channel=channel, account=account, session_key=session_key, route=route,
            mode=mode, interval=interval if interval is not None
            else channel.live_interval(route, mode),
            limiter=self._limiter(account), store=self._store(),
            journal_seqs=list(journal_seqs), sleep=self._sleep, checked=self._checked,
            task_group=self._task_group())


class TurnPreview:
    """One turn's live preview: ``async with`` it around the turn (see the module).

    :meth:`feed` adds the agent's text; :meth:`end_block` ends the block the agent
    finished; :meth:`handed_over` and :meth:`discard` tell what became of its
    preview messages. ``calls`` counts the platform calls made, ``failures`` the
    failed ones.
    """

    def __init__(self, *, channel: LiveReplies, account: Account, session_key: str,
                 route: Route, mode: LiveMode, interval: float, limiter: "RateLimiter",
                 store: "Store", journal_seqs: list[int], sleep: Sleep,
                 task_group: "TaskGroup", checked: set[str] | None = None) -> None:
        self.channel = channel
        self.account = account
        self.route = route
        self.mode: LiveMode = mode
        self.interval = interval
        self._limiter = limiter
        self._store = store
        self._seqs = journal_seqs
        self._sleep = sleep
        self._key = session_key
        limits = getattr(channel, "limits", None)
        self._limit = getattr(limits, "text_limit", 4000)
        self._unit = getattr(limits, "text_unit", "chars")
        self._text = ""  # the block's text so far, as the agent wrote it
        self._previews: list[Preview] = []  # the block's previews, in order
        self._kept: list[str] = []  # preview messages not handed to the outbox yet
        # Made with the first text (feed): a turn that streams nothing, most of a busy
        # gateway's, pays no anyio primitive (each looks its backend up when made).
        self._dirty: anyio.Event | None = None  # set when there is text to show
        self._lock: anyio.Lock | None = None  # one call at a time; end_block waits for it
        self._closed = False
        self._checked = set() if checked is None else checked
        self._saved = False  # whether the store holds this turn's previews
        self._in_a_row = 0
        self._retry_in: float | None = None  # no free slot: when there will be one
        self._tg = task_group
        self._scope: anyio.CancelScope | None = None  # the updates', once they run
        self._started = False
        self._stopped: anyio.Event | None = None
        self.calls = 0
        self.failures = 0

    # -- what the responder calls -----------------------------------------------------

    def feed(self, delta: str) -> None:
        """More of the block the agent is writing."""
        if not delta or self._closed:
            return
        self._text += delta
        if not self._started:  # a turn that streams nothing costs no task
            self._started = True
            self._dirty, self._lock, self._stopped = anyio.Event(), anyio.Lock(), anyio.Event()
            self._tg.start_soon(self._updates, name=f"live reply {self._key}")
        self._dirty.set()

    async def end_block(self) -> list[str]:
        """The agent finished its block: nothing more is shown of it (an update in
        flight is waited for); returns the ids of its preview messages, in order, for
        the final payloads to replace (none in mode ``draft``)."""
        if not self._started:  # nothing was fed: nothing to wait for (no checkpoint)
            return []
        async with self._lock:
            previews, self._previews, self._text = self._previews, [], ""
        if self.mode == "stream":
            for preview in previews:
                await self._cleanup(self.channel.stop_preview, preview)
        return [] if self.mode == "draft" else [preview.id for preview in previews]

    async def handed_over(self, ids: list[str]) -> None:
        """These preview messages are the outbox's now (the final payloads replace
        them): a restart no longer deletes them."""
        if ids:
            self._kept = [kept for kept in self._kept if kept not in ids]
            await self._save()

    async def discard(self, ids: list[str]) -> None:
        """Delete preview messages no final payload replaces."""
        for preview_id in ids:
            await self._cleanup(self.channel.delete_preview, Preview(self.mode, preview_id))
        await self.handed_over(ids)

    # -- the turn around it ----------------------------------------------------------

    async def __aenter__(self) -> "TurnPreview":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._closed = True
        if not self._started:  # the agent streamed nothing: the turn ends as without one
            self._check_stale_later()
            return
        with anyio.CancelScope(shield=True):  # the updates end here, whatever ends the turn
            if self._scope is not None:
                # A call in flight is let finish, as end_block does: a preview it is
                # starting exists on the platform once it answers, and is ended below.
                with anyio.move_on_after(CLEANUP_SECONDS) as waited:
                    async with self._lock:
                        self._scope.cancel()
                if waited.cancelled_caught:
                    log.warning("%s: a live reply call in session %s still had no answer "
                                "after %gs; cut short, a preview it started may stay "
                                "unfinished", self.account.key, self._key, CLEANUP_SECONDS)
                    self._scope.cancel()
            await self._stopped.wait()
            await self._close(interrupted=exc_type is not None and issubclass(
                exc_type, anyio.get_cancelled_exc_class()))

    async def _close(self, *, interrupted: bool) -> None:
        """The turn is over: a block left unfinished is no answer (deleted), unless
        the turn was interrupted, which leaves it where it stopped."""
        self._check_stale_later()
        previews, self._previews = self._previews, []
        for preview in previews:
            if interrupted or self.mode == "draft":
                await self._cleanup(self.channel.stop_preview, preview)
            else:
                await self._cleanup(self.channel.delete_preview, preview)
        self._kept = []
        if self._saved:
            await self._save()

    # -- showing ---------------------------------------------------------------------

    async def _updates(self) -> None:
        try:
            with anyio.CancelScope() as self._scope:
                if not self._closed:
                    await self._run()
        except Exception:  # in the kernel's task group: a bug here ends the preview only
            log.exception("%s: the live reply of session %s stopped", self.account.key,
                          self._key)
        finally:
            self._stopped.set()

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            async with self._lock:
                self._dirty = anyio.Event()
                self._retry_in = None
                if await self._show():
                    self._dirty.set()  # more to show than one call did
            retry_in = self._retry_in
            await self._sleep(self.interval if retry_in is None
                              else min(self.interval, max(retry_in, MIN_RETRY_SECONDS)))

    def _segments(self) -> list[str]:
        text = self._text if self.mode == "stream" else close_markup(self._text)
        return chunk_text(text, self._limit, self._unit) if text.strip() else []

    async def _show(self) -> bool:
        """One call towards showing the block's text; True when more remains."""
        if self._in_a_row >= GIVE_UP_AFTER:
            return False
        segments = self._segments()
        for index, segment in enumerate(segments):
            payload = OutboundPayload(text=segment, format="markdown")
            if index < len(self._previews):
                preview = self._previews[index]
                if preview.text == segment or (self.mode == "stream"
                                               and not segment.startswith(preview.text)):
                    continue  # shown already (a stream only ever grows)
                if await self._call(self.channel.update_preview(self.route, preview, payload)):
                    preview.text = segment
                return not self._shown(segments)
            await self._delete_stale()  # before anything of this turn shows
            if index and self.mode == "stream":  # the previous stream is full
                await self._cleanup(self.channel.stop_preview, self._previews[-1])
            started = await self._call(self.channel.start_preview(self.route, self.mode,
                                                                  payload))
            if started is None:
                return True
            self._previews.append(Preview(self.mode, str(started), segment))
            if self.mode != "draft":
                self._kept.append(str(started))
                await self._save()
            return index + 1 < len(segments)
        return False

    def _shown(self, segments: list[str]) -> bool:
        return [preview.text for preview in self._previews] == segments

    async def _call(self, call: Awaitable[Any]) -> Any:
        """A preview call within the rate limits; its result, or None when it was not
        made (no free slot) or failed (logged)."""
        chat, group = self.route.chat_id, self.route.is_group
        if not self._limiter.try_acquire(chat, is_group=group, hold=True):
            call.close()  # type: ignore[attr-defined]
            # Try again as soon as a slot is free rather than a whole interval later.
            self._retry_in = self._limiter.delay(chat, is_group=group)
            return None
        reached = True
        try:
            result = await call
        except Exception as exc:
            self.failures += 1
            self._in_a_row += 1
            retry_after = getattr(exc, "retry_after", None)
            if retry_after:
                self._limiter.penalize(float(retry_after), chat)
            reached = getattr(exc, "kind", "") != "unreachable"
            log.warning("%s: a live reply update in session %s failed (the answer is "
                        "still sent whole): %s", self.account.key, self._key, exc)
            if self._in_a_row == GIVE_UP_AFTER:
                log.warning("%s: no more live updates in session %s this turn, after %d "
                            "failures", self.account.key, self._key, GIVE_UP_AFTER)
            return None
        finally:
            self.calls += 1
            self._limiter.release(chat, is_group=group, reached=reached)
        self._in_a_row = 0
        return True if result is None else result

    async def _cleanup(self, method: Callable[[Route, Preview], Awaitable[None]],
                       preview: Preview) -> None:
        """Stop or delete a preview: best-effort, bounded, waiting for a rate-limit
        slot (it must happen, unlike an update)."""
        chat, group = self.route.chat_id, self.route.is_group
        with anyio.move_on_after(CLEANUP_SECONDS) as bounded:
            await self._limiter.acquire(chat, is_group=group, hold=True)
            try:
                self.calls += 1
                await method(self.route, preview)
            except Exception as exc:
                log.warning("%s: a live reply preview in session %s could not be ended: %s",
                            self.account.key, self._key, exc)
            finally:
                self._limiter.release(chat, is_group=group)
        if bounded.cancelled_caught:
            log.warning("%s: a live reply preview in session %s could not be ended within "
                        "%gs (no rate-limit slot, or no answer)", self.account.key, self._key,
                        CLEANUP_SECONDS)

    # -- what a restart finds ------------------------------------------------------------

    async def _save(self) -> None:
        value = ({"seqs": self._seqs, "mode": self.mode, "ids": self._kept}
                 if self._kept else None)
        self._saved = value is not None
        await self._store.set_account_state(self.account.channel_name, self.account.name,
                                            STATE_PREFIX + self._key, value)

    def _check_stale_later(self) -> None:
        if self._key not in self._checked:  # behind the turn: its end waits for nothing
            self._tg.start_soon(self._delete_stale, name=f"stale previews {self._key}")

    async def _delete_stale(self) -> None:
        """Delete the previews a gateway that stopped mid-answer left of this turn: once,
        before the turn's first preview, or as it ends (a turn that streams nothing
        reads nothing of the store as it starts)."""
        if self._key in self._checked:
            return
        self._checked.add(self._key)
        account = self.account
        key = STATE_PREFIX + self._key
        stale = await self._store.get_account_state(account.channel_name, account.name, key)
        if not stale:
            return
        if set(stale.get("seqs") or ()) & set(self._seqs):
            mode = stale.get("mode", self.mode)
            for preview_id in stale.get("ids") or ():
                await self._cleanup(self.channel.delete_preview, Preview(mode, preview_id))
        # Otherwise its answer was queued before the stop: the outbox replaces them.
        await self._store.set_account_state(account.channel_name, account.name, key, None)
