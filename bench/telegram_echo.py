"""End-to-end Telegram echo: chatkernel next to python-telegram-bot, aiogram and a floor.

Every contender long-polls a fresh :class:`chatkernel_telegram.fake.FakeBotAPI` on
127.0.0.1 (rate limits off) and echoes each text message back with ``sendMessage``.
``--updates`` updates over ``--chats`` private chats are injected at once, before the
contender starts (round robin: message 0 of every chat, then message 1, ...; each text is
``chat <c> msg <i>``). The contenders run one after another in this process, alternating
over ``--rounds`` (who goes first rotates); each fake runs in a child process of its own
(``--fake process``, the default: as with the real Bot API, the bot does not pay for the
server's CPU) or on the contender's own event loop (``--fake inline``).

    aiohttp floor        a minimal hand-written aiohttp loop: getUpdates, then the batch's
                         replies concurrently across chats (in order within a chat) with
                         asyncio.gather, waiting for the batch before the next poll
    aiohttp floor, pipelined
                         the same, but polling again at once while the replies are in
                         flight (each chat's replies chained after its earlier ones)
    chatkernel           a real kernel with the chatkernel_telegram plugin and the echo
                         agent: durable SQLite journal, queue mode followup with debounce 0,
                         max_concurrent 64, rate limits lifted, poll_timeout 1
    aiogram (default)    aiogram 3.x: Dispatcher + AiohttpSession pointed at the fake,
                         start_polling with its defaults (handle_as_tasks=True)
    aiogram (sequential) the same with handle_as_tasks=False (latency scenarios only)
    python-telegram-bot  22.x: Application.builder() with base_url / base_file_url pointed
                         at the fake, its defaults (concurrent_updates off),
                         initialize/start/updater.start_polling (run_polling, non-blocking)

Per run, from the fake's own records and clock: updates answered per second (N / time
from the contender's first getUpdates to its last echo), p50/p99 latency (each update's
first echo minus that same start: every update was already waiting), and per-chat order
violations (an echo whose index in its chat is lower than an earlier echo's, in the order
the fake recorded the sends). The table shows medians over the rounds, violations summed,
and the ratio to the floor: the faster of the two aiohttp loops in that scenario.

Two scenarios by default, as in the issue: no added latency with 3,000 updates, then
50 ms added to every call (``FakeBotAPI.latency``, as real round trips do) with 1,000.
Sequential contenders answer about one update per round trip there, so they get
``--sequential-updates`` (default 100) instead; the output says so.

    .venv/bin/python bench/telegram_echo.py                  # both scenarios, 3 rounds
    .venv/bin/python bench/telegram_echo.py --latency 0 --updates 3000 --rounds 5
    .venv/bin/python bench/telegram_echo.py --latency 0.05 --only chatkernel,aiogram
    .venv/bin/python bench/telegram_echo.py --latency 0 --only chatkernel --profile
    .venv/bin/python bench/telegram_echo.py --latency 0 --only chatkernel --profile k.prof
    .venv/bin/python bench/telegram_echo.py --latency 0 --only chatkernel --alone  # no floors

python-telegram-bot and aiogram are not dependencies of chatkernel: install them into the
venv for this benchmark only (bench/requirements.txt); a contender whose package cannot
be imported is skipped with a message. The floors and chatkernel always run, unless
``--alone`` (what bench/instructions.py runs: the contenders ``--only`` names, no table).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import importlib.util
import itertools
import json
import logging
import os
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from chatkernel_telegram.fake import FakeBotAPI

TOKEN = "123456:AAEchoBenchTokenForLoopbackOnly_abcdefgh"
CHAT_BASE = 10_000           # chat c is the private chat CHAT_BASE + c
ECHO = re.compile(r"chat (\d+) msg (\d+)")
STOP_TIMEOUT = 15.0          # bound on stopping a contender

# Targets from the issues (issue 31: 0.55x the floor, CPU per update at most 1.8x its).
ZERO_LATENCY_VS_AIOGRAM = 2.0
ZERO_LATENCY_VS_FLOOR = 0.55
LATENCY_VS_FLOOR = 0.8
CPU_VS_FLOOR = 1.8
# Measured on the reference machine (the issue), shown next to ours.
REFERENCE = {
    0.0: {"aiohttp floor": 6571, "aiogram (default)": 1181, "python-telegram-bot": 720},
    0.05: {"aiohttp floor": 1773, "aiogram (default)": 1121, "aiogram (sequential)": 19,
           "python-telegram-bot": 19},
}


# ---------------------------------------------------------------------------------------
# Contenders: each is an async context manager that runs a bot against the fake
# ---------------------------------------------------------------------------------------


class Fake(Protocol):
    """What a contender gets: where the fake Bot API listens, and the bot's token."""

    base_url: str
    token: str
    completed: bool    # set once every update was answered (before the contender stops)


@dataclass
class Contender:
    name: str
    start: Callable[[Fake], contextlib.AbstractAsyncContextManager[Any]]
    sequential: bool = False          # ~1 update per round trip: smaller N with latency
    latency_only: bool = False        # only in scenarios with added latency
    package: str | None = None        # skipped when this cannot be imported
    is_kernel: bool = False
    is_floor: bool = False
    always: bool = False              # runs whatever --only says


async def _bot_call(session: aiohttp.ClientSession, base: str, method: str,
                    payload: dict[str, Any]) -> Any:
    async with session.post(f"{base}/{method}", json=payload) as response:
        body = await response.json()
    if not body.get("ok"):
        raise RuntimeError(f"{method}: {body.get('description')}")
    return body["result"]


def _texts_by_chat(updates: list[dict[str, Any]]) -> dict[int, list[str]]:
    by_chat: dict[int, list[str]] = defaultdict(list)
    for update in updates:
        message = update.get("message")
        if message and "text" in message:
            by_chat[message["chat"]["id"]].append(message["text"])
    return by_chat


@contextlib.asynccontextmanager
async def aiohttp_floor(api: Fake, *, pipelined: bool = False) -> AsyncIterator[None]:
    """The least an echo bot can do on aiohttp: poll, answer, poll."""
    base = f"{api.base_url}/bot{api.token}"

    tails: dict[int, asyncio.Future[None]] = {}

    async def loop(session: aiohttp.ClientSession) -> None:
        offset = 0

        async def answer(chat_id: int, texts: list[str],
                         before: asyncio.Future[None] | None = None) -> None:
            if before is not None:
                await before
            for text in texts:   # in order within the chat
                await _bot_call(session, base, "sendMessage", {"chat_id": chat_id,
                                                               "text": text})

        while True:
            updates = await _bot_call(session, base, "getUpdates",
                                      {"offset": offset, "timeout": 10})
            if updates:
                offset = updates[-1]["update_id"] + 1
            by_chat = _texts_by_chat(updates)
            if not pipelined:
                await asyncio.gather(*(answer(c, t) for c, t in by_chat.items()))
                continue
            for chat_id, texts in by_chat.items():
                previous = tails.get(chat_id)
                if previous is not None and previous.done():
                    previous = None
                tails[chat_id] = asyncio.ensure_future(answer(chat_id, texts, previous))

    async with aiohttp.ClientSession() as session:
        task = asyncio.ensure_future(loop(session))
        try:
            yield
        finally:
            for pending in (task, *tails.values()):
                pending.cancel()
            await asyncio.gather(task, *tails.values(), return_exceptions=True)


@contextlib.asynccontextmanager
async def chatkernel_bot(api: Fake, *, home: Path, gc_tuning: bool = True
                         ) -> AsyncIterator[None]:
    """A real kernel: telegram plugin, echo agent, durable SQLite journal, and the
    collector settings ``chatkernel run`` applies once started (undone after)."""
    import anyio

    import chatkernel_telegram
    from chatkernel.core.gateway.gc_tuning import tune_for_serving
    from chatkernel.testing.memory import KernelHarness

    config = {
        "agent": {"kind": "echo"},
        "queue": {"mode": "followup", "debounce_ms": 0, "max_concurrent": 64},
        "channels": {"telegram": {
            "rate_limits": {"chat": "100000/s", "account": "100000/s", "group": "100000/s"},
            "accounts": {"main": {"bot_token": api.token, "api_base": api.base_url,
                                  "allow_from": ["*"], "poll_timeout": 1}}}},
    }
    async with KernelHarness(home, config=config,
                             plugins=[("telegram", chatkernel_telegram)]) as harness:
        kernel = harness.kernel
        channel = kernel.accounts["telegram:main"].channel
        restore_gc = tune_for_serving() if gc_tuning else (lambda: None)
        async with anyio.create_task_group() as tg:
            tg.start_soon(channel.run, kernel.receiver)
            try:
                yield
            finally:
                if getattr(api, "completed", False):
                    # Every echo is out: let the outbox marks settle, then check that no
                    # journal entry was left unfinished (a benchmark must not cheat).
                    with contextlib.suppress(TimeoutError):
                        await harness.settle(timeout=10)
                    await kernel.store.flush()
                    unfinished = await kernel.store.unfinished_inbound()
                    if unfinished:
                        print(f"    ! chatkernel left {len(unfinished)} journal entries "
                              "unfinished", flush=True)
                tg.cancel_scope.cancel()
                restore_gc()


@contextlib.asynccontextmanager
async def aiogram_bot(api: Fake, *, as_tasks: bool = True) -> AsyncIterator[None]:
    from aiogram import Bot, Dispatcher
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.client.telegram import TelegramAPIServer
    from aiogram.types import Message

    bot = Bot(api.token, session=AiohttpSession(api=TelegramAPIServer.from_base(api.base_url)))
    dp = Dispatcher()

    @dp.message()
    async def echo(message: Message) -> None:
        await message.answer(message.text)

    options: dict[str, Any] = {} if as_tasks else {"handle_as_tasks": False}
    task = asyncio.ensure_future(dp.start_polling(bot, handle_signals=False, **options))
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(dp.stop_polling(), STOP_TIMEOUT)
        if not task.done():
            task.cancel()
        with contextlib.suppress(BaseException):
            await task
        await bot.session.close()


@contextlib.asynccontextmanager
async def ptb_bot(api: Fake) -> AsyncIterator[None]:
    from telegram import Update
    from telegram.ext import Application, ContextTypes, MessageHandler, filters

    app = (Application.builder().token(api.token)
           .base_url(f"{api.base_url}/bot").base_file_url(f"{api.base_url}/file/bot")
           .build())

    async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        await update.message.reply_text(update.message.text)   # PTB's echobot example

    app.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, echo))
    await app.initialize()
    await app.start()
    await app.updater.start_polling()   # run_polling() without blocking or signals
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(app.updater.stop(), STOP_TIMEOUT)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(app.stop(), STOP_TIMEOUT)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(app.shutdown(), STOP_TIMEOUT)


def contenders(home: Path, *, gc_tuning: bool = True) -> list[Contender]:
    runs = itertools.count(1)
    return [
        Contender("aiohttp floor", lambda api: aiohttp_floor(api), is_floor=True, always=True),
        Contender("aiohttp floor, pipelined", lambda api: aiohttp_floor(api, pipelined=True),
                  always=True),
        Contender("chatkernel",
                  lambda api: chatkernel_bot(api, home=home / f"kernel-{next(runs)}",
                                             gc_tuning=gc_tuning),
                  is_kernel=True),
        Contender("aiogram (default)", lambda api: aiogram_bot(api), package="aiogram"),
        Contender("aiogram (sequential)", lambda api: aiogram_bot(api, as_tasks=False),
                  package="aiogram", sequential=True, latency_only=True),
        Contender("python-telegram-bot", ptb_bot, package="telegram", sequential=True),
    ]


# ---------------------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------------------


@dataclass
class Run:
    contender: str
    updates: int
    answered: int = 0
    elapsed: float = 0.0              # first getUpdates -> last reply (or the timeout)
    latencies: list[float] = field(default_factory=list)
    violations: int = 0
    duplicates: int = 0
    extra: int = 0                    # messages sent that are not echoes
    timed_out: bool = False
    error: str | None = None
    cpu: float = 0.0                  # this process's CPU seconds while it answered

    @property
    def cpu_per_update(self) -> float:
        """Microseconds of this process's CPU per answered update."""
        return self.cpu / self.answered * 1e6 if self.answered else float("nan")

    @property
    def rate(self) -> float:
        return self.answered / self.elapsed if self.elapsed > 0 else 0.0


def inject(api: FakeBotAPI, updates: int, chats: int) -> None:
    """Round robin: message 0 of every chat, then message 1, ... (all pending at once)."""
    counts = [0] * chats
    for n in range(updates):
        chat = n % chats
        api.inject_message(CHAT_BASE + chat, f"chat {chat} msg {counts[chat]}")
        counts[chat] += 1


def score(sent: list[tuple[int, str, float]], run: Run, started: float) -> None:
    """Answered, latencies and order violations from what the fake recorded, in the
    order it recorded it: (chat_id, visible text, time.time() of the send)."""
    highest: dict[int, int] = {}
    seen: set[tuple[int, int]] = set()
    last = started
    for chat_id, text, timestamp in sent:
        match = ECHO.fullmatch(text)
        if match is None or chat_id != CHAT_BASE + int(match[1]):
            run.extra += 1
            continue
        chat, index = int(match[1]), int(match[2])
        if (chat, index) in seen:
            run.duplicates += 1
            continue
        seen.add((chat, index))
        if index < highest.get(chat, -1):
            run.violations += 1
        highest[chat] = max(highest.get(chat, -1), index)
        run.latencies.append(timestamp - started)
        last = max(last, timestamp)
    run.answered = len(seen)
    if not run.timed_out and not run.error:
        run.elapsed = last - started


def echo_count(api: FakeBotAPI, memo: dict[str, Any]) -> int:
    """Echo replies so far (incremental: the fake's list only grows)."""
    sent = api.sent()
    for item in sent[memo.get("scanned", 0):]:
        if ECHO.fullmatch(item.plain_text or ""):
            memo["count"] = memo.get("count", 0) + 1
    memo["scanned"] = len(sent)
    return memo.get("count", 0)


def recorded(api: FakeBotAPI) -> dict[str, Any]:
    polls = api.calls_to("getUpdates")
    return {"first_poll": polls[0].when if polls else None,
            "sent": [(s.chat_id, s.plain_text or "", s.timestamp) for s in api.sent()]}


class InProcessFake:
    """The fake on this process's event loop: its CPU time is shared with the contender."""

    def __init__(self, updates: int, chats: int, latency: float) -> None:
        self.args = (updates, chats, latency)
        self.api: FakeBotAPI | None = None
        self.completed = False

    async def __aenter__(self) -> "InProcessFake":
        updates, chats, latency = self.args
        self.api = FakeBotAPI(token=TOKEN, username="echo_bench_bot")
        await self.api.__aenter__()
        self.api.disable_limits()
        self.api.latency = latency
        inject(self.api, updates, chats)
        self.base_url, self.token = self.api.base_url, self.api.token
        return self

    async def wait_complete(self, timeout: float) -> bool:
        assert self.api is not None
        memo: dict[str, Any] = {}
        deadline = time.monotonic() + timeout
        while echo_count(self.api, memo) < self.args[0]:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def results(self) -> dict[str, Any]:
        assert self.api is not None
        return recorded(self.api)

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self.api is not None
        await self.api.__aexit__(*exc_info)


class SubprocessFake:
    """The fake in a child process (``--serve-fake``), as the real Bot API is elsewhere:
    the contender has this process to itself."""

    def __init__(self, updates: int, chats: int, latency: float) -> None:
        self.args = (updates, chats, latency)
        self.completed = False
        self.proc: asyncio.subprocess.Process | None = None
        self._complete: asyncio.Future[bytes] | None = None

    async def __aenter__(self) -> "SubprocessFake":
        updates, chats, latency = self.args
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--serve-fake", "--updates", str(updates),
            "--chats", str(chats), "--latency", repr(latency),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=1 << 26)
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 60)
        if not line:
            raise RuntimeError("the fake Bot API process did not start")
        info = json.loads(line)
        self.base_url, self.token = info["base_url"], info["token"]
        self._complete = asyncio.ensure_future(self.proc.stdout.readline())
        return self

    async def wait_complete(self, timeout: float) -> bool:
        assert self._complete is not None
        done, _ = await asyncio.wait([self._complete], timeout=timeout)
        return bool(done) and self._complete.result().strip() == b"complete"

    async def results(self) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None
        assert self.proc.stdout is not None and self._complete is not None
        self.proc.stdin.write(b"stop\n")
        await self.proc.stdin.drain()
        line = await self._complete
        if line.strip() == b"complete":
            line = await self.proc.stdout.readline()
        return json.loads(line)

    async def __aexit__(self, *exc_info: Any) -> None:
        if self.proc is None:
            return
        if self.proc.returncode is None:
            with contextlib.suppress(Exception):
                self.proc.stdin.close()  # type: ignore[union-attr]
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self._complete is not None and not self._complete.done():
            self._complete.cancel()


async def serve_fake(updates: int, chats: int, latency: float) -> None:
    """Child process: a fresh fake with the updates injected; prints its address, then
    ``complete`` once every update has an echo, then (on ``stop``) what it recorded."""
    import anyio

    async with FakeBotAPI(token=TOKEN, username="echo_bench_bot") as api:
        api.disable_limits()
        api.latency = latency
        inject(api, updates, chats)
        print(json.dumps({"base_url": api.base_url, "token": api.token}), flush=True)
        async with anyio.create_task_group() as tg:
            async def watch() -> None:
                memo: dict[str, Any] = {}
                while echo_count(api, memo) < updates:
                    await anyio.sleep(0.02)
                print("complete", flush=True)

            tg.start_soon(watch)
            await anyio.to_thread.run_sync(sys.stdin.readline)
            tg.cancel_scope.cancel()
        print(json.dumps(recorded(api)), flush=True)


async def run_once(contender: Contender, updates: int, chats: int, latency: float,
                   timeout: float, profiler: cProfile.Profile | None,
                   fake_class: type = SubprocessFake) -> Run:
    run = Run(contender.name, updates)
    ended: float | None = None
    async with fake_class(updates, chats, latency) as fake:
        if profiler is not None:
            profiler.enable()
        try:
            async with contender.start(fake):
                cpu_started = time.process_time()
                fake.completed = await fake.wait_complete(timeout)
                run.cpu = time.process_time() - cpu_started
                run.timed_out = not fake.completed
                ended = time.time()
        except Exception as exc:  # noqa: BLE001 - one broken contender must not end the run
            run.error = f"{type(exc).__name__}: {exc}"
        finally:
            if profiler is not None:
                profiler.disable()
        ended = ended or time.time()
        data = await fake.results()
    started = data["first_poll"] or ended
    sent = data["sent"]
    if run.timed_out or run.error:
        run.elapsed = ended - started
        sent = [item for item in sent if item[2] <= ended]   # what came in time
    score(sent, run, started)
    return run


# ---------------------------------------------------------------------------------------
# Scenarios and the report
# ---------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q * len(ordered)) - 1))]


@dataclass
class Row:
    name: str
    updates: int
    runs: list[Run]

    @property
    def rate(self) -> float:
        return statistics.median(r.rate for r in self.runs)

    @property
    def p50(self) -> float:
        return statistics.median(percentile(r.latencies, 0.50) for r in self.runs) * 1000

    @property
    def p99(self) -> float:
        return statistics.median(percentile(r.latencies, 0.99) for r in self.runs) * 1000

    @property
    def cpu_per_update(self) -> float:
        return statistics.median(r.cpu_per_update for r in self.runs)

    @property
    def violations(self) -> int:
        return sum(r.violations for r in self.runs)

    @property
    def reordered_runs(self) -> int:
        return sum(1 for r in self.runs if r.violations)

    @property
    def complete(self) -> bool:
        return all(r.answered == r.updates and not r.timed_out and not r.error
                   for r in self.runs)


def scenario(latency: float, updates: int, sequential_updates: int, args,
             selected: list[Contender], profiler: cProfile.Profile | None) -> list[Row]:
    chosen = [c for c in selected if latency > 0 or not c.latency_only]
    n_for = {c.name: (min(updates, sequential_updates) if c.sequential and latency > 0
                      else updates) for c in chosen}
    print(f"\n== latency {latency * 1000:.0f} ms: {updates:,} updates over {args.chats} chats,"
          f" {args.rounds} round(s) ==", flush=True)
    results: dict[str, list[Run]] = {c.name: [] for c in chosen}
    for round_number in range(args.rounds):
        shift = round_number % len(chosen)          # rotate who goes first
        for contender in chosen[shift:] + chosen[:shift]:
            n = n_for[contender.name]
            # A fresh event loop per run: nothing one contender left behind slows the next.
            with asyncio.Runner() as runner:
                run = runner.run(run_once(
                    contender, n, args.chats, latency, args.timeout,
                    profiler if contender.is_kernel else None,
                    InProcessFake if args.fake == "inline" else SubprocessFake))
            results[contender.name].append(run)
            note = ""
            if run.timed_out:
                note = f"  TIMED OUT after {args.timeout:.0f}s"
            if run.error:
                note += f"  ERROR {run.error}"
            if run.duplicates or run.extra:
                note += f"  ({run.duplicates} duplicate, {run.extra} other messages)"
            print(f"  round {round_number + 1}  {contender.name:26} {run.answered:5}/{n:<5}"
                  f"{run.rate:9.0f}/s  order violations {run.violations:4}{note}", flush=True)
    return [Row(c.name, n_for[c.name], results[c.name]) for c in chosen]


def report(latency: float, updates: int, rows: list[Row], args) -> list[bool]:
    # The floor is the faster of the two hand-written loops in this scenario: batch
    # lock-step wins when requests are cheap, pipelining when round trips dominate.
    floors = [r for r in rows if r.name.startswith("aiohttp floor")]
    floor = max(floors, key=lambda r: r.rate) if floors else None
    reference = REFERENCE.get(round(latency, 3), {})
    print(f"\n-- latency {latency * 1000:.0f} ms, {updates:,} updates over {args.chats} chats, "
          f"median of {args.rounds} round(s) --")
    print(f"{'':27}{'updates':>8}{'upd/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'order':>7}"
          f"{'reord.':>8}{'x floor':>9}{'ref upd/s':>11}{'cpu us/upd':>11}{'x floor':>8}")
    for row in rows:
        ratio = row.rate / floor.rate if floor and floor.rate else float("nan")
        ref = reference.get(row.name)
        flag = "" if row.complete else "  incomplete (timeout/error)"
        mark = "*" if row is floor else " "
        print(f"{mark}{row.name:26}{row.updates:8}{row.rate:9.0f}{row.p50:9.1f}{row.p99:9.1f}"
              f"{row.violations:7}{row.reordered_runs:5}/{len(row.runs)}{ratio:9.2f}"
              f"{(f'{ref:,}' if ref else ''):>11}{row.cpu_per_update:11.0f}"
              f"{row.cpu_per_update / floor.cpu_per_update if floor else float('nan'):8.2f}"
              f"{flag}")
    smaller = [r for r in rows if r.updates != updates]
    if smaller:
        print(f"  ({', '.join(r.name for r in smaller)}: {smaller[0].updates} updates instead "
              f"of {updates:,} — sequential, about one update per round trip; see "
              "--sequential-updates)")
    print("  order = per-chat order violations summed over the rounds; reord. = rounds with "
          "any;\n  x floor = updates/s over the floor's (*: the faster aiohttp loop here); "
          "ref = the issue's reference machine;\n  cpu us/upd = this process's CPU time "
          "per update while answering (the fake's own process not included),\n  and its "
          "ratio to the floor's")

    kernel = next((r for r in rows if r.name == "chatkernel"), None)
    if kernel is None or floor is None:
        return []
    verdicts: list[bool] = []

    def target(text: str, ok: bool) -> None:
        verdicts.append(ok)
        print(f"  target: {text}: {'met' if ok else 'MISSED'}")

    strict = kernel.violations == 0 and kernel.complete
    if latency == 0:
        aiogram = next((r for r in rows if r.name == "aiogram (default)"), None)
        if aiogram is not None:
            target(f"chatkernel >= {ZERO_LATENCY_VS_AIOGRAM:g}x aiogram "
                   f"({kernel.rate:.0f} vs {ZERO_LATENCY_VS_AIOGRAM * aiogram.rate:.0f}/s)",
                   kernel.rate >= ZERO_LATENCY_VS_AIOGRAM * aiogram.rate)
        else:
            print("  target: chatkernel >= 2x aiogram: not checked (aiogram not installed)")
        target(f"chatkernel >= {ZERO_LATENCY_VS_FLOOR:g}x the floor "
               f"({kernel.rate:.0f} vs {ZERO_LATENCY_VS_FLOOR * floor.rate:.0f}/s)",
               kernel.rate >= ZERO_LATENCY_VS_FLOOR * floor.rate)
    else:
        target(f"chatkernel >= {LATENCY_VS_FLOOR:g}x the floor "
               f"({kernel.rate:.0f} vs {LATENCY_VS_FLOOR * floor.rate:.0f}/s)",
               kernel.rate >= LATENCY_VS_FLOOR * floor.rate)
    target(f"chatkernel's CPU per update <= {CPU_VS_FLOOR:g}x the floor's "
           f"({kernel.cpu_per_update:.0f} vs {floor.cpu_per_update:.0f} us)",
           kernel.cpu_per_update <= CPU_VS_FLOOR * floor.cpu_per_update)
    target("chatkernel answers every update with zero reordering inside a chat, durable "
           "journal on", strict)
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, action="append",
                        help="seconds the fake adds to every call; repeat for several "
                             "scenarios (default: 0 and 0.05)")
    parser.add_argument("--updates", type=int, default=None,
                        help="updates per scenario (default 3,000 without latency, "
                             "1,000 with)")
    parser.add_argument("--chats", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sequential-updates", type=int, default=100,
                        help="updates for the sequential contenders when latency > 0 "
                             "(default 100: one per chat, ~5 s each at ~19/s)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds one contender may take for one run (default 60)")
    parser.add_argument("--only", default="",
                        help="comma-separated substrings of contender names to run "
                             "(the floor always runs)")
    parser.add_argument("--profile", nargs="?", const="", metavar="FILE",
                        help="cProfile the chatkernel runs (whole process while they run): "
                             "print the top functions by cumulative and own time (and save "
                             "the profile to FILE)")
    parser.add_argument("--fake", choices=("process", "inline"), default="process",
                        help="run each fake Bot API in a child process (default: the "
                             "contender has this process to itself, as with the real Bot "
                             "API) or on the contender's own event loop")
    parser.add_argument("--no-gc-tuning", action="store_true",
                        help="run chatkernel with CPython's default collector settings "
                             "instead of those `chatkernel run` applies")
    parser.add_argument("--alone", action="store_true",
                        help="run only what --only names, without the floors, and print no "
                             "table (bench/instructions.py counts one contender's "
                             "instructions)")
    parser.add_argument("--serve-fake", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        asyncio.run(serve_fake(args.updates, args.chats, (args.latency or [0.0])[0]))
        return
    logging.disable(logging.WARNING)
    latencies = args.latency or [0.0, 0.05]

    with tempfile.TemporaryDirectory(prefix="telegram-echo-") as tmp:
        selected = []
        for contender in contenders(Path(tmp), gc_tuning=not args.no_gc_tuning):
            wanted = [w.strip() for w in args.only.split(",") if w.strip()]
            if wanted and not any(w.lower() in contender.name.lower() for w in wanted) \
                    and (args.alone or not (contender.is_floor or contender.always)):
                continue
            if contender.package and importlib.util.find_spec(contender.package) is None:
                print(f"skipping {contender.name}: the package {contender.package!r} is not "
                      "installed (pip install -r bench/requirements.txt)")
                continue
            selected.append(contender)
        versions = ", ".join(versions_of(selected))
        print(f"Telegram echo against the fake Bot API on loopback (Python "
              f"{sys.version.split()[0]} at {os.path.realpath(sys.executable)}; {versions}; "
              f"fake: {args.fake})")
        with contextlib.suppress(OSError):
            load = Path("/proc/loadavg").read_text().split()[:3]
            print(f"load average before the run: {' '.join(load)} on {os.cpu_count()} CPUs "
                  "(other busy processes skew these numbers)")
        profiler = cProfile.Profile() if args.profile is not None else None
        verdicts: list[bool] = []
        summaries = []
        for latency in latencies:
            updates = args.updates or (3000 if latency == 0 else 1000)
            rows = scenario(latency, updates, args.sequential_updates, args, selected,
                            profiler)
            summaries.append((latency, updates, rows))
        for latency, updates, rows in summaries if not args.alone else ():
            verdicts += report(latency, updates, rows, args)
        if profiler is not None:
            from profiling import report as profile_report

            answered = sum(r.answered for _, _, rows in summaries for row in rows
                           if row.name == "chatkernel" for r in row.runs)
            profile_report(profiler, answered, path=args.profile or None)
    if verdicts:
        print(f"\n{'all targets met' if all(verdicts) else 'some targets MISSED'}")


def versions_of(selected: list[Contender]) -> list[str]:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for dist in ("aiohttp", "aiogram", "python-telegram-bot"):
        if dist != "aiohttp" and not any(
                c.package == {"aiogram": "aiogram", "python-telegram-bot": "telegram"}[dist]
                for c in selected):
            continue
        with contextlib.suppress(PackageNotFoundError):
            out.append(f"{dist} {version(dist)}")
    return out


if __name__ == "__main__":
    main()
