"""A broadcast through a platform that enforces its limits, in real time.

    .venv/bin/python bench/ratelimit.py [--chats 300] [--per-chat 2] [--latency 0.05]
                                        [--jitter 0.03] [--retries 2]
    .venv/bin/python bench/ratelimit.py --fake telegram [--chats 60] [--per-chat 5]
                                        [--latency 0.01] [--jitter 0.06]

``--chats`` concurrent senders (one task per chat) each send ``--per-chat``
messages in order: a rate-limit slot, then a send to a fake platform that
enforces Telegram's limits the strict way: at most 30 accepted sends per
account in any rolling second and 1 per chat per second (and, with ``--fake
telegram``, 20 per group per minute; every sixth chat is a group); a send over
a limit is answered 429 with ``retry_after`` (whole seconds, as Telegram
does). Each request takes a random 0..``--jitter`` seconds to reach the
platform, which counts it on arrival, as a real one does, and its answer
``--latency`` more to come back. A refused send is retried up to
``--retries`` times after the ``retry_after``; after that the message is lost.

The fakes:

- ``strict`` (default): a platform written here, in process, that counts a
  request the moment it arrives;
- ``telegram``: the Telegram plugin's own fake Bot API (``enforce_limits``,
  its ``latency`` before it counts), behind ``chatkernel.testing.fakes.faultproxy``
  on 127.0.0.1 for the jitter: real HTTP, the requests counted by a server
  this file does not control.

The rows run side by side in one event loop, each on its own account (its own
fake), so they see the same machine load:

- **held until answered**: the kernel's ``RateLimiter`` the way the outbound
  sender uses it: ``acquire(..., hold=True)`` before the request,
  ``release`` once its answer is in, so a slot counts from the moment the
  request left until a window after its answer (no margin);
- **counted when sent, +20 ms**: the same limiter counting each send at the
  moment it left, every window widened by 20 ms (how the kernel paced before);
- **token bucket (naive)** (``strict`` only): a bucket per scope (account:
  capacity 30, refill 30/s; chat: capacity 1, refill 1/s), sleeping
  ``retry_after`` on a 429;
- **kernel outbox (all of it)**: a real kernel (outbox, per-chat senders,
  retry policy, limiter; with ``--fake telegram`` the Telegram plugin itself),
  the broadcast queued with ``Replies.send_text`` as ``chatkernel send``
  would.

Reported per row: messages delivered and lost, 429s, the most send attempts
the platform saw in any one second (``strict``), the elapsed time, and the
achieved rate as a fraction of the 30/s ceiling: ``delivered / (last accept -
first accept + 1 s)``, since n sends spread over a span T occupy T + 1 s of
rolling windows, so a limiter that uses every slot scores 1.0 however it
spreads them. A held slot costs one round trip per window, so the last column,
``1/(1+rtt)``, is what holding can reach at the round trips measured. Targets
for the held rows: no 429, nothing lost, order kept, >= 0.95 of the ceiling
(which a mean round trip up to about 50 ms allows).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import random
import statistics
import time
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

import anyio

from chatkernel.sdk.channel import RateLimit
from chatkernel.core.outbound.ratelimit import RateLimiter

ACCOUNT = RateLimit(30, 1.0)
CHAT = RateLimit(1, 1.0)
GROUP = RateLimit(20, 60.0)
#: The margin the kernel used to add to every window when it counted sends as they left.
OLD_MARGIN = 0.02


class StrictPlatform:
    """A fake platform account: every send over a rolling-window limit gets a 429.

    A request reaches it 0..``jitter`` seconds after it was sent and is judged on
    arrival (concurrent sends cannot both slip into the last free slot); its answer
    takes ``latency`` to come back. Only accepted sends count against the windows.
    """

    def __init__(self, latency: float, jitter: float, seed: int) -> None:
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
        for name, limit, recent in (("account", ACCOUNT, self._recent),
                                    ("chat", CHAT, self._chat_recent[chat_id])):
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

    def accept_times(self) -> list[float]:
        return [at for at, _, _ in self.accepted]

    def order(self) -> dict[str, list[int]]:
        delivered: dict[str, list[int]] = defaultdict(list)
        for _, chat_id, seq in self.accepted:
            delivered[chat_id].append(seq)
        return delivered

    def throttled(self) -> int:
        return sum(self.refused.values())


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

    def __init__(self) -> None:
        self.account = TokenBucket(ACCOUNT, capacity=ACCOUNT.count)
        self.chats: dict[str, TokenBucket] = {}

    async def acquire(self, chat_id: str, is_group: bool) -> None:
        chat = self.chats.get(chat_id)
        if chat is None:
            chat = self.chats[chat_id] = TokenBucket(CHAT, capacity=1)
        while True:
            now = time.monotonic()
            wait = max(self.account.delay(now), chat.delay(now))
            if wait <= 0:
                self.account.tokens -= 1
                chat.tokens -= 1
                return
            await anyio.sleep(wait)

    def release(self, chat_id: str, is_group: bool) -> None:
        pass

    async def throttled(self, seconds: float, chat_id: str) -> None:
        await anyio.sleep(seconds)


class SlidingLog:
    """The kernel's RateLimiter: ``hold`` slots until the answer, or count them when sent."""

    def __init__(self, rates: dict[str, RateLimit], *, hold: bool) -> None:
        self.hold = hold
        self.limiter = RateLimiter(rates, margin=0.0 if hold else OLD_MARGIN)

    async def acquire(self, chat_id: str, is_group: bool) -> None:
        await self.limiter.acquire(chat_id, is_group=is_group, hold=self.hold)

    def release(self, chat_id: str, is_group: bool) -> None:
        if self.hold:
            self.limiter.release(chat_id, is_group=is_group)

    async def throttled(self, seconds: float, chat_id: str) -> None:
        # No sleep here: the next acquire waits, and so does every other send to the chat.
        self.limiter.penalize(seconds, chat_id)


@dataclass
class Run:
    name: str
    limiter: Any = None  # None: the kernel's own
    platform: Any = None  # a StrictPlatform, or the row's TelegramFake
    lost: int = 0
    started: float = 0.0
    finished: float = 0.0
    rtts: list[float] = field(default_factory=list)


def chat_ids(chats: int, telegram: bool) -> list[tuple[str, bool]]:
    """(chat id, is a group) for each chat; with Telegram, every sixth is a group."""
    if not telegram:
        return [(f"chat-{index}", False) for index in range(chats)]
    return [(str(-(1000 + index)) if index % 6 == 5 else str(100 + index), index % 6 == 5)
            for index in range(chats)]


async def broadcast(run: Run, send, chats: list[tuple[str, bool]], per_chat: int,
                    retries: int) -> None:
    """One task per chat, each sending its messages in order through ``run.limiter``;
    ``send(chat_id, seq)`` returns None when accepted, else the ``retry_after``."""
    async def chat_sender(chat_id: str, is_group: bool) -> None:
        for seq in range(per_chat):
            for _ in range(retries + 1):
                await run.limiter.acquire(chat_id, is_group)
                sent = time.monotonic()
                try:
                    retry_after = await send(chat_id, seq)
                finally:
                    run.rtts.append(time.monotonic() - sent)
                    run.limiter.release(chat_id, is_group)
                if retry_after is None:
                    break
                await run.limiter.throttled(retry_after, chat_id)
            else:
                run.lost += 1

    run.started = time.monotonic()
    async with anyio.create_task_group() as tg:
        for chat_id, is_group in chats:
            tg.start_soon(chat_sender, chat_id, is_group)
    run.finished = time.monotonic()


# -- the kernel's whole send path ---------------------------------------------------------------


def strict_channel(platform: StrictPlatform) -> type:
    """A channel class whose platform is ``platform`` (declaring its limits)."""
    from chatkernel.sdk.channel import Channel, ChannelLimits
    from chatkernel.sdk.models import SendError, SendResult

    class StrictChannel(Channel):
        name = "strict"
        limits = ChannelLimits(text_limit=4000, rates={"account": ACCOUNT, "chat": CHAT})

        async def run(self, deliver) -> None:
            await anyio.sleep_forever()

        async def send(self, route, payload):
            retry_after = await platform.send(route.chat_id, int(payload.text.split()[-1]))
            if retry_after is not None:
                raise SendError("Too Many Requests", retryable=True, status=429,
                                retry_after=retry_after)
            return SendResult()

    return StrictChannel


async def kernel_broadcast(run: Run, channel: str, plugin: object, account: dict[str, Any],
                           chats: list[tuple[str, bool]], per_chat: int,
                           retries: int) -> None:
    """The broadcast through a real kernel's outbox (like ``chatkernel send`` to many)."""
    import tempfile
    from pathlib import Path

    from chatkernel.sdk.models import Route
    from chatkernel.testing.memory import KernelHarness

    with tempfile.TemporaryDirectory() as home:
        config = {"channels": {channel: {
            "accounts": {"main": {"allow_from": ["*"], **account}},
            "retry": {"attempts": retries + 1}}}}
        async with KernelHarness(Path(home), config=config, plugins=[(channel, plugin)]) as h:
            sender = h.kernel.accounts[f"{channel}:main"]
            run.started = time.monotonic()
            for seq in range(per_chat):
                for chat_id, is_group in chats:
                    await h.kernel.replies.send_text(
                        sender, Route(channel, "main", chat_id, is_group=is_group),
                        f"{chat_id} {seq}", fmt="plain")
            await h.kernel.outbox.wait_idle()
            run.finished = time.monotonic()
            await h.kernel.store.flush()
            rows = h.kernel.store._run("SELECT status FROM outbox").fetchall()
            run.lost = sum(1 for (status,) in rows if status != "sent")


def strict_kernel_plugin(platform: StrictPlatform) -> object:
    from chatkernel.hookspecs import hookimpl

    channel = strict_channel(platform)

    class Plugin:
        @staticmethod
        @hookimpl
        def register_channels(register):
            register(channel)

    return Plugin


# -- the Telegram plugin's fake Bot API, behind a jitter proxy ------------------------------------


class TelegramFake:
    """One row's FakeBotAPI enforcing Telegram's limits, behind a FaultProxy adding jitter."""

    TOKEN = "123456:AAExampleTokenForBenchOnly_abcdefghijk"

    def __init__(self, latency: float, jitter: float, seed: int) -> None:
        self.latency = latency
        self.jitter = jitter
        self._random = random.Random(seed)
        self.api: Any = None
        self.proxy: Any = None
        self._http: Any = None

    async def __aenter__(self) -> "TelegramFake":
        import aiohttp

        from chatkernel.testing.fakes.faultproxy import FaultProxy
        from chatkernel_telegram.fake import FakeBotAPI

        self.api = await FakeBotAPI(token=self.TOKEN).__aenter__()
        self.api.enforce_limits(per_bot_per_second=ACCOUNT.count,
                                per_chat_per_second=CHAT.count, per_group_per_minute=GROUP.count)
        self.api.latency = self.latency
        self.proxy = await FaultProxy(
            self.api.base_url, there=lambda: self._random.uniform(0, self.jitter),
            keep_alive=True).__aenter__()
        self._http = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._http.close()
        await self.proxy.__aexit__(*exc_info)
        await self.api.__aexit__(*exc_info)

    async def send(self, chat_id: str, seq: int) -> float | None:
        """sendMessage through the proxy; None when accepted, else its ``retry_after``."""
        async with self._http.post(f"{self.proxy.url}/bot{self.TOKEN}/sendMessage",
                                   json={"chat_id": int(chat_id),
                                         "text": f"{chat_id} {seq}"}) as response:
            body = await response.json()
        if body.get("ok"):
            return None
        return float((body.get("parameters") or {}).get("retry_after", 1))

    def accept_times(self) -> list[float]:
        return [message.timestamp for message in self.api.sent()]

    def order(self) -> dict[str, list[int]]:
        delivered: dict[str, list[int]] = defaultdict(list)
        for message in self.api.sent():
            delivered[str(message.chat_id)].append(int(message.text.split()[-1]))
        return delivered

    def throttled(self) -> int:
        return self.api.throttled


# -- the report --------------------------------------------------------------------------------


def peak_per_window(times: list[float], per: float) -> int:
    """The most events in any window [t, t + per) (two pointers over sorted times)."""
    ordered = sorted(times)
    best = start = 0
    for end, at in enumerate(ordered):
        while ordered[start] + per <= at:
            start += 1
        best = max(best, end - start + 1)
    return best


def report(run: Run, total: int) -> dict[str, Any]:
    times = run.platform.accept_times()
    span = (max(times) - min(times)) if times else 0.0
    rate = len(times) / (span + ACCOUNT.per) if times else 0.0
    order = run.platform.order()
    attempts = getattr(run.platform, "attempts", None)
    rtt = statistics.mean(run.rtts) if run.rtts else None
    return {
        "delivered": len(times), "lost": run.lost, "total": total,
        "429s": run.platform.throttled(),
        "peak/1s": peak_per_window(attempts, 1.0) if attempts else None,
        "elapsed": run.finished - run.started, "rate": rate,
        "fraction": rate / (ACCOUNT.count / ACCOUNT.per),
        "rtt": rtt, "bound": 1 / (1 + rtt / ACCOUNT.per) if rtt is not None else None,
        "ordered": all(seqs == sorted(seqs) for seqs in order.values()),
    }


async def main_async(args: argparse.Namespace) -> None:
    telegram = args.fake == "telegram"
    chats = chat_ids(args.chats, telegram)
    total = len(chats) * args.per_chat
    seeds = iter(range(1, 100))

    def fake() -> Any:
        if telegram:
            return TelegramFake(args.latency, args.jitter, next(seeds))
        return StrictPlatform(args.latency, args.jitter, next(seeds))

    rates = {"account": ACCOUNT, "chat": CHAT, **({"group": GROUP} if telegram else {})}
    runs = [Run("held until answered", SlidingLog(rates, hold=True), fake()),
            Run(f"counted when sent, +{OLD_MARGIN * 1e3:.0f} ms", SlidingLog(rates, hold=False),
                fake())]
    if not telegram:
        runs.append(Run("token bucket (naive)", NaiveLimiter(), fake()))
    runs.append(Run("kernel outbox (all of it)", None, fake()))
    limits = (f"{ACCOUNT.count}/s per account (rolling 1 s), {CHAT.count}/s per chat"
              + (f", {GROUP.count}/min per group" if telegram else ""))
    print(f"broadcast through the {args.fake} fake: {len(chats)} chats x {args.per_chat} "
          f"messages = {total}, limits {limits}; each request 0-{args.jitter * 1e3:.0f} ms "
          f"there, {args.latency * 1e3:.0f} ms {'before it is counted' if telegram else 'back'}"
          f"; up to {args.retries} retries after a 429")
    print(f"ideal: {math.ceil(total / ACCOUNT.count) - 1} s from first to last send; all rows "
          "run at once, each on its own account\n")
    async with contextlib.AsyncExitStack() as stack:
        for run in runs:
            if isinstance(run.platform, TelegramFake):  # servers: started here, stopped after
                await stack.enter_async_context(run.platform)
        async with anyio.create_task_group() as tg:
            for run in runs:
                if run.limiter is not None:
                    tg.start_soon(broadcast, run, run.platform.send, chats, args.per_chat,
                                  args.retries)
                elif telegram:
                    import chatkernel_telegram
                    tg.start_soon(kernel_broadcast, run, "telegram", chatkernel_telegram,
                                  {"bot_token": run.platform.TOKEN,
                                   "api_base": run.platform.proxy.url},
                                  chats, args.per_chat, args.retries)
                else:
                    tg.start_soon(kernel_broadcast, run, "strict",
                                  strict_kernel_plugin(run.platform), {}, chats,
                                  args.per_chat, args.retries)
        rows = [(run.name, report(run, total)) for run in runs]

    header = (f"{'limiter':<29}{'delivered':>10}{'lost':>6}{'429s':>6}{'peak/1s':>8}"
              f"{'elapsed':>9}{'rate/s':>8}{'of 30/s':>9}{'rtt ms':>8}{'1/(1+rtt)':>10}")
    print(header)
    print("-" * len(header))
    for name, r in rows:
        peak = "-" if r["peak/1s"] is None else r["peak/1s"]
        rtt = "-" if r["rtt"] is None else f"{r['rtt'] * 1e3:.0f}"
        bound = "-" if r["bound"] is None else f"{r['bound']:.3f}"
        print(f"{name:<29}{r['delivered']:>6}/{r['total']:<4}{r['lost']:>5}{r['429s']:>6}"
              f"{peak:>8}{r['elapsed']:>8.2f}s{r['rate']:>8.2f}{r['fraction']:>9.3f}"
              f"{rtt:>8}{bound:>10}")
    print("\npeak/1s: the most send attempts the platform saw in any rolling second (refused "
          "ones included); rtt: the mean time from a request leaving to its answer (the "
          "kernel row's is not measured).")
    for name, mine in rows:
        if name.startswith(("held", "kernel")):
            ok = mine["fraction"] >= 0.95 and mine["429s"] == 0 and mine["lost"] == 0 \
                and mine["ordered"]
            print(f"\n{name}: rate >= 0.95 of the ceiling ({mine['fraction']:.3f}), "
                  f"0 429s ({mine['429s']}), 0 lost ({mine['lost']}), order kept "
                  f"({'yes' if mine['ordered'] else 'NO'}): {'met' if ok else 'MISSED'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fake", choices=("strict", "telegram"), default="strict",
                        help="the platform: written here, or the Telegram plugin's fake")
    parser.add_argument("--chats", type=int, default=None, help="default 300 (telegram: 60)")
    parser.add_argument("--per-chat", type=int, default=None, help="default 2 (telegram: 5)")
    parser.add_argument("--latency", type=float, default=None,
                        help="seconds each answer takes back (telegram: the fake's latency, "
                             "before it counts); default 0.05 (telegram: 0.01)")
    parser.add_argument("--jitter", type=float, default=None,
                        help="each request reaches the platform 0..JITTER seconds late; "
                             "default 0.03 (telegram: 0.06)")
    parser.add_argument("--retries", type=int, default=2,
                        help="retries of a refused send before the message is lost")
    args = parser.parse_args()
    telegram = args.fake == "telegram"
    for name, strict, tg in (("chats", 300, 60), ("per_chat", 2, 5), ("latency", 0.02, 0.01),
                             ("jitter", 0.05, 0.06)):
        if getattr(args, name) is None:
            setattr(args, name, tg if telegram else strict)
    anyio.run(main_async, args)


if __name__ == "__main__":
    main()
