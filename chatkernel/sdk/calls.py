"""Whether an account's calls to its platform are answered: what health reads at once.

Every send (``Replies.send_payload``) and every probe is a :class:`Calls` entry while
it is out; an answered poll of the kit's loops (``receiving``) is a success with nothing
out (a long poll waits by design: it is not counted as out). Events the platform pushes
(a webhook, a websocket frame) are not answers to the account's calls and count for
nothing here. From that:

- a call still out after its ``patience`` (:data:`HUNG_AFTER_SECONDS`, a few seconds;
  longer for a file) with **no success of the account since it left** means the
  platform hangs: the account is unhealthy now (:meth:`Calls.hanging`), not when the
  call's own timeout (30-45 s) ends it. It stops counting the moment any call of the
  account succeeds, or the hung one ends;
- the last success (:attr:`Calls.last_ok_at`) ends what older failures said: a failed
  probe or a failed poll from before it no longer counts (see
  ``AccountRuntime.probe_superseded``, ``AccountRuntime.problem_superseded``), so health
  turns green as soon as calls work again, not at the next probe or long poll.

Everything is in memory and synchronous; times are on ``clock`` (Unix time by default,
as the rest of the runtime).
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

#: How long a call may go unanswered, with nothing of the account answered meanwhile,
#: before the platform counts as hanging.
HUNG_AFTER_SECONDS = 5.0
#: The same for a call that carries a file (an upload takes its time).
HUNG_AFTER_SECONDS_FILE = 60.0


@dataclass(frozen=True, slots=True)
class Hang:
    """A call out longer than its patience, with no success since it left."""

    what: str
    since: float

    def describe(self, now: float) -> str:
        return f"no answer from the platform for {now - self.since:.0f}s ({self.what})"


class Calls:
    """One account's calls to its platform: those out, the last success, the last failure."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._out: dict[int, tuple[float, str, float]] = {}  # id -> (left at, what, patience)
        self._ids = itertools.count()
        #: When a call of the account last succeeded (None: not yet).
        self.last_ok_at: float | None = None
        #: When one last failed, and why.
        self.last_failed_at: float | None = None
        self.last_error: str | None = None

    def begin(self, what: str, patience: float = HUNG_AFTER_SECONDS) -> int:
        """A call leaves; returns its id for :meth:`end`."""
        call = next(self._ids)
        self._out[call] = (self._clock(), what, patience)
        return call

    def end(self, call: int, ok: bool | None, error: str | None = None) -> None:
        """The call is over: ``ok`` True (it worked), False (it failed), None (it was
        cancelled: says nothing about the platform)."""
        self._out.pop(call, None)
        if ok:
            self.succeeded()
        elif ok is not None:
            self.failed(error)

    @contextlib.contextmanager
    def track(self, what: str, patience: float = HUNG_AFTER_SECONDS) -> Iterator[None]:
        """``with calls.track("send"): await ...``: a call that returns succeeded, one
        that raises failed, one cancelled neither."""
        call = self.begin(what, patience)
        try:
            yield
        except Exception as exc:
            self.end(call, False, str(exc) or type(exc).__name__)
            raise
        except BaseException:
            self.end(call, None)
            raise
        self.end(call, True)

    def succeeded(self) -> None:
        """A call was answered and worked (a poll, a send, a probe, a websocket frame)."""
        self.last_ok_at = self._clock()

    def failed(self, error: str | None = None) -> None:
        self.last_failed_at, self.last_error = self._clock(), error

    @property
    def outstanding(self) -> int:
        return len(self._out)

    def hanging(self, now: float | None = None) -> Hang | None:
        """The oldest call out longer than its patience that left after the account's
        last success (None: no call hangs)."""
        now = self._clock() if now is None else now
        last_ok = self.last_ok_at if self.last_ok_at is not None else float("-inf")
        hung = [(left, what) for left, what, patience in self._out.values()
                if now - left >= patience and left >= last_ok]
        if not hung:
            return None
        left, what = min(hung)
        return Hang(what, left)

    def supersedes(self, at: float | None) -> bool:
        """Whether a call succeeded after ``at`` (what failed then is over)."""
        return at is not None and self.last_ok_at is not None and self.last_ok_at > at
