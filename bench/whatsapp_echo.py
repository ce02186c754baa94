"""End-to-end WhatsApp echo: chatkernel next to a minimal aiohttp webhook echo (the floor)
and pywa, the peer library, in the same run.

Each run starts a fresh :class:`chatkernel_whatsapp.fake.FakeGraph` on 127.0.0.1 (rate
limits and statuses off) and queues ``--messages`` messages from ``--users`` users at once
(round robin: message 0 of every user, then message 1...; each text is ``u<user> m<i>``),
``--per-notification`` messages to a notification. The fake, as Meta does, posts them to
the contender's webhook signed with ``X-Hub-Signature-256``, ``--workers`` notifications
at a time (in order per user), retrying anything but a 2xx; the contender echoes each
message's text back with ``POST /{phone-number-id}/messages``.

    floor        a minimal hand-written aiohttp webhook: the HMAC checked over the raw
                 bytes (hmac.compare_digest), the JSON parsed, every message's echo
                 started (chained per user, so each user's stay in order), 200 at once;
                 nothing is journaled, nothing deduplicated
    floor-journaled
                 the floor with the kernel's guarantees hand-written
                 (common.GroupJournal): each new message journaled before the 200 (one
                 commit for the requests of one event-loop turn), a redelivered one not
                 answered again, each echo claimed durably before it is sent and marked
                 sent after; what the guarantees cost without the kernel
    chatkernel   a real kernel with the chatkernel_whatsapp plugin and the echo agent, its
                 webhook route on an aiohttp server as the gateway mounts it: every
                 message journaled (SQLite, durable) before its 200, queue mode followup
                 with debounce 0, max_concurrent 64, rate limits lifted, the read receipt
                 with the typing indicator on (the channel's default: turns that reply
                 within its indicator_delay show no typing, and a chat's burst of them
                 makes one read receipt). ``--mount gateway`` (the default): the app and listener
                 ``chatkernel run`` serves (core/gateway/process.py build_app: the HTTP
                 guard, the health and control routes, GuardedSite); ``--mount bare``: only
                 the channel's routes on a plain aiohttp app
    pywa         pywa_async (skipped when it is not installed: bench/requirements.txt) in
                 the webhook mode its docs give for a server of one's own: the aiohttp
                 server of the floor hands the raw body and ``X-Hub-Signature-256`` to
                 ``webhook_update_validator`` and ``webhook_update_handler``, whose
                 ``@on_message`` handler ``await msg.reply(text)``s before the 200; its
                 httpx client pointed at the fake

The contenders alternate over ``--rounds`` (who goes first rotates), each on a fresh fake
in a child process of its own (``--fake process``, the default: as with Meta, the bot does
not pay for the platform's CPU; the devserver's developer routes queue the messages before
the webhook is verified, then the fake posts them) or on the contender's event loop
(``--fake inline``). Per run, from the fake's records:
messages echoed per second (N / time from the first push to the last echo), p50/p99
latency (each message's first echo minus the start: every message was already queued),
duplicates (echoes beyond one per message), order violations (an echo whose index in its
user's messages is lower than an earlier echo's), and the CPU time of this process per
answered message (``time.process_time`` from the subscription to the last echo: the
contender's, not the fake's when it runs in its own process). chatkernel's run also checks
that the journal holds every message and left none unfinished, and counts the store's
commits. The table shows medians over the rounds and the ratios to the floor (rate, and
CPU per message).

``--profile NAME`` runs NAME under cProfile over each of its runs (from the subscription
to the last echo) and writes the top functions by cumulative and by own time to
``--profile-out`` (the profiler slows the run: its rates are not comparable);
``--profile-with yappi`` counts the Python calls a message instead, by where they run
(bench/profiling.py).

    .venv/bin/python bench/whatsapp_echo.py
    .venv/bin/python bench/whatsapp_echo.py --messages 2000 --users 200 --rounds 3
    .venv/bin/python bench/whatsapp_echo.py --per-notification 10
    .venv/bin/python bench/whatsapp_echo.py --only chatkernel --rounds 1 --profile chatkernel
    .venv/bin/python bench/whatsapp_echo.py --only floor --rounds 1 --profile floor \\
        --profile-with yappi
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import hashlib
import hmac
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import anyio
from aiohttp import web

from chatkernel_whatsapp.fake import FakeGraph
from common import GroupJournal, percentile, print_beside, serve
from profiling import append_top, make_profiler

APP_SECRET = "bench-app-secret"
VERIFY_TOKEN = "bench-verify-token"


# -- the contenders ---------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def floor(graph: Target, home: Path, journal: dict[str, int], *,
                journaled: bool = False) -> AsyncIterator[str]:
    """The least a webhook echo does: verify, parse, reply, 200. ``journaled``: and the
    kernel's guarantees hand-written (common.GroupJournal): every new message journaled
    before the 200, a redelivered one not answered again, each echo claimed durably
    before it is sent and marked sent after."""
    secret = APP_SECRET.encode()
    url = f"{graph.base_url}/{graph.version}/{graph.phone_number_id}/messages"
    http = aiohttp.ClientSession(headers={"Authorization": f"Bearer {graph.token}"},
                                 connector=aiohttp.TCPConnector(limit=100))
    chains: dict[str, asyncio.Future[None]] = {}
    tasks: set[asyncio.Task[None]] = set()
    store = GroupJournal(home / "floor.db") if journaled else None

    async def echo(after: asyncio.Future[None] | None, to: str, text: str,
                   message_id: str) -> None:
        if after is not None:
            await after
        claim = await store.claim(message_id) if store is not None else 0
        body = {"messaging_product": "whatsapp", "recipient_type": "individual", "to": to,
                "type": "text", "text": {"body": text}}
        async with http.post(url, json=body) as answer:
            await answer.read()
        if store is not None:
            store.sent(claim, message_id)

    async def webhook(request: web.Request) -> web.Response:
        raw = await request.read()
        given = request.headers.get("X-Hub-Signature-256", "")
        expected = "sha256=" + hmac.new(secret, raw, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(given.encode(), expected.encode()):
            return web.Response(status=403)
        payload = json.loads(raw)
        new = []
        for entry in payload.get("entry", []):
            for change in entry.get("changes", []):
                for message in change.get("value", {}).get("messages", []):
                    user, text = message["from"], message["text"]["body"]
                    if store is not None and not store.add(message["id"], text):
                        continue  # a redelivery: answered once already
                    new.append((user, text, message["id"]))
        if store is not None:
            await store.durable()
        for user, text, message_id in new:
            task = asyncio.ensure_future(echo(chains.get(user), user, text, message_id))
            chains[user] = task
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        return web.json_response({"ok": True})

    async def handshake(request: web.Request) -> web.Response:
        query = request.query
        if query.get("hub.mode") == "subscribe" and hmac.compare_digest(
                query.get("hub.verify_token", "").encode(), VERIFY_TOKEN.encode()):
            return web.Response(text=query.get("hub.challenge", ""))
        return web.Response(status=403)

    app = web.Application()
    app.router.add_post("/webhook", webhook)
    app.router.add_get("/webhook", handshake)
    async with serve(app) as base:
        try:
            commits_before = store.commits if store is not None else 0
            yield f"{base}/webhook"
            if store is not None:
                journal["commits"] = store.commits - commits_before
        finally:
            for task in list(tasks):
                task.cancel()
            await http.close()
            if store is not None:
                journal["journaled"] = store.journaled()
                store.close()


@contextlib.asynccontextmanager
async def chatkernel(graph: Target, home: Path, journal: dict[str, int], *,
                     mount: str = "gateway") -> AsyncIterator[str]:
    """A real kernel: the whatsapp plugin, the echo agent, the durable SQLite journal,
    the webhook route served as ``chatkernel run`` serves it (``mount``: "gateway") or
    on a bare aiohttp app ("bare"), the gateway's collector settings."""
    import chatkernel_whatsapp
    from chatkernel.core.gateway import http_server
    from chatkernel.core.gateway.gc_tuning import tune_for_serving
    from chatkernel.core.gateway.process import HANDLER_ARGS, build_app
    from chatkernel.testing.memory import KernelHarness

    config = {
        "agent": {"kind": "echo"},
        "queue": {"mode": "followup", "debounce_ms": 0, "max_concurrent": 64},
        "channels": {"whatsapp": {
            "rate_limits": {"chat": "100000/s", "account": "100000/s"},
            "accounts": {"main": {"access_token": graph.token,
                                  "phone_number_id": graph.phone_number_id,
                                  "app_secret": APP_SECRET, "verify_token": VERIFY_TOKEN,
                                  "api_base": graph.base_url, "allow_from": ["*"]}}}},
    }
    async with KernelHarness(home, config=config,
                             plugins=[("whatsapp", chatkernel_whatsapp)]) as harness:
        kernel = harness.kernel
        account = kernel.accounts["whatsapp:main"]
        # bench/compare.py runs this harness on earlier commits too, where the channel
        # was its own webhook transport (before chatkernel.sdk.receiving).
        transport = getattr(account, "transport", None) or _OwnTransport(account.channel)
        if mount == "gateway":
            app = build_app(kernel, "bench-control-token")
            runner = web.AppRunner(app, handle_signals=False, **HANDLER_ARGS)
            await runner.setup()
            site = http_server.GuardedSite(runner, "127.0.0.1", 0, handler_args=HANDLER_ARGS,
                                           limits=http_server.ConnectionLimits())
            await site.start()
            served: contextlib.AbstractAsyncContextManager[str] = _started(runner, site.name)
        else:
            app = web.Application()
            for method, path, handler in transport.http_routes():
                app.router.add_route(method, path, handler)
            served = serve(app)
        restore_gc = tune_for_serving()
        async with served as base, anyio.create_task_group() as tg:
            tg.start_soon(transport.run, kernel.receiver)
            while not transport.accepting:
                await anyio.sleep(0.01)
            commits_before = getattr(kernel.store, "commits", 0)
            try:
                yield f"{base}{transport.path}"
                journal["commits"] = getattr(kernel.store, "commits", 0) - commits_before
                with contextlib.suppress(TimeoutError):
                    await harness.settle(timeout=10)
                await kernel.store.flush()
                unfinished = await kernel.store.unfinished_inbound()
                if unfinished:
                    print(f"    ! chatkernel left {len(unfinished)} journal entries unfinished")
            finally:
                tg.cancel_scope.cancel()
                restore_gc()
    db = sqlite3.connect(home / "state.db")
    journaled = db.execute("SELECT COUNT(*) FROM inbound_journal").fetchone()[0]
    db.close()
    journal["journaled"] = journaled


class _OwnTransport:
    """A channel that is its own webhook transport (commits before
    chatkernel.sdk.receiving), seen as the transport this harness drives."""

    def __init__(self, channel: Any) -> None:
        self.channel = channel

    def http_routes(self) -> Any:
        return self.channel.http_routes()

    async def run(self, deliver: Any) -> None:
        await self.channel.run(deliver)

    @property
    def accepting(self) -> bool:
        return self.channel.webhook_deliver is not None

    @property
    def path(self) -> str:
        return self.channel.webhook_path


@contextlib.asynccontextmanager
async def _started(runner: web.AppRunner, base: str) -> AsyncIterator[str]:
    try:
        yield base
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def pywa(graph: Target, home: Path, journal: dict[str, int]) -> AsyncIterator[str]:
    """pywa_async as its docs show a webhook on a server of one's own: the raw body and
    the signature header handed to the client, an ``@on_message`` handler replying."""
    import httpx
    from pywa_async import WhatsApp, types, utils

    session = httpx.AsyncClient(limits=httpx.Limits(max_connections=100))
    wa = WhatsApp(phone_id=graph.phone_number_id, token=graph.token, session=session,
                  verify_token=VERIFY_TOKEN, app_secret=APP_SECRET,
                  api_version=graph.version.removeprefix("v"),
                  # replies go "to" the phone number (the fake takes no BSUID "recipient")
                  user_identifier_priority=(utils.UserIdentifier.WA_ID,
                                            utils.UserIdentifier.BSUID,
                                            utils.UserIdentifier.PARENT_BSUID))
    session.base_url = f"{graph.base_url}/{graph.version}"  # the fake, not graph.facebook.com

    @wa.on_message()
    async def echo(_: WhatsApp, message: types.Message) -> None:
        await message.reply(message.text)

    async def webhook(request: web.Request) -> web.Response:
        raw = await request.read()
        refused = await wa.webhook_update_validator(raw, request.headers.get(utils.HUB_SIG))
        if refused is not None:
            return web.Response(text=refused[0], status=refused[1])
        text, status = await wa.webhook_update_handler(raw)
        return web.Response(text=text, status=status)

    async def handshake(request: web.Request) -> web.Response:
        text, status = await wa.webhook_challenge_handler(
            vt=request.query.get(utils.HUB_VT), ch=request.query.get(utils.HUB_CH))
        return web.Response(text=text or "", status=status)

    app = web.Application()
    app.router.add_post("/webhook", webhook)
    app.router.add_get("/webhook", handshake)
    try:
        async with serve(app) as base:
            yield f"{base}/webhook"
    finally:
        await session.aclose()


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


CONTENDERS: dict[str, Callable[..., Any]] = {
    "floor": floor, "floor-journaled": functools.partial(floor, journaled=True),
    "chatkernel": chatkernel, "pywa": pywa}
#: The module a contender needs beyond the project's own (skipped when missing).
NEEDS = {"pywa": "pywa_async"}


# -- one run ------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def fake_graph(args: argparse.Namespace) -> AsyncIterator[dict[str, Any]]:
    """The fake Graph API in a process of its own (``--fake process``: as with Meta, the
    bot does not pay for the platform's CPU), or on this event loop (``inline``)."""
    if args.fake == "inline":
        async with FakeGraph(app_secret=APP_SECRET, verify_token=VERIFY_TOKEN,
                             webhook_workers=args.workers) as graph:
            graph.statuses = args.statuses
            yield {"graph": graph, "base_url": graph.base_url, "token": graph.token,
                   "phone_number_id": graph.phone_number_id, "version": graph.version}
        return
    env = None
    if args.fake_pythonpath is not None:  # bench/compare.py: the same fake for every tree
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if args.fake_pythonpath:
            env["PYTHONPATH"] = args.fake_pythonpath
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "chatkernel_whatsapp.devserver", "--port", "0",
        "--app-secret", APP_SECRET, "--verify-token", VERIFY_TOKEN,
        "--workers", str(args.workers), *(() if args.statuses else ("--no-statuses",)),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env)
    try:
        assert process.stdout is not None
        info = json.loads(await asyncio.wait_for(process.stdout.readline(), 30))
        yield {"graph": None, "version": "v23.0", **info}
    finally:
        process.terminate()
        await process.wait()


class Remote:
    """The developer routes of a fake in another process."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.http = aiohttp.ClientSession()
        self.seen: list[dict[str, Any]] = []

    async def post(self, path: str, body: Any) -> Any:
        async with self.http.post(f"{self.base_url}/_fake/{path}", json=body) as answer:
            return await answer.json()

    async def sent(self) -> list[dict[str, Any]]:
        """Every echo so far: each poll asks only for those after the ones it has (the
        poll's own CPU counts as the contender's)."""
        async with self.http.get(f"{self.base_url}/_fake/sent",
                                 params={"after": str(len(self.seen))}) as answer:
            self.seen += (await answer.json())["messages"]
        return self.seen


class Target:
    """What a contender needs of the fake."""

    def __init__(self, info: dict[str, Any]) -> None:
        self.base_url, self.token = info["base_url"], info["token"]
        self.phone_number_id, self.version = info["phone_number_id"], info["version"]


async def run_once(name: str, args: argparse.Namespace) -> dict[str, Any]:
    texts: dict[str, list[str]] = {}
    batch: list[dict[str, str]] = []
    batches = []
    for i in range(args.messages):
        user = f"1555{i % args.users:07d}"
        text = f"u{i % args.users} m{i // args.users}"
        texts.setdefault(user, []).append(text)
        batch.append({"from": user, "text": text})
        if len(batch) == args.per_notification:
            batches.append(batch)
            batch = []
    if batch:
        batches.append(batch)
    with tempfile.TemporaryDirectory() as tmp:
        async with fake_graph(args) as info:
            graph: FakeGraph | None = info["graph"]
            remote = Remote(info["base_url"])
            target = Target(info)
            journal: dict[str, int] = {}
            try:
                for items in batches:  # queued before the webhook exists: held till then
                    if graph is not None:
                        graph.inject_messages([graph.message(m["from"], m["text"])
                                               for m in items])
                    else:
                        await remote.post("messages", {"messages": items})
                options = {"mount": args.mount} if name == "chatkernel" else {}
                async with CONTENDERS[name](target, Path(tmp), journal, **options) as url:
                    profiler = make_profiler(args.profile_with) if args.profile == name else None
                    wall, cpu = time.time(), time.process_time()
                    if profiler is not None:
                        profiler.enable()
                    if graph is not None:
                        passed = await graph.subscribe(url)
                    else:
                        passed = (await remote.post("subscribe", {"url": url}))["passed"]
                    if not passed:
                        raise SystemExit(f"{name}: the webhook's GET verification failed")
                    sent = await wait_for_echoes(graph, remote, args)
                    cpu = time.process_time() - cpu
                    if profiler is not None:
                        profiler.disable()
                        append_top(profiler, f"{name}: {args.messages} messages, "
                                   f"{args.per_notification} per notification, "
                                   f"mount {args.mount}", args.profile_out, args.profile_top,
                                   messages=args.messages)
                    await anyio.sleep(0.2)  # late duplicates would show now
                    sent = await wait_for_echoes(graph, remote, args)
            finally:
                await remote.http.close()
    result = score(name, sent, texts, wall, args, journaled=journal.get("journaled"))
    result["cpu_us"] = cpu / max(1, result["answered"]) * 1e6
    result["commits"] = journal.get("commits")
    return result


async def wait_for_echoes(graph: FakeGraph | None, remote: Remote,
                          args: argparse.Namespace) -> list[dict[str, Any]]:
    deadline = time.monotonic() + args.timeout
    while True:
        if graph is not None:
            sent = [{"to": m.to, "text": m.text, "when": m.when} for m in graph.sent_messages]
        else:
            sent = await remote.sent()
        if len(sent) >= args.messages or time.monotonic() > deadline:
            return sent
        await anyio.sleep(0.05)


def score(name: str, sent: list[dict[str, Any]], texts: dict[str, list[str]], wall: float,
          args: argparse.Namespace, *, journaled: int | None) -> dict[str, Any]:
    first: dict[str, float] = {}
    counts: dict[str, int] = {}
    violations = 0
    last_index: dict[str, int] = {}
    position = {(user, text): i for user, items in texts.items() for i, text in enumerate(items)}
    for message in sent:
        text, to = message["text"] or "", message["to"]
        counts[text] = counts.get(text, 0) + 1
        first.setdefault(text, message["when"])
        index = position.get((to, text))
        if index is None:
            continue
        if index < last_index.get(to, -1):
            violations += 1
        last_index[to] = max(index, last_index.get(to, -1))
    answered = len(first)
    latencies = sorted(max(0.0, at - wall) for at in first.values())
    end = max(first.values(), default=wall) - wall
    return {"name": name, "answered": answered,
            "rate": answered / end if end > 0 else 0.0,
            "p50": percentile(latencies, 0.5), "p99": percentile(latencies, 0.99),
            "duplicates": sum(c - 1 for c in counts.values() if c > 1),
            "order": violations, "journaled": journaled}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--per-notification", type=int, default=1)
    parser.add_argument("--workers", type=int, default=32,
                        help="notifications the fake posts at a time")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--fake", choices=("process", "inline"), default="process")
    parser.add_argument("--statuses", action="store_true",
                        help="the fake posts each reply's statuses (sent, delivered) to the "
                             "webhook, as Meta does (default: none)")
    parser.add_argument("--fake-pythonpath", metavar="PATHS",
                        help="PYTHONPATH of the fake's process (default: this process's; "
                             "empty: none), so bench/compare.py runs every tree on one fake")
    parser.add_argument("--mount", choices=("gateway", "bare"), default="gateway",
                        help="chatkernel's webhook on the gateway's app, or on a bare one")
    parser.add_argument("--only", default=",".join(CONTENDERS),
                        help="comma-separated contenders (floor, chatkernel, pywa)")
    parser.add_argument("--profile", metavar="NAME", choices=tuple(CONTENDERS),
                        help="run NAME under cProfile and write the top of each run")
    parser.add_argument("--profile-out", default="whatsapp_echo.prof.txt")
    parser.add_argument("--profile-top", type=int, default=30)
    parser.add_argument("--profile-with", choices=("cprofile", "yappi"), default="cprofile",
                        help="yappi: exact Python calls a message instead of cProfile's "
                             "timings (pip install yappi)")
    args = parser.parse_args()
    names = [name for name in args.only.split(",") if name]
    for name in names:
        if name not in CONTENDERS:
            parser.error(f"--only: no contender {name!r} (there are {', '.join(CONTENDERS)})")
        if name in NEEDS and not _installed(NEEDS[name]):
            print(f"{name} skipped: {NEEDS[name]} is not installed (bench/requirements.txt)")
    names = [name for name in names if name not in NEEDS or _installed(NEEDS[name])]
    print(f"python {platform.python_version()} ({sys.executable}); {args.messages} messages "
          f"from {args.users} users, {args.per_notification} per notification, "
          f"{args.workers} posts at a time, fake {args.fake}, chatkernel on the "
          f"{args.mount} app, {args.rounds} rounds", flush=True)
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
                  f"journaled {result['journaled']}{commits}", flush=True)
    print_table(results)


def print_table(results: dict[str, list[dict[str, Any]]]) -> None:
    base = results.get("floor")
    floor_rate = statistics.median(r["rate"] for r in base) if base else None
    floor_cpu = statistics.median(r["cpu_us"] for r in base) if base else None
    print("\n| contender | messages/s | × floor | CPU µs/msg | CPU × floor | p50 ms | p99 ms "
          "| answered | duplicates | order violations | journaled | commits |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, rows in results.items():
        rate = statistics.median(r["rate"] for r in rows)
        cpu = statistics.median(r["cpu_us"] for r in rows)
        commits = [r["commits"] for r in rows if r["commits"] is not None]
        print(f"| {name} | {rate:.0f} | "
              f"{f'{rate / floor_rate:.2f}' if floor_rate else '—'} | {cpu:.0f} | "
              f"{f'{cpu / floor_cpu:.2f}' if floor_cpu else '—'} | "
              f"{statistics.median(r['p50'] for r in rows) * 1000:.0f} | "
              f"{statistics.median(r['p99'] for r in rows) * 1000:.0f} | "
              f"{min(r['answered'] for r in rows)} | {sum(r['duplicates'] for r in rows)} | "
              f"{sum(r['order'] for r in rows)} | "
              f"{rows[0]['journaled'] if rows[0]['journaled'] is not None else '—'} | "
              f"{statistics.median(commits) if commits else '—'} |")
    if "chatkernel" in results and "pywa" in results:
        ours = statistics.median(r["rate"] for r in results["chatkernel"])
        theirs = statistics.median(r["rate"] for r in results["pywa"])
        print(f"\nchatkernel / pywa: {ours / theirs:.2f}× the rate" if theirs else "")
    print_beside(results, "chatkernel", "floor-journaled")


if __name__ == "__main__":
    main()
