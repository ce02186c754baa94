"""The web chat's post: chatkernel's web chat next to a minimal aiohttp echo (the floor).

A load generator in a child process of its own (so this process's CPU is the server's
alone) runs ``--chats`` chats side by side; each posts ``--per-chat`` messages one after
another, the next once the previous was answered 202, as the page does
(``POST /webchat/messages`` with ``{"chat_id", "user_id", "text", "client_message_id"}``).

    floor        a minimal aiohttp POST handler: the JSON body parsed, its fields
                 checked, the message and its echo appended to an in-memory transcript,
                 202; nothing durable
    floor-journaled
                 the floor with the kernel's guarantees hand-written
                 (common.GroupJournal): a new post journaled and in an SQLite transcript
                 before its 202 (one commit for the posts of one event-loop turn), a
                 retried ``client_message_id`` not answered twice, the echo written after;
                 what the guarantees cost without the kernel
    chatkernel   the web chat of a real kernel with the echo agent, served by the
                 gateway's own app and listener (the HTTP guard included): the message
                 in the transcript and the journal (SQLite, durable) before its 202, the
                 echo written to the transcript by the agent's turn behind it

Per run: messages per second (N / the time from the first post to the last echo in the
transcript), this process's CPU per message, the transcript checked (every message and
its echo, each chat's in order). Medians over ``--rounds``, the contenders' order rotating;
ratios to the floor (rate, CPU per message).

    .venv/bin/python bench/webchat_echo.py
    .venv/bin/python bench/webchat_echo.py --chats 100 --per-chat 20 --rounds 5
    .venv/bin/python bench/webchat_echo.py --only chatkernel --rounds 1 --profile chatkernel
    .venv/bin/python bench/webchat_echo.py --only floor --rounds 1 --profile floor --profile-with yappi
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import json
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from common import GroupJournal, print_beside, serve
from profiling import append_top, make_profiler


# -- the load, in a child process -----------------------------------------------------------


async def load(url: str, chats: int, per_chat: int) -> None:
    """Child process: post every message, each chat's one after another; print the time
    of the first post and how many were answered 202."""
    answered = 0

    async def chat(c: int, http: aiohttp.ClientSession) -> None:
        nonlocal answered
        for i in range(per_chat):
            body = {"chat_id": f"chat-{c}", "user_id": f"user-{c}", "text": f"c{c} m{i}",
                    "client_message_id": f"c{c}-m{i}"}
            async with http.post(url, json=body) as response:
                await response.read()
                answered += response.status == 202

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        start = time.time()
        await asyncio.gather(*(chat(c, http) for c in range(chats)))
    print(json.dumps({"start": start, "answered": answered}), flush=True)


# -- the contenders -----------------------------------------------------------------------


Transcript = dict[str, list[tuple[str, str]]]


async def _settled() -> None:
    """The floor writes each echo as it answers: nothing to wait for."""


@dataclass
class Served:
    """A contender's URL, how to read its transcript, and how to wait until every
    accepted message's echo is in it."""

    url: str
    transcript: Callable[[], Transcript]
    settle: Callable[[], Awaitable[None]] = _settled


#: The journaled floor's transcript, beside common.GroupJournal's journal (a post by its
#: chat and client id: a retried post is a duplicate).
TRANSCRIPT_SCHEMA = """
CREATE TABLE transcript (id INTEGER PRIMARY KEY, chat_id TEXT, role TEXT, text TEXT);
"""


@contextlib.asynccontextmanager
async def floor(home: Path, *, journaled: bool = False) -> AsyncIterator[Served]:
    """``journaled``: the kernel's guarantees hand-written (common.GroupJournal): a new
    post journaled and in the transcript before its 202, a retried one (the same
    ``client_message_id``) not answered again, the echo in the transcript after."""
    transcript: Transcript = {}
    store = GroupJournal(home / "floor.db", TRANSCRIPT_SCHEMA) if journaled else None
    unnamed = itertools.count()

    async def post(request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        chat, text = body.get("chat_id"), body.get("text")
        if not isinstance(chat, str) or not isinstance(text, str) or \
                not isinstance(body.get("user_id"), str):
            return web.json_response({"error": "chat_id, user_id and text"}, status=400)
        if store is None:
            lines = transcript.setdefault(chat, [])
            lines += [("user", text), ("bot", text)]
            return web.json_response({"message_id": str(len(lines) - 1)}, status=202)
        client_id = body.get("client_message_id")  # none: a post of its own, never a retry
        message_id = f"{chat}:{client_id}" if client_id else f"{chat}:#{next(unnamed)}"
        if store.add(message_id, text):
            row = store.write("INSERT INTO transcript (chat_id, role, text) VALUES (?, ?, ?)",
                              (chat, "user", text)).lastrowid
            await store.durable()
            store.write("INSERT INTO transcript (chat_id, role, text) VALUES (?, ?, ?)",
                        (chat, "bot", text))
            store.write("UPDATE journal SET done = 1 WHERE id = ?", (message_id,))
            return web.json_response({"message_id": str(row)}, status=202)
        await store.durable()  # a retry: answered as the first post was, once it is kept
        return web.json_response({"message_id": ""}, status=202)

    def kept() -> Transcript:
        assert store is not None
        found: Transcript = {}
        for chat, role, text in store.db.execute(
                "SELECT chat_id, role, text FROM transcript ORDER BY id"):
            found.setdefault(chat, []).append((role, text))
        return found

    app = web.Application()
    app.router.add_post("/webchat/messages", post)
    try:
        async with serve(app) as base:
            yield Served(f"{base}/webchat/messages",
                         kept if store is not None else lambda: transcript)
    finally:
        if store is not None:
            store.close()


@contextlib.asynccontextmanager
async def chatkernel(home: Path) -> AsyncIterator[Served]:
    import anyio

    from chatkernel.core.gateway import http_server
    from chatkernel.core.gateway.gc_tuning import tune_for_serving
    from chatkernel.core.gateway.process import HANDLER_ARGS, build_app
    from chatkernel.testing.memory import KernelHarness

    config = {"agent": {"kind": "echo"},
              "queue": {"mode": "followup", "debounce_ms": 0, "max_concurrent": 64},
              "channels": {"webchat": {"enabled": True}}}
    async with KernelHarness(home, config=config) as harness:
        kernel = harness.kernel
        transport = kernel.accounts["webchat:default"].transport
        runner = web.AppRunner(build_app(kernel, "bench-control-token"), handle_signals=False,
                               **HANDLER_ARGS)
        await runner.setup()
        site = http_server.GuardedSite(runner, "127.0.0.1", 0, handler_args=HANDLER_ARGS,
                                       limits=http_server.ConnectionLimits())
        await site.start()
        restore_gc = tune_for_serving()
        async def settle() -> None:
            with contextlib.suppress(TimeoutError):
                await harness.settle(timeout=60)

        def transcript() -> Transcript:
            with sqlite3.connect(home / "state.db") as db:
                rows = db.execute("SELECT chat_id, role, text FROM transcript"
                                  " ORDER BY id").fetchall()
            found: Transcript = {}
            for chat, role, text in rows:
                found.setdefault(chat, []).append((role, text))
            return found

        served = Served(f"{site.name}/webchat/messages", transcript, settle)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(transport.run, kernel.receiver)
                channel = kernel.accounts["webchat:default"].channel
                while channel._deliver is None:  # (its loop takes posts from then on)
                    await anyio.sleep(0.01)
                try:
                    yield served
                finally:
                    tg.cancel_scope.cancel()
        finally:
            restore_gc()
            await runner.cleanup()


CONTENDERS: dict[str, Callable[..., Any]] = {
    "floor": floor, "floor-journaled": functools.partial(floor, journaled=True),
    "chatkernel": chatkernel}


# -- one run --------------------------------------------------------------------------------


async def run_once(name: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        async with CONTENDERS[name](Path(tmp)) as served:
            profiler = make_profiler(args.profile_with) if args.profile == name else None
            if profiler is not None:
                profiler.enable()
            cpu = time.process_time()
            child = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--load", served.url, "--chats", str(args.chats),
                "--per-chat", str(args.per_chat), stdout=asyncio.subprocess.PIPE)
            out, _ = await child.communicate()
            await served.settle()
            end = time.time()
            cpu = time.process_time() - cpu
            if profiler is not None:
                profiler.disable()
                append_top(profiler, f"{name}: {args.chats} chats x {args.per_chat} posts",
                           args.profile_out, args.profile_top,
                           messages=args.chats * args.per_chat)
                print(f"    profile of {name} appended to {args.profile_out}", flush=True)
            transcript = served.transcript()
    report = json.loads(out)
    messages = args.chats * args.per_chat
    # Each chat's messages in order, and their echoes in order (an echo may come after
    # the chat's next post: the page does not wait for it).
    wrong = 0
    for c in range(args.chats):
        lines = transcript.get(f"chat-{c}", [])
        texts = [f"c{c} m{i}" for i in range(args.per_chat)]
        if [t for role, t in lines if role == "user"] != texts or \
                [t for role, t in lines if role == "bot"] != texts:
            wrong += 1
    return {"name": name, "rate": messages / (end - report["start"]),
            "cpu_us": cpu / messages * 1e6, "answered": report["answered"],
            "wrong_chats": wrong}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--per-chat", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join(CONTENDERS))
    parser.add_argument("--profile", metavar="NAME", choices=tuple(CONTENDERS))
    parser.add_argument("--profile-out", default="webchat_echo.prof.txt")
    parser.add_argument("--profile-top", type=int, default=30)
    parser.add_argument("--profile-with", choices=("cprofile", "yappi"), default="cprofile",
                        help="yappi: exact Python calls a message instead of cProfile's "
                             "timings (pip install yappi)")
    parser.add_argument("--load", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load:
        asyncio.run(load(args.load, args.chats, args.per_chat))
        return
    names = [name for name in args.only.split(",") if name]
    for name in names:
        if name not in CONTENDERS:
            parser.error(f"--only: no contender {name!r} (there are {', '.join(CONTENDERS)})")
    print(f"python {platform.python_version()}; {args.chats} chats x {args.per_chat} posts, "
          f"{args.rounds} rounds", flush=True)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for round_number in range(args.rounds):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            result = asyncio.run(run_once(name, args))
            results[name].append(result)
            print(f"  round {round_number + 1} {name:10} {result['rate']:8.0f} msg/s  "
                  f"cpu {result['cpu_us']:5.0f} us/msg  answered {result['answered']}  "
                  f"chats with a wrong transcript {result['wrong_chats']}", flush=True)
    base = results.get("floor")
    floor_rate = statistics.median(r["rate"] for r in base) if base else None
    floor_cpu = statistics.median(r["cpu_us"] for r in base) if base else None
    print("\n| contender | messages/s | × floor | CPU µs/msg | CPU × floor | answered 202 "
          "| chats with a wrong transcript |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, rows in results.items():
        rate = statistics.median(r["rate"] for r in rows)
        cpu = statistics.median(r["cpu_us"] for r in rows)
        print(f"| {name} | {rate:.0f} | {f'{rate / floor_rate:.2f}' if floor_rate else '—'} | "
              f"{cpu:.0f} | {f'{cpu / floor_cpu:.2f}' if floor_cpu else '—'} | "
              f"{min(r['answered'] for r in rows)} | {sum(r['wrong_chats'] for r in rows)} |")
    print_beside(results, "chatkernel", "floor-journaled")


if __name__ == "__main__":
    main()
