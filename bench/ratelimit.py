"""A broadcast through a platform that enforces its limits, in real time.

    .venv/bin/python bench/ratelimit.py [--chats 300] [--per-chat 2] [--latency 0.05]
                                        [--retries 2] [--margin 0.02] [--jitter 0]

``--chats`` concurrent senders (one task per chat) each send ``--per-chat``
messages in order: ``acquire`` from a limiter, then a send to a fake platform
that enforces Telegram's limits the strict way: at most 30 accepted sends per
account in any rolling second and 1 per chat per second; a send over either
is answered 429 with ``retry_after`` (whole seconds, as Telegram does). With
``--jitter J`` each request takes a random 0..J seconds to reach the platform,
which counts it on arrival, as a real one does. A
refused send is retried up to ``--retries`` times after the ``retry_after``;
after that the message is lost.

Two limiters run side by side in the same event loop, each on its own account
(its own fake platform), so both see the same machine load:

- ``RateLimiter`` (chatkernel.core.ratelimit): a sliding log per scope, each
  window widened by ``--margin`` (default: the limiter's own default); on a
  429 it is penalized for ``retry_after``;
- a naive token bucket per scope (account: capacity 30, refill 30/s; chat:
  capacity 1, refill 1/s), which sleeps ``retry_after`` on a 429;
- the kernel's whole send path: a real kernel whose channel declares those
  limits and sends to its own fake platform; the broadcast is queued with
  ``Outbound.deliver_text`` (the outbox, its per-chat senders, the retry
  policy and the RateLimiter do the rest), as ``chatkernel send`` would.

Reported per limiter: messages delivered and lost, 429s by scope, the most
send attempts the platform saw in any one second, the elapsed time, and the
achieved rate as a fraction of the 30/s ceiling. The achieved rate is
``delivered / (last accept - first accept + 1 s)``: n sends spread over a span
T occupy T + 1 s of rolling windows, so a limiter that uses every slot scores
1.0 however it spreads them. Targets for RateLimiter: rate >= 0.95 of the
ceiling, no 429, nothing lost.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field

import anyio

from chatkernel.core.channel import RateLimit
from chatkernel.core.ratelimit import DEFAULT_MARGIN, RateLimiter

ACCOUNT = RateLimit(30, 1.0)
CHAT = RateLimit(1, 1.0)


class StrictPlatform:
    """A fake platform account: every send over a rolling-window limit gets a 429.

    The verdict is taken the moment a send arrives (before its simulated round
    trip), so concurrent sends cannot both slip into the last free slot.
    Only accepted sends count against the windows.
    """

    def __init__(self, account: RateLimit, chat: RateLimit, latency: float,
                 jitter: float = 0.0, seed: int = 1) -> None:
        self.account = account
        self.chat = chat
        self.latency = latency
        self.jitter = jitter
        self._random = random.Random(seed)
        self.accepted: list[tuple[float, str, int]] = []
        self.attempts: list[float] = []
        self.refused: Counter[str] = Counter()
        self._recent: deque[float] = deque()
        self._chat_recent: dict[str, deque[float]] = defaultdict(deque)

    async def send(self, chat_id: str, seq: int) -> float | None:
        """Deliver message ``seq`` to ``chat_id``; None when accepted, else ``retry_after``."""
        if self.jitter:
            await anyio.sleep(self._random.uniform(0, self.jitter))  # the trip there varies
        now = time.monotonic()
        self.attempts.append(now)
        retry_after = None
        scope = None
        for name, limit, recent in (("account", self.account, self._recent),
                                    ("chat", self.chat, self._chat_recent[chat_id])):
            while recent and recent[0] + limit.per <= now:
                recent.popleft()
            if len(recent) >= limit.count:
                scope = name
                retry_after = max(1, math.ceil(recent[0] + limit.per - now))
                break
        if scope is None:
            self._recent.append(now)
            self._chat_recent[chat_id].append(now)
            self.accepted.append((now, chat_id, seq))
        else:
            self.refused[scope] += 1
        await anyio.sleep(self.latency)  # the answer's trip back
        return retry_after


class TokenBucket:
    """The naive limiter: ``capacity`` tokens, refilled at ``count / per`` per second."""

    def __init__(self, limit: RateLimit, capacity: int) -> None:
        self.rate = limit.count / limit.per
        self.capacity = capacity
        self.tokens = float(capacity)
        self.updated = time.monotonic()

    def delay(self, now: float) -> float:
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.rate


class NaiveLimiter:
    """Token buckets per account and per chat, no queue: what a first attempt looks like."""

    def __init__(self, account: RateLimit, chat: RateLimit) -> None:
        self.account = TokenBucket(account, capacity=account.count)
        self._chat_limit = chat
        self.chats: dict[str, TokenBucket] = {}

    async def acquire(self, chat_id: str) -> None:
        chat = self.chats.get(chat_id)
        if chat is None:
            chat = self.chats[chat_id] = TokenBucket(self._chat_limit, capacity=1)
        while True:
            now = time.monotonic()
            wait = max(self.account.delay(now), chat.delay(now))
            if wait <= 0:
                self.account.tokens -= 1
                chat.tokens -= 1
                return
            await anyio.sleep(wait)

    async def throttled(self, seconds: float, chat_id: str) -> None:
        await anyio.sleep(seconds)


class SlidingLog:
    """The kernel's RateLimiter, used the way the outbound sender uses it."""

    def __init__(self, account: RateLimit, chat: RateLimit, margin: float) -> None:
        self.limiter = RateLimiter({"account": account, "chat": chat}, margin=margin)

    async def acquire(self, chat_id: str) -> None:
        await self.limiter.acquire(chat_id)

    async def throttled(self, seconds: float, chat_id: str) -> None:
        # No sleep here: the next acquire waits, and so does every other send to the chat.
        self.limiter.penalize(seconds, chat_id)


@dataclass
class Run:
    name: str
    platform: StrictPlatform
    limiter: NaiveLimiter | SlidingLog
    lost: int = 0
    out_of_order: int = 0
    started: float = 0.0
    finished: float = 0.0
    delivered_order: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))


def kernel_channel(platform: StrictPlatform) -> type:
    """A channel class whose platform is ``platform`` (declaring its limits)."""
    from chatkernel.core.channel import Channel, ChannelLimits
    from chatkernel.core.models import SendError, SendResult

    class StrictChannel(Channel):
        name = "strict"
        limits = ChannelLimits(text_limit=4000, rates={"account": ACCOUNT, "chat": CHAT})

        async def run(self, deliver) -> None:
            await anyio.sleep_forever()

        async def send(self, route, payload):
            retry_after = await platform.send(route.chat_id, int(payload.text))
            if retry_after is not None:
                raise SendError("Too Many Requests", retryable=True, status=429,
                                retry_after=retry_after)
            return SendResult()

    return StrictChannel


async def kernel_broadcast(run: Run, chats: int, per_chat: int, retries: int,
                           margin: float) -> None:
    """The broadcast through a real kernel's outbox (like ``chatkernel send`` to many)."""
    import tempfile
    from pathlib import Path

    from chatkernel.core.models import Route
    from chatkernel.hookspecs import hookimpl
    from chatkernel.testing.memory import KernelHarness

    channel = kernel_channel(run.platform)

    class Plugin:
        @staticmethod
        @hookimpl
        def register_channels(register):
            register(channel)

    with tempfile.TemporaryDirectory() as home:
        config = {"channels": {"strict": {
            "accounts": {"main": {"allow_from": ["*"]}},
            "retry": {"attempts": retries + 1},
            "rate_limits": {"margin": margin}}}}
        async with KernelHarness(Path(home), config=config,
                                 plugins=[("strict", Plugin)]) as h:
            account = h.kernel.accounts["strict:main"]
            run.started = time.monotonic()
            for seq in range(per_chat):
                for index in range(chats):
                    await h.kernel.outbound.deliver_text(
                        account, Route("strict", "main", f"chat-{index}"), str(seq),
                        fmt="plain")
            await h.kernel.outbox.wait_idle()
            run.finished = time.monotonic()
            await h.kernel.store.flush()
            rows = h.kernel.store._run("SELECT status FROM outbox").fetchall()
            run.lost = sum(1 for (status,) in rows if status != "sent")
    for _, chat_id, seq in run.platform.accepted:
        run.delivered_order[chat_id].append(seq)
    run.out_of_order = sum(1 for seqs in run.delivered_order.values() if seqs != sorted(seqs))


async def broadcast(run: Run, chats: int, per_chat: int, retries: int) -> None:
    async def chat_sender(chat_id: str) -> None:
        for seq in range(per_chat):
            for _ in range(retries + 1):
                await run.limiter.acquire(chat_id)
                retry_after = await run.platform.send(chat_id, seq)
                if retry_after is None:
                    run.delivered_order[chat_id].append(seq)
                    break
                await run.limiter.throttled(retry_after, chat_id)
            else:
                run.lost += 1

    run.started = time.monotonic()
    async with anyio.create_task_group() as tg:
        for index in range(chats):
            tg.start_soon(chat_sender, f"chat-{index}")
    run.finished = time.monotonic()
    run.out_of_order = sum(1 for seqs in run.delivered_order.values() if seqs != sorted(seqs))


def peak_per_window(times: list[float], per: float) -> int:
    """The most events in any window [t, t + per) (two pointers over sorted times)."""
    ordered = sorted(times)
    best = start = 0
    for end, at in enumerate(ordered):
        while ordered[start] + per <= at:
            start += 1
        best = max(best, end - start + 1)
    return best


def report(run: Run, total: int) -> dict[str, float]:
    accepted = run.platform.accepted
    times = [at for at, _, _ in accepted]
    span = (max(times) - min(times)) if times else 0.0
    rate = len(times) / (span + ACCOUNT.per) if times else 0.0
    fraction = rate / (ACCOUNT.count / ACCOUNT.per)
    first = [at for at in run.platform.attempts if at < run.started + 1.0]
    return {
        "delivered": len(times), "lost": run.lost, "total": total,
        "429 account": run.platform.refused["account"], "429 chat": run.platform.refused["chat"],
        "429s": sum(run.platform.refused.values()), "attempts": len(run.platform.attempts),
        "first second": len(first), "peak/1s": peak_per_window(run.platform.attempts, 1.0),
        "elapsed": run.finished - run.started, "rate": rate, "fraction": fraction,
        "out of order": run.out_of_order,
    }


async def main_async(args: argparse.Namespace) -> None:
    def platform() -> StrictPlatform:
        return StrictPlatform(ACCOUNT, CHAT, args.latency, args.jitter)

    runs = [
        Run("RateLimiter (sliding log)", platform(), SlidingLog(ACCOUNT, CHAT, args.margin)),
        Run("token bucket (naive)", platform(), NaiveLimiter(ACCOUNT, CHAT)),
        Run("kernel outbox (all of it)", platform(), SlidingLog(ACCOUNT, CHAT, args.margin)),
    ]
    total = args.chats * args.per_chat
    print(f"broadcast: {args.chats} chats x {args.per_chat} messages = {total}, platform limit "
          f"{ACCOUNT.count}/s per account (rolling 1 s), {CHAT.count}/s per chat; latency "
          f"{args.latency * 1e3:.0f} ms, jitter {args.jitter * 1e3:.0f} ms; "
          f"up to {args.retries} retries after a 429; "
          f"RateLimiter margin {args.margin * 1e3:.0f} ms")
    print(f"ideal: {math.ceil(total / ACCOUNT.count) - 1} s from first to last send; "
          "all three run at once, each on its own account\n")
    async with anyio.create_task_group() as tg:
        for run in runs[:2]:
            tg.start_soon(broadcast, run, args.chats, args.per_chat, args.retries)
        tg.start_soon(kernel_broadcast, runs[2], args.chats, args.per_chat, args.retries,
                      args.margin)

    rows = [(run.name, report(run, total)) for run in runs]
    header = (f"{'limiter':<27}{'delivered':>10}{'lost':>6}{'429s':>6}{'(acct/chat)':>12}"
              f"{'1st s':>7}{'peak/1s':>8}{'elapsed':>9}{'rate/s':>8}{'of 30/s':>9}")
    print(header)
    print("-" * len(header))
    for name, r in rows:
        print(f"{name:<27}{r['delivered']:>6}/{r['total']:<4}{r['lost']:>5}{r['429s']:>6}"
              f"{r['429 account']:>7}/{r['429 chat']:<4}{r['first second']:>7}{r['peak/1s']:>8}"
              f"{r['elapsed']:>8.2f}s{r['rate']:>8.2f}{r['fraction']:>9.3f}")
    print("\n1st s: send attempts the platform saw in the first second; peak/1s: the most in "
          "any rolling second (refused ones included).")
    for name, mine in (rows[0], rows[2]):
        ok = mine["fraction"] >= 0.95 and mine["429s"] == 0 and mine["lost"] == 0
        print(f"\n{name}: rate >= 0.95 of the ceiling ({mine['fraction']:.3f}), "
              f"0 429s ({mine['429s']}), 0 lost ({mine['lost']}), order kept "
              f"({'yes' if mine['out of order'] == 0 else 'NO'}): {'met' if ok else 'MISSED'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=300)
    parser.add_argument("--per-chat", type=int, default=2)
    parser.add_argument("--latency", type=float, default=0.05,
                        help="simulated round trip of one send, in seconds")
    parser.add_argument("--jitter", type=float, default=0.0,
                        help="each request reaches the platform 0..JITTER seconds late")
    parser.add_argument("--retries", type=int, default=2,
                        help="retries of a refused send before the message is lost")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN,
                        help="seconds RateLimiter adds to every window (0: exact pacing)")
    args = parser.parse_args()
    anyio.run(main_async, args)


if __name__ == "__main__":
    main()
