"""End-to-end Slack echo over the Events API (HTTP): chatkernel next to a floor and slack_bolt.

Each run starts a fresh :class:`chatkernel_slack.fake.FakeSlack` in events mode in a child
process (as Slack is elsewhere: the bot does not pay for its CPU), with ``--messages``
messages over ``--channels`` conversations (half DMs, half channels; round robin, each
text ``chat <c> msg <i>``) waiting. Once the contender's server is up, the fake makes the
``url_verification`` handshake with it and POSTs the events, signed (``X-Slack-Signature``
v0 over ``v0:<timestamp>:<body>``), ``--workers`` requests at a time (each conversation's
one after another, in order); each contender echoes every message with
``chat.postMessage``. The bot's own posts come back as events, as Slack sends them; every
contender ignores them.

    floor        a minimal hand-written aiohttp handler: the signature and its timestamp
                 checked over the raw bytes (hmac.compare_digest), the JSON parsed, the
                 echo started (chained per conversation, so each keeps its order), 200 at
                 once; nothing journaled, nothing deduplicated
    floor-journaled
                 the floor with the kernel's guarantees hand-written
                 (common.GroupJournal): each new message event journaled before its 200
                 (one commit for the requests of one event-loop turn), a retried one not
                 answered again, each echo claimed durably before it is sent and marked
                 sent after; what the guarantees cost without the kernel
    chatkernel   a real kernel with chatkernel_slack in events mode and the echo agent,
                 served by the gateway's own app and listener (the HTTP guard included):
                 every event journaled (SQLite, durable) before its 200; queue mode followup,
                 debounce 0, max_concurrent 64, rate limits lifted, its working status at
                 its default (on)
    slack_bolt   slack_bolt 1.30 ``AsyncApp`` in its HTTP mode as its docs show it
                 (``app.web_app()``, aiohttp): ``@app.event("message")`` -> ``await
                 say(text=...)``; skipped when slack_bolt is not installed

Per run: messages answered per second (N / the time from the handshake to the last first
echo), p50/p99 latency (each message's first echo minus that moment), duplicates, order
violations (per conversation, in the order the fake recorded the posts), events Slack had
to send again (a non-2xx or no answer within 3 s) and this process's CPU per answered
message. Medians over ``--rounds`` (the contenders' order rotates each round); ratios to
the floor (rate, CPU per message).

    .venv/bin/python bench/slack_events_echo.py
    .venv/bin/python bench/slack_events_echo.py --rounds 5 --only floor,chatkernel
    .venv/bin/python bench/slack_events_echo.py --only chatkernel --rounds 1 --profile chatkernel
    .venv/bin/python bench/slack_events_echo.py --only floor --rounds 1 --profile floor --profile-with yappi
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import hashlib
import hmac
import importlib.util
import json
import platform
import re
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from common import GroupJournal, percentile, print_beside, serve
from profiling import append_top, make_profiler

ECHO = re.compile(r"chat (\d+) msg (\d+)")


def conversation(c: int, channels: int) -> str:
    """Half the conversations are DMs (D…), half channels (C…)."""
    return f"D0BENCH{c:04d}" if c < (channels + 1) // 2 else f"C0BENCH{c:04d}"


# -- the fake, in a child process ----------------------------------------------------------


async def serve_fake(messages: int, channels: int, workers: int) -> None:
    """Child process: a fresh fake in events mode with every message waiting; prints its
    address and secrets; on ``stop`` (stdin) prints what it recorded."""
    import anyio

    from chatkernel_slack.fake import FakeSlack

    async with FakeSlack(mode="events", extra_routes=FakeSlack.developer_routes) as slack:
        slack.events_workers = workers
        for i in range(messages // channels + 1):
            for c in range(channels):
                if i * channels + c < messages:
                    slack.inject_message(conversation(c, channels), f"chat {c} msg {i}",
                                         user=f"U0BENCH{c:04d}")
        print(json.dumps({"base_url": slack.base_url, "bot_token": slack.bot_token,
                          "signing_secret": slack.signing_secret}), flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        print(json.dumps({
            "sent": [[m.channel, m.text, m.at] for m in slack.sent()],
            "redelivered": sum(1 for retry, _, _ in slack.deliveries if retry),
            "dropped": len(slack.dropped)}), flush=True)


class Fake:
    """The child's fake: its address, and its developer routes."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    async def __aenter__(self) -> "Fake":
        args = self.args
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--serve-fake", "--messages", str(args.messages),
            "--channels", str(args.channels), "--workers", str(args.workers),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=1 << 26)
        assert self.proc.stdout is not None
        info = json.loads(await asyncio.wait_for(self.proc.stdout.readline(), 60))
        self.base_url, self.bot_token = info["base_url"], info["bot_token"]
        self.signing_secret = info["signing_secret"]
        self.api_base = f"{self.base_url}/api/"
        self.http = aiohttp.ClientSession()
        self.read, self.echoed = 0, set()
        return self

    async def subscribe(self, url: str) -> bool:
        async with self.http.post(f"{self.base_url}/_fake/request_url",
                                  json={"url": url}) as answer:
            return (await answer.json())["verified"]

    async def answered(self) -> int:
        """How many messages have an echo: each poll asks only for the posts after
        those it has read (the poll's own CPU counts as the contender's)."""
        async with self.http.get(f"{self.base_url}/_fake/sent",
                                 params={"after": str(self.read)}) as answer:
            sent = (await answer.json())["messages"]
        self.read += len(sent)
        self.echoed.update(m["text"] for m in sent if ECHO.fullmatch(m["text"] or ""))
        return len(self.echoed)

    async def results(self) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(b"stop\n")
        await self.proc.stdin.drain()
        return json.loads(await asyncio.wait_for(self.proc.stdout.readline(), 60))

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.http.close()
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()


# -- the contenders -----------------------------------------------------------------------


@contextlib.asynccontextmanager
async def floor(fake: Fake, home: Path, notes: dict[str, Any], *,
                journaled: bool = False) -> AsyncIterator[str]:
    """The least an Events API echo does: verify, parse, 200, echo. ``journaled``: and
    the kernel's guarantees hand-written (common.GroupJournal): every new message event
    journaled before the 200, a retried one not answered again, each echo claimed
    durably before it is sent and marked sent after."""
    secret = fake.signing_secret.encode()
    http = aiohttp.ClientSession(headers={"Authorization": f"Bearer {fake.bot_token}"},
                                 connector=aiohttp.TCPConnector(limit=100))
    chains: dict[str, asyncio.Future[None]] = {}
    tasks: set[asyncio.Task[None]] = set()
    store = GroupJournal(home / "floor.db") if journaled else None

    async def echo(after: asyncio.Future[None] | None, channel: str, text: str,
                   event_id: str) -> None:
        if after is not None:
            await after
        claim = await store.claim(event_id) if store is not None else 0
        async with http.post(f"{fake.api_base}chat.postMessage",
                             json={"channel": channel, "text": text}) as answer:
            await answer.read()
        if store is not None:
            store.sent(claim, event_id)

    async def events(request: web.Request) -> web.Response:
        raw = await request.read()
        stamp = request.headers.get("X-Slack-Request-Timestamp", "")
        given = request.headers.get("X-Slack-Signature", "")
        if not stamp.isdigit() or abs(time.time() - int(stamp)) > 300:
            return web.Response(status=401)
        expected = "v0=" + hmac.new(secret, b"v0:" + stamp.encode() + b":" + raw,
                                    hashlib.sha256).hexdigest()
        if not hmac.compare_digest(given.encode(), expected.encode()):
            return web.Response(status=401)
        payload = json.loads(raw)
        if payload.get("type") == "url_verification":
            return web.json_response({"challenge": payload.get("challenge")})
        event = payload.get("event") or {}
        if event.get("type") == "message" and not event.get("bot_id") \
                and not event.get("subtype"):
            channel, text, event_id = event["channel"], event["text"], payload["event_id"]
            if store is not None:
                new = store.add(event_id, text)
                await store.durable()
                if not new:
                    return web.Response()  # a retry: answered once already
            task = asyncio.ensure_future(echo(chains.get(channel), channel, text, event_id))
            chains[channel] = task
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        return web.Response()

    app = web.Application()
    app.router.add_post("/slack/events", events)
    async with serve(app) as base:
        try:
            yield f"{base}/slack/events"
        finally:
            for task in list(tasks):
                task.cancel()
            await http.close()
            if store is not None:
                store.close()


@contextlib.asynccontextmanager
async def chatkernel(fake: Fake, home: Path, notes: dict[str, Any]) -> AsyncIterator[str]:
    """A real kernel, served as ``chatkernel run`` serves it."""
    import anyio

    import chatkernel_slack
    from chatkernel.core.gateway import http_server
    from chatkernel.core.gateway.gc_tuning import tune_for_serving
    from chatkernel.core.gateway.process import HANDLER_ARGS, build_app
    from chatkernel.testing.memory import KernelHarness

    account = {"mode": "events", "bot_token": fake.bot_token,
               "signing_secret": fake.signing_secret, "api_base": fake.api_base,
               "allow_from": ["*"], "require_mention": False, "channel_replies": "channel"}
    config = {"agent": {"kind": "echo"},
              "queue": {"mode": "followup", "debounce_ms": 0, "max_concurrent": 64},
              "channels": {"slack": {
                  "rate_limits": {"chat": "100000/s", "account": "100000/s"},
                  "accounts": {"main": account}}}}
    async with KernelHarness(home, config=config,
                             plugins=[("slack", chatkernel_slack)]) as harness:
        kernel = harness.kernel
        transport = kernel.accounts["slack:main"].transport
        runner = web.AppRunner(build_app(kernel, "bench-control-token"), handle_signals=False,
                               **HANDLER_ARGS)
        await runner.setup()
        site = http_server.GuardedSite(runner, "127.0.0.1", 0, handler_args=HANDLER_ARGS,
                                       limits=http_server.ConnectionLimits())
        await site.start()
        restore_gc = tune_for_serving()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(transport.run, kernel.receiver)
                while not transport.accepting:
                    await anyio.sleep(0.01)
                commits = kernel.store.commits
                try:
                    yield f"{site.name}{transport.path}"
                    notes["commits"] = kernel.store.commits - commits
                    with contextlib.suppress(TimeoutError):
                        await harness.settle(timeout=10)
                    await kernel.store.flush()
                    unfinished = await kernel.store.unfinished_inbound()
                    if unfinished:
                        print(f"    ! chatkernel left {len(unfinished)} journal entries "
                              "unfinished", flush=True)
                finally:
                    tg.cancel_scope.cancel()
        finally:
            restore_gc()
            await runner.cleanup()


@contextlib.asynccontextmanager
async def slack_bolt(fake: Fake, home: Path, notes: dict[str, Any]) -> AsyncIterator[str]:
    """slack_bolt's AsyncApp in HTTP mode, as its docs show it."""
    import logging

    from slack_bolt.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    quiet = logging.getLogger("bench.slack_bolt")
    quiet.setLevel(logging.CRITICAL)
    quiet.propagate = False
    app = AsyncApp(signing_secret=fake.signing_secret, logger=quiet,
                   client=AsyncWebClient(token=fake.bot_token, base_url=fake.api_base))

    @app.event("message")
    async def echo(event: dict[str, Any], say: Any) -> None:
        if not event.get("bot_id"):
            await say(text=event["text"])

    async with serve(app.web_app(path="/slack/events")) as base:
        yield f"{base}/slack/events"


CONTENDERS: dict[str, Callable[..., Any]] = {
    "floor": floor, "floor-journaled": functools.partial(floor, journaled=True),
    "chatkernel": chatkernel, "slack_bolt": slack_bolt}
NEEDS = {"slack_bolt": "slack_bolt"}


# -- one run --------------------------------------------------------------------------------


async def run_once(name: str, args: argparse.Namespace) -> dict[str, Any]:
    notes: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        async with Fake(args) as fake:
            async with CONTENDERS[name](fake, Path(tmp), notes) as url:
                profiler = make_profiler(args.profile_with) if args.profile == name else None
                if profiler is not None:
                    profiler.enable()
                wall, cpu = time.time(), time.process_time()
                if not await fake.subscribe(url):
                    raise SystemExit(f"{name}: the url_verification handshake failed")
                deadline = time.monotonic() + args.timeout
                while await fake.answered() < args.messages and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                cpu = time.process_time() - cpu
                if profiler is not None:
                    profiler.disable()
                    append_top(profiler, f"{name}: {args.messages} messages, "
                               f"{args.workers} requests at a time",
                               args.profile_out, args.profile_top, messages=args.messages)
                    print(f"    profile of {name} appended to {args.profile_out}", flush=True)
                await asyncio.sleep(0.2)  # late duplicates would show now
            results = await fake.results()
    result = score(name, results, wall, args)
    result["cpu_us"] = cpu / max(1, result["answered"]) * 1e6
    result["commits"] = notes.get("commits")
    return result


def score(name: str, results: dict[str, Any], wall: float,
          args: argparse.Namespace) -> dict[str, Any]:
    first: dict[tuple[int, int], float] = {}
    counts: dict[tuple[int, int], int] = {}
    last: dict[int, int] = {}
    violations = 0
    for _channel, text, at in results["sent"]:
        found = ECHO.fullmatch(text or "")
        if found is None:
            continue
        key = (int(found[1]), int(found[2]))
        counts[key] = counts.get(key, 0) + 1
        first.setdefault(key, at)
        if key[1] < last.get(key[0], -1):
            violations += 1
        last[key[0]] = max(key[1], last.get(key[0], -1))
    latencies = sorted(max(0.0, at - wall) for at in first.values())
    end = max(first.values(), default=wall) - wall
    return {"name": name, "answered": len(first),
            "rate": len(first) / end if end > 0 else 0.0,
            "p50": percentile(latencies, 0.5), "p99": percentile(latencies, 0.99),
            "duplicates": sum(c - 1 for c in counts.values() if c > 1), "order": violations,
            "redelivered": results["redelivered"], "dropped": results["dropped"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--channels", type=int, default=50)
    parser.add_argument("--workers", type=int, default=32,
                        help="event requests the fake has in flight at once")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--only", default=",".join(CONTENDERS))
    parser.add_argument("--profile", metavar="NAME", choices=tuple(CONTENDERS))
    parser.add_argument("--profile-out", default="slack_events_echo.prof.txt")
    parser.add_argument("--profile-top", type=int, default=30)
    parser.add_argument("--profile-with", choices=("cprofile", "yappi"), default="cprofile",
                        help="yappi: exact Python calls a message instead of cProfile's "
                             "timings (pip install yappi)")
    parser.add_argument("--serve-fake", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        asyncio.run(serve_fake(args.messages, args.channels, args.workers))
        return
    names = []
    for name in (n for n in args.only.split(",") if n):
        if name not in CONTENDERS:
            parser.error(f"--only: no contender {name!r} (there are {', '.join(CONTENDERS)})")
        if name in NEEDS and importlib.util.find_spec(NEEDS[name]) is None:
            print(f"{name} skipped: it is not installed (bench/requirements.txt)")
            continue
        names.append(name)
    print(f"python {platform.python_version()}; {args.messages} messages over "
          f"{args.channels} conversations, {args.workers} requests at a time, "
          f"{args.rounds} rounds", flush=True)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for round_number in range(args.rounds):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            result = asyncio.run(run_once(name, args))
            results[name].append(result)
            commits = f"  commits {result['commits']}" if result["commits"] is not None else ""
            print(f"  round {round_number + 1} {name:10} {result['rate']:8.0f} msg/s  "
                  f"p50 {result['p50'] * 1000:6.0f} ms  p99 {result['p99'] * 1000:6.0f} ms  "
                  f"cpu {result['cpu_us']:5.0f} us/msg  answered {result['answered']}  "
                  f"dup {result['duplicates']}  order {result['order']}  "
                  f"redelivered {result['redelivered']}{commits}", flush=True)
    base = results.get("floor")
    floor_rate = statistics.median(r["rate"] for r in base) if base else None
    floor_cpu = statistics.median(r["cpu_us"] for r in base) if base else None
    print("\n| contender | messages/s | × floor | CPU µs/msg | CPU × floor | p50 ms | p99 ms "
          "| answered | duplicates | order violations | redelivered |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, rows in results.items():
        rate = statistics.median(r["rate"] for r in rows)
        cpu = statistics.median(r["cpu_us"] for r in rows)
        print(f"| {name} | {rate:.0f} | {f'{rate / floor_rate:.2f}' if floor_rate else '—'} | "
              f"{cpu:.0f} | {f'{cpu / floor_cpu:.2f}' if floor_cpu else '—'} | "
              f"{statistics.median(r['p50'] for r in rows) * 1000:.0f} | "
              f"{statistics.median(r['p99'] for r in rows) * 1000:.0f} | "
              f"{min(r['answered'] for r in rows)} | {sum(r['duplicates'] for r in rows)} | "
              f"{sum(r['order'] for r in rows)} | {sum(r['redelivered'] for r in rows)} |")
    print_beside(results, "chatkernel", "floor-journaled")


if __name__ == "__main__":
    main()
