"""End-to-end Slack echo over Socket Mode: chatkernel next to slack_bolt and a floor.

Every contender connects to a fresh :class:`chatkernel_slack.fake.FakeSlack` over Socket
Mode (``apps.connections.open``, then a real websocket on 127.0.0.1) and echoes each
message back with ``chat.postMessage``. Once the contender's socket is open, ``--messages``
messages over ``--channels`` conversations (half DMs, half channels; round robin:
message 0 of every conversation, then message 1, ...; each text ``chat <c> msg <i>``) are
sent at once. In the channels each message mentions the bot, as people address a bot
there, so Slack sends it twice: a ``message`` and an ``app_mention`` envelope
(``--no-mentions``: plain channel messages, one envelope each). The fake runs in a child
process of its own, as Slack is elsewhere: the bot does not pay for the server's CPU. The
bot's own posts come back to it as events, as Slack sends them; every contender ignores
them.

    slack_sdk floor   the least a slack_sdk bot can do: SocketModeClient and an
                      AsyncWebClient on one shared aiohttp session; each envelope acked at
                      once, then echoed, chained per conversation so each keeps its order
    chatkernel        a real kernel with the chatkernel_slack plugin and the echo agent:
                      durable SQLite journal (each envelope acked after it), queue mode
                      followup, debounce 0, max_concurrent 64, replies in the channel,
                      the working status (assistant.threads.setStatus) at its default
                      (``--no-indicators``: off)
    slack_bolt        slack_bolt's AsyncApp + AsyncSocketModeHandler written as its docs
                      show: @app.event("message") -> await say(text), its defaults

Per run, from the fake's records and clock: messages answered per second (N / time from
the first message to its last first echo), p50/p99 latency (each message's first echo
minus the moment all were sent), duplicates (echoes beyond the first of a message), order
violations (an echo whose index in its conversation is lower than an earlier echo's, in
the order the fake recorded the posts), redelivered envelopes (acks later than Slack's 3 s)
429s, the envelopes Slack sent and the status calls the bot made, and this process's CPU
time per answered message (the fake's child process not included) with its ratio to the
floor's. Two scenarios: the throughput figure with pacing lifted (the fake enforces no
limit, chatkernel's rate limits for sends are lifted, its working status is on), then pacing on
(the fake enforces chat.postMessage's ~1 message a second per channel and answers 429
beyond; chatkernel at its defaults): ``--paced-messages`` messages, zero 429s expected.

    .venv/bin/python bench/slack_echo.py                     # both scenarios, 3 rounds
    .venv/bin/python bench/slack_echo.py --rounds 5 --only chatkernel,floor
    .venv/bin/python bench/slack_echo.py --scenario paced
    .venv/bin/python bench/slack_echo.py --scenario throughput --only chatkernel --profile

slack_bolt is not a dependency of chatkernel: install it into the venv for this
benchmark only (bench/requirements.txt); without it its row is skipped.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import importlib.util
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ECHO = re.compile(r"chat (\d+) msg (\d+)")
STOP_TIMEOUT = 15.0
# Targets (issue 31): at least 0.75x the floor's rate and 3x slack_bolt's, at most 1.8x
# the floor's CPU per message, no duplicates, no reordering.
VS_FLOOR = 0.75
VS_BOLT = 3.0
CPU_VS_FLOOR = 1.8


def conversation(c: int, channels: int) -> str:
    """Half the conversations are DMs (D…), half channels (C…)."""
    return f"D0BENCH{c:04d}" if c < (channels + 1) // 2 else f"C0BENCH{c:04d}"


# ---------------------------------------------------------------------------------------
# The fake, in a child process
# ---------------------------------------------------------------------------------------


async def serve_fake(messages: int, channels: int, paced: bool, seed: int,
                     mentions: bool) -> None:
    """Child process: a fresh fake; prints its address and tokens; once a socket is open,
    sends every message and prints ``started``, then ``complete`` once each has an echo;
    on ``stop`` prints what it recorded."""
    import anyio

    from chatkernel_slack.fake import FakeSlack

    async with FakeSlack(seed=seed) as slack:
        if paced:
            slack.enforce_limits(per_channel_per_second=1, per_workspace_per_minute=600)
        print(json.dumps({"base_url": slack.base_url, "bot_token": slack.bot_token,
                          "app_token": slack.app_token}), flush=True)
        state: dict[str, Any] = {"t0": None}

        async def drive() -> None:
            while not slack.app.open_sockets:
                await anyio.sleep(0.01)
            await anyio.sleep(0.2)  # the hello is through; a bot may check who it is
            state["t0"] = time.time()
            for i in range(messages // channels + 1):
                for c in range(channels):
                    if i * channels + c < messages:
                        room = conversation(c, channels)
                        slack.inject_message(room, f"chat {c} msg {i}",
                                             user=f"U0BENCH{c:04d}",
                                             mention=mentions and room.startswith("C"))
            print("started", flush=True)
            texts: set[str | None] = set()
            read = 0
            while len(texts) < messages:  # each post read once: this is the fake's process
                await anyio.sleep(0.02)
                sent = slack.sent()
                texts.update(m.text for m in sent[read:])
                read = len(sent)
            print("complete", flush=True)

        async with anyio.create_task_group() as tg:
            tg.start_soon(drive)
            await anyio.to_thread.run_sync(sys.stdin.readline)
            tg.cancel_scope.cancel()
        t0 = state["t0"]
        print(json.dumps({
            "t0": t0, "sent": [[m.channel, m.text, m.at] for m in slack.sent()],
            "throttled": slack.throttled,
            "redelivered": sum(1 for e in slack.envelopes if e.retry_attempt
                               and e.payload["event"].get("user", "").startswith("U0BENCH")),
            "dropped": len(slack.dropped), "envelopes": len(slack.envelopes),
            "statuses": len(slack.statuses)}), flush=True)


class SubprocessFake:
    def __init__(self, messages: int, channels: int, paced: bool, seed: int,
                 mentions: bool) -> None:
        self.args = (messages, channels, paced, seed, mentions)
        self.proc: asyncio.subprocess.Process | None = None
        self.completed = False

    async def __aenter__(self) -> SubprocessFake:
        messages, channels, paced, seed, mentions = self.args
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--serve-fake", "--messages", str(messages),
            "--channels", str(channels), "--seed", str(seed), *(["--paced"] if paced else []),
            *([] if mentions else ["--no-mentions"]),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=1 << 26)
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 60)
        if not line:
            raise RuntimeError("the fake Slack process did not start")
        info = json.loads(line)
        self.base_url, self.bot_token, self.app_token = (info["base_url"], info["bot_token"],
                                                         info["app_token"])
        self.api_base = f"{self.base_url}/api/"
        self._lines = asyncio.ensure_future(self._read_progress())
        self._started = asyncio.get_running_loop().create_future()
        self._complete = asyncio.get_running_loop().create_future()
        return self

    async def _read_progress(self) -> bytes:
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            line = (await self.proc.stdout.readline()).strip()
            if line == b"started" and not self._started.done():
                self._started.set_result(True)
            elif line == b"complete":
                self._complete.set_result(True)
            else:
                return line

    async def wait_complete(self, timeout: float) -> bool:
        done, _ = await asyncio.wait([self._complete], timeout=timeout)
        return bool(done)

    async def results(self) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(b"stop\n")
        await self.proc.stdin.drain()
        return json.loads(await self._lines)

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
        self._lines.cancel()


# ---------------------------------------------------------------------------------------
# Contenders
# ---------------------------------------------------------------------------------------


@dataclass
class Contender:
    name: str
    start: Callable[[SubprocessFake, bool], contextlib.AbstractAsyncContextManager[Any]]
    package: str | None = None
    is_kernel: bool = False
    is_floor: bool = False


@contextlib.asynccontextmanager
async def sdk_floor(fake: SubprocessFake, paced: bool) -> AsyncIterator[None]:
    import aiohttp
    from slack_sdk.socket_mode.aiohttp import SocketModeClient
    from slack_sdk.socket_mode.response import SocketModeResponse
    from slack_sdk.web.async_client import AsyncWebClient

    loop = asyncio.get_running_loop()
    tails: dict[str, asyncio.Future[None]] = {}
    async with aiohttp.ClientSession() as session:
        web = AsyncWebClient(token=fake.bot_token, base_url=fake.api_base, session=session)

        async def on_request(client: Any, request: Any) -> None:
            event = request.payload.get("event", {}) if request.type == "events_api" else {}
            echo = event.get("type") == "message" and not event.get("bot_id") \
                and not event.get("subtype")
            if echo:  # chained before the first await: envelopes start in arrival order
                channel = event["channel"]
                before, mine = tails.get(channel), loop.create_future()
                tails[channel] = mine
            await client.send_socket_mode_response(
                SocketModeResponse(envelope_id=request.envelope_id))
            if not echo:
                return
            try:
                if before is not None:
                    await before
                await web.chat_postMessage(channel=channel, text=event["text"])
            except Exception:  # noqa: BLE001 - a failed echo is counted as missing (a 429...)
                pass
            finally:
                mine.set_result(None)

        client = SocketModeClient(app_token=fake.app_token, web_client=AsyncWebClient(
            base_url=fake.api_base, session=session))
        client.socket_mode_request_listeners.append(on_request)
        await client.connect()
        try:
            yield
        finally:
            await client.close()


@contextlib.asynccontextmanager
async def bolt_bot(fake: SubprocessFake, paced: bool) -> AsyncIterator[None]:
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
    from slack_bolt.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient
    import logging

    quiet = logging.getLogger("bench.slack_bolt")  # one traceback per failed echo otherwise
    quiet.setLevel(logging.CRITICAL)
    quiet.propagate = False
    app = AsyncApp(client=AsyncWebClient(token=fake.bot_token, base_url=fake.api_base),
                   logger=quiet)

    @app.event("message")
    async def echo(event: dict[str, Any], say: Any) -> None:
        await say(text=event["text"])

    handler = AsyncSocketModeHandler(app, fake.app_token)
    await handler.connect_async()
    try:
        yield
    finally:
        await handler.close_async()


@contextlib.asynccontextmanager
async def chatkernel_bot(fake: SubprocessFake, paced: bool, *, home: Path,
                         margin: str | None = None, indicators: bool = True
                         ) -> AsyncIterator[None]:
    import anyio

    import chatkernel_slack
    from chatkernel.core.gateway.gc_tuning import tune_for_serving
    from chatkernel.testing.memory import KernelHarness

    account = {"bot_token": fake.bot_token, "app_token": fake.app_token,
               "api_base": fake.api_base, "allow_from": ["*"], "require_mention": False,
               "channel_replies": "channel"}
    section: dict[str, Any] = {"accounts": {"main": account}}
    if not indicators:
        account["working_status"] = ""
    if not paced:  # the throughput figure: the sends' pacing lifted
        section["rate_limits"] = {"chat": "100000/s", "account": "100000/s"}
    elif margin is not None:
        section["rate_limits"] = {"margin": margin}
    config = {"agent": {"kind": "echo"},
              "queue": {"mode": "followup", "debounce_ms": 0, "max_concurrent": 64},
              "channels": {"slack": section}}
    home.mkdir(parents=True, exist_ok=True)
    async with KernelHarness(home, config=config,
                             plugins=[("slack", chatkernel_slack)]) as harness:
        kernel = harness.kernel
        channel = kernel.accounts["slack:main"].channel
        restore_gc = tune_for_serving()
        async with anyio.create_task_group() as tg:
            tg.start_soon(channel.run, kernel.receiver)
            try:
                yield
            finally:
                if fake.completed:
                    with contextlib.suppress(TimeoutError):
                        await harness.settle(timeout=10)
                    await kernel.store.flush()
                    unfinished = await kernel.store.unfinished_inbound()
                    if unfinished:
                        print(f"    ! chatkernel left {len(unfinished)} journal entries "
                              "unfinished", flush=True)
                tg.cancel_scope.cancel()
                restore_gc()


def contenders(home: Path, margin: str | None = None, indicators: bool = True
               ) -> list[Contender]:
    counter = iter(range(10**6))
    return [
        Contender("slack_sdk floor", sdk_floor, is_floor=True),
        Contender("chatkernel", lambda fake, paced: chatkernel_bot(
            fake, paced, home=home / f"kernel-{next(counter)}", margin=margin,
            indicators=indicators),
            is_kernel=True),
        Contender("slack_bolt AsyncApp", bolt_bot, package="slack_bolt"),
    ]


# ---------------------------------------------------------------------------------------
# Runs and the report
# ---------------------------------------------------------------------------------------


@dataclass
class Run:
    name: str
    messages: int
    answered: int = 0
    rate: float = 0.0
    p50: float = 0.0
    p99: float = 0.0
    duplicates: int = 0
    reordered: int = 0
    redelivered: int = 0
    throttled: int = 0
    envelopes: int = 0
    statuses: int = 0
    cpu: float = 0.0
    timed_out: bool = False
    error: str | None = None
    latencies: list[float] = field(default_factory=list, repr=False)


def score(data: dict[str, Any], run: Run) -> None:
    t0 = data["t0"] or time.time()
    first: dict[tuple[int, int], float] = {}
    last_index: dict[str, int] = {}
    for channel, text, at in data["sent"]:
        match = ECHO.search(text)  # a peer echoes the mention too
        if match is None:
            continue
        key = (int(match[1]), int(match[2]))
        if key in first:
            run.duplicates += 1
        else:
            first[key] = at
        if key[1] < last_index.get(channel, -1):
            run.reordered += 1
        last_index[channel] = max(last_index.get(channel, -1), key[1])
    run.answered = len(first)
    run.latencies = sorted(at - t0 for at in first.values())
    if run.latencies:
        elapsed = max(run.latencies[-1], 1e-6)
        run.rate = run.answered / elapsed
        run.p50 = run.latencies[len(run.latencies) // 2]
        run.p99 = run.latencies[min(len(run.latencies) - 1, int(len(run.latencies) * 0.99))]
    run.redelivered, run.throttled = data["redelivered"], data["throttled"]
    run.envelopes, run.statuses = data["envelopes"], data["statuses"]


async def run_once(contender: Contender, messages: int, channels: int, paced: bool,
                   timeout: float, seed: int, mentions: bool,
                   profiler: cProfile.Profile | None = None) -> Run:
    run = Run(contender.name, messages)
    async with SubprocessFake(messages, channels, paced, seed, mentions) as fake:
        try:
            async with contender.start(fake, paced):
                cpu = time.process_time()
                if profiler is not None:
                    profiler.enable()
                try:
                    fake.completed = await fake.wait_complete(timeout)
                finally:
                    if profiler is not None:
                        profiler.disable()
                run.cpu = time.process_time() - cpu
                run.timed_out = not fake.completed
        except Exception as exc:  # noqa: BLE001 - one broken contender must not end the run
            run.error = f"{type(exc).__name__}: {exc}"
        data = await fake.results()
    score(data, run)
    return run


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def report(title: str, results: dict[str, list[Run]], floor_name: str) -> None:
    print(f"\n{title}")
    header = (f"{'contender':<22} {'msg/s':>8} {'x floor':>8} {'p50 s':>7} {'p99 s':>7} "
              f"{'answered':>9} {'dupes':>6} {'reorder':>8} {'redeliv':>8} {'429s':>5} "
              f"{'envel.':>7} {'status':>7} {'cpu us/msg':>10} {'x floor':>8}")
    print(header)
    print("-" * len(header))
    floor = median([r.rate for r in results.get(floor_name, [])])
    floor_cpu = median([r.cpu / max(r.answered, 1) * 1e6 for r in results.get(floor_name, [])])
    for name, runs in results.items():
        if not runs:
            continue
        rate = median([r.rate for r in runs])
        answered = min(r.answered for r in runs)
        cpu = median([r.cpu / max(r.answered, 1) * 1e6 for r in runs])
        print(f"{name:<22} {rate:>8,.0f} {rate / floor if floor else 0:>8.2f} "
              f"{median([r.p50 for r in runs]):>7.2f} {median([r.p99 for r in runs]):>7.2f} "
              f"{answered:>5}/{runs[0].messages:<4}"
              f"{sum(r.duplicates for r in runs):>6} {sum(r.reordered for r in runs):>8} "
              f"{sum(r.redelivered for r in runs):>8} {sum(r.throttled for r in runs):>5} "
              f"{median([r.envelopes for r in runs]):>7,.0f} "
              f"{median([r.statuses for r in runs]):>7,.0f} "
              f"{cpu:>10,.0f} {cpu / floor_cpu if floor_cpu else 0:>8.2f}")
        for r in runs:
            if r.error or r.timed_out:
                print(f"    {'timed out' if r.timed_out else r.error}")
    print("  envel. = envelopes Slack sent (a mention in a channel is two); status = "
          "assistant.threads.setStatus calls (sets and clears);\n  cpu us/msg = this "
          "process's CPU per answered message, x floor = its ratio to the floor's")


def verdict(results: dict[str, list[Run]], paced: bool) -> None:
    kernel = results.get("chatkernel", [])
    if not kernel:
        return
    clean = all(r.duplicates == 0 and r.reordered == 0 and r.answered == r.messages
                for r in kernel)
    if paced:
        ok = clean and all(r.throttled == 0 for r in kernel)
        print(f"target (pacing on: every message answered once, in order, zero 429s): "
              f"{'met' if ok else 'MISSED'}")
        return
    rate = median([r.rate for r in kernel])
    floors = results.get("slack_sdk floor", [])
    floor = median([r.rate for r in floors])
    bolt = median([r.rate for r in results.get("slack_bolt AsyncApp", [])])
    print(f"target >= {VS_FLOOR}x the floor: {rate / floor if floor else 0:.2f}x "
          f"{'met' if floor and rate >= VS_FLOOR * floor else 'MISSED'}")
    if bolt:
        print(f"target >= {VS_BOLT:g}x slack_bolt: {rate / bolt:.2f}x "
              f"{'met' if rate >= VS_BOLT * bolt else 'MISSED'}")
    if floors:
        cpu = median([r.cpu / max(r.answered, 1) for r in kernel])
        floor_cpu = median([r.cpu / max(r.answered, 1) for r in floors])
        print(f"target CPU per message <= {CPU_VS_FLOOR}x the floor's: "
              f"{cpu / floor_cpu:.2f}x {'met' if cpu <= CPU_VS_FLOOR * floor_cpu else 'MISSED'}")
    print(f"target zero duplicates, zero reordering, all answered: "
          f"{'met' if clean else 'MISSED'}")


async def scenario(name: str, chosen: list[Contender], messages: int, channels: int,
                   paced: bool, rounds: int, timeout: float, mentions: bool,
                   profiler: cProfile.Profile | None = None) -> int:
    """Runs every contender ``rounds`` times, prints the table; returns how many messages
    the profiled (chatkernel) runs answered."""
    results: dict[str, list[Run]] = {c.name: [] for c in chosen}
    for round_ in range(rounds):
        order = chosen[round_ % len(chosen):] + chosen[:round_ % len(chosen)]
        for contender in order:
            run = await run_once(contender, messages, channels, paced, timeout, seed=round_,
                                 mentions=mentions,
                                 profiler=profiler if contender.is_kernel else None)
            results[contender.name].append(run)
            print(f"  round {round_ + 1} {contender.name}: {run.rate:,.0f}/s, "
                  f"{run.answered}/{messages} answered, {run.duplicates} dupes, "
                  f"{run.reordered} reordered, {run.throttled} 429s, "
                  f"{run.envelopes} envelopes, {run.statuses} status calls"
                  + (f" ({run.error or 'timed out'})" if run.error or run.timed_out else ""),
                  flush=True)
            await asyncio.sleep(0.5)
    report(name, results, "slack_sdk floor")
    verdict(results, paced)
    return sum(r.answered for r in results.get("chatkernel", []))


def quiet_peers() -> None:
    """The peers log every failed echo (a 429 each, with pacing on) and every unhandled
    event: the table counts them instead."""
    import logging

    for name in ("slack_bolt", "slack_sdk"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--channels", type=int, default=50)
    parser.add_argument("--paced-messages", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=90.0,
                        help="bound of one throughput run (s); a paced run gets the time its "
                             "pacing needs plus 15 s")
    parser.add_argument("--scenario", choices=("both", "throughput", "paced"), default="both")
    parser.add_argument("--only", help="comma-separated: floor, chatkernel, bolt")
    parser.add_argument("--margin", help="chatkernel's rate-limit margin with pacing on "
                                         "(rate_limits.margin, e.g. 100ms); its default if unset")
    parser.add_argument("--no-mentions", dest="mentions", action="store_false",
                        help="channel messages without the bot's mention: one envelope "
                             "each instead of a message and an app_mention")
    parser.add_argument("--no-indicators", dest="indicators", action="store_false",
                        help="chatkernel without its working status (what the throughput "
                             "scenario measured before issue 31)")
    parser.add_argument("--profile", nargs="?", const="", metavar="FILE",
                        help="cProfile the chatkernel runs: print the top functions by "
                             "cumulative and own time (and save the profile to FILE)")
    parser.add_argument("--serve-fake", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--paced", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        import anyio

        anyio.run(serve_fake, args.messages, args.channels, args.paced, args.seed,
                  args.mentions)
        return
    quiet_peers()
    with tempfile.TemporaryDirectory() as tmp:
        chosen = []
        for contender in contenders(Path(tmp), args.margin, args.indicators):
            key = {"slack_sdk floor": "floor", "chatkernel": "chatkernel",
                   "slack_bolt AsyncApp": "bolt"}[contender.name]
            if args.only and key not in args.only.split(","):
                continue
            if contender.package and importlib.util.find_spec(contender.package) is None:
                print(f"skipping {contender.name}: {contender.package} is not installed "
                      "(pip install -r bench/requirements.txt)")
                continue
            chosen.append(contender)
        print(f"python {sys.version.split()[0]} ({sys.executable}); load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
        profiler = cProfile.Profile() if args.profile is not None else None
        profiled = 0
        shape = (f"{'mentions in the channels' if args.mentions else 'no mentions'}, "
                 f"chatkernel's working status {'on' if args.indicators else 'off'}")
        if args.scenario in ("both", "throughput"):
            profiled += asyncio.run(scenario(
                f"throughput, pacing lifted: {args.messages} messages over {args.channels} "
                f"conversations ({shape}), medians of {args.rounds} rounds", chosen,
                args.messages, args.channels, False, args.rounds, args.timeout,
                args.mentions, profiler))
        if args.scenario in ("both", "paced"):
            per_channel = -(-args.paced_messages // args.channels)
            profiled += asyncio.run(scenario(
                f"pacing on (1 message/s per channel enforced): {args.paced_messages} "
                f"messages over {args.channels} conversations ({shape}), {args.rounds} "
                "rounds", chosen, args.paced_messages, args.channels, True, args.rounds,
                per_channel * 1.5 + 15, args.mentions, profiler))
        if profiler is not None:
            from profiling import report as profile_report

            profile_report(profiler, profiled, path=args.profile or None)


if __name__ == "__main__":
    main()
