"""The fault soak: every channel at once through random faults; nothing lost, nothing
twice, each chat in order.

One ``chatkernel run`` gateway (``--store redis``: two, sharing a ``redis-server`` the
soak starts) with an account on each of the four channels: Telegram (long poll),
Slack (Socket Mode, its websocket tunnelled through the proxy), WhatsApp (webhook) and
WeChat (long poll). Each account talks to its fake platform, in this process, through
a :class:`~chatkernel.testing.fakes.faultproxy.FaultProxy`; the echo agent answers,
each message on its own (``followup``, no debounce). Simulated users send
``--messages`` messages spread over the channels and ``--chats`` chats of each, at
``--rate`` a second, each text carrying a unique token and its chat's sequence number.

Meanwhile faults are drawn from ``--seed`` at random times, the same schedule for the
same seed (the seed is printed; ``--seed N`` replays it), in lanes that run side by
side: one for the gateway processes, one for each channel's network.

    gateway     kill -9 (restarted after a pause), SIGTERM (restarted), SIGHUP (a reload
                of a changed config: Telegram's poll timeout and Slack's ping interval
                flip, so both accounts restart in place), a full disk (the home is on a
                small tmpfs, :class:`~chatkernel.testing.fakes.disk.SmallDisk`, filled
                for a few seconds: root only; without it the kind is left out and the
                soak says why); with ``--store redis`` also SIGSTOP/SIGCONT of one of
                the two gateways (some stops outlast the lease, so the other takes over)
    network     refused connections, 502 with an HTML page, 503 with the platform's own
                JSON error, a hung platform (requests held, then answered; shorter than
                the clients' 30 s timeout), socket drops (a long poll's connection lost
                before or after the fake served it, Slack's websockets cut, a send's
                answer lost after the platform took it)

A send whose connection drops *before* the platform took it is not drawn: the gateway
cannot tell it from a lost answer, and docs/outbound.md makes both "delivery unknown",
never sent again (a resend could be a duplicate), so such a drop loses the reply by
design, not by a bug.

After the last message (or ``--duration``, whichever comes first) the faults end, the
processes run, and the soak waits up to ``--drain`` seconds for the answers, then a few
more for late duplicates. It checks, from the fakes' own records:

    accepted    what the platform holds for the gateway: every Telegram and WeChat update
                served by the poll (the platform keeps it until the gateway's cursor moves
                past it), a Slack event whose envelope was acknowledged (or is still being
                retried), a WhatsApp notification answered 2xx (or still being retried: the
                fake's webhook retries are stretched to ~40 s here, as Meta retries for
                days). An event the platform gave up on before any acknowledgement is
                counted apart ("given up"), never as lost.
    lost        an accepted message with no answer (the gateway's log is searched for a
                "delivery unknown" or "delivery failed" of its token)
    unknown     an accepted message with no answer whose reply the gateway reports as
                "delivery unknown": a kill -9 between the reply's ``sending`` mark and its
                request leaving (a few milliseconds) loses it by design, as a drop before
                the platform took it would; shown apart, with the gateway's line, not a
                loss
    duplicated  a token answered more than once
    reordered   a chat's answers out of the order its platform handed the messages to
                the gateways: their sequence, but for a Slack event Slack gave to the
                socket of a gateway stopped with SIGSTOP, which reaches the gateways when
                that one wakes, after the events the other took meanwhile. Those are
                shown apart, not counted (no gateway can answer what it has not got)

and prints per channel the counts and answer latencies (p50, p90, p99, max: from the
message's injection to the fake taking its answer), faults by kind, and the totals. The
exit status is 1 on any loss, duplicate or reordering (2 when the soak itself failed).

    .venv/bin/python bench/soak.py                          # 10,000 messages, a new seed
    .venv/bin/python bench/soak.py --seed 1234              # replay that seed's schedule
    .venv/bin/python bench/soak.py --store redis --messages 2000
    .venv/bin/python bench/soak.py --messages 200 --channels telegram,whatsapp --rate 20

Everything is on 127.0.0.1; every loop is bounded; the soak stops its processes (and
unmounts its disk) however it ends. Linux only (signals, tmpfs).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import tomlkit
from anyio.abc import Process

from chatkernel.testing.fakes.disk import DiskUnavailable, SmallDisk
from chatkernel.testing.fakes.faultproxy import FaultProxy
from chatkernel.testing.process import CHATKERNEL, free_port

CHANNELS = ("telegram", "slack", "whatsapp", "wechat")
#: Network fault kinds, drawn for every channel.
NETWORK_FAULTS = ("refused", "5xx-html", "5xx-json", "hang", "drop")
#: Process fault kinds by store (``disk-full`` only where a tmpfs can be mounted).
PROCESS_FAULTS = {"sqlite": ("kill-9", "sigterm", "reload", "disk-full"),
                  "redis": ("kill-9", "sigterm", "reload", "sigstop")}
#: What a platform's own JSON error looks like, for the 503 with a JSON body.
JSON_ERRORS = {
    "telegram": {"ok": False, "error_code": 503, "description": "Service Unavailable"},
    "slack": {"ok": False, "error": "service_unavailable"},
    "whatsapp": {"error": {"message": "Service temporarily unavailable. Please retry "
                           "your request later.", "type": "OAuthException", "code": 2,
                           "fbtrace_id": "AsoakFbtrace"}},
    "wechat": {"ret": -1, "errcode": -1, "errmsg": "system busy"},
}
#: The methods whose connection a "drop" loses, per channel: (method, after_processing)
#: choices. Receives may lose either side; sends only their answer (see the docstring).
DROPS = {
    "telegram": [("getUpdates", False), ("getUpdates", True), ("sendMessage", True)],
    "whatsapp": [("messages", True)],
    "wechat": [("getupdates", False), ("getupdates", True), ("sendmessage", True)],
}
#: The fake WhatsApp's webhook retries, stretched past a gateway's restart (Meta retries
#: for days; the fake's default gives up after 1.5 s).
WHATSAPP_RETRIES = (0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0)
TOKEN = re.compile(r"\bq(\d+)z(\d+)\b")


# -- the plan: messages and faults, all drawn from the seed ---------------------------------


@dataclasses.dataclass
class Message:
    """One user message: where it goes, its token, and what became of it."""

    index: int
    channel: str
    chat: str
    seq: int
    at: float                     # seconds after the start, as planned
    text: str = ""
    sent_at: float | None = None  # monotonic, once injected
    #: The platform's handle: an event id (Slack), a Notification (WhatsApp).
    handle: Any = None
    answers: list[float] = dataclasses.field(default_factory=list)  # monotonic


@dataclasses.dataclass
class Fault:
    at: float
    lane: str                     # "gateway" or a channel
    kind: str
    length: float                 # how long it lasts (a kill: the pause before the restart)
    detail: Any = None            # which gateway, which method to drop, ...


def plan_messages(rng: random.Random, args: argparse.Namespace) -> list[Message]:
    seq: collections.Counter[tuple[str, str]] = collections.Counter()
    messages = []
    for index in range(args.messages):
        channel = args.channels[index % len(args.channels)]
        chat = chat_id(channel, rng.randrange(args.chats))
        seq[channel, chat] += 1
        message = Message(index, channel, chat, seq[channel, chat], index / args.rate)
        message.text = f"q{args.seed}z{index} n{message.seq}"
        messages.append(message)
    return messages


def chat_id(channel: str, n: int) -> str:
    return {"telegram": str(100_001 + n), "slack": f"D0SOAK{n:05d}",
            "whatsapp": str(15_550_100_000 + n), "wechat": f"soak{n}@im.wechat"}[channel]


def plan_faults(rng: random.Random, args: argparse.Namespace, span: float,
                process_kinds: tuple[str, ...]) -> list[Fault]:
    """Each lane's faults: a pause drawn around ``--fault-every`` seconds, a fault, its
    length, and so on until ``span`` (a lane never overlaps itself)."""
    faults = []
    lanes = [("gateway", process_kinds)] + [(c, NETWORK_FAULTS) for c in args.channels]
    for lane, kinds in lanes:
        if not kinds:
            continue
        at = rng.uniform(1.0, args.fault_every)
        while at < span:
            kind = rng.choice(kinds)
            length, detail = {
                "kill-9": (rng.uniform(0.2, 3.0), None),
                "sigterm": (rng.uniform(0.2, 2.0), None),
                "reload": (0.0, None),
                "disk-full": (rng.uniform(2.0, 8.0), None),
                "sigstop": (rng.uniform(0.5, 6.0), None),
                "refused": (rng.uniform(1.0, 10.0), None),
                "5xx-html": (rng.uniform(1.0, 8.0), None),
                "5xx-json": (rng.uniform(1.0, 8.0), None),
                "hang": (rng.uniform(2.0, 8.0), None),
                "drop": (0.0, rng.randrange(1 << 30)),
            }[kind]
            if lane == "gateway" and args.store == "redis":
                detail = rng.randrange(2)  # which of the two gateways
            faults.append(Fault(at, lane, kind, length, detail))
            at += length + rng.expovariate(1 / args.fault_every) + 1.0
    return sorted(faults, key=lambda f: f.at)


# -- gateway processes ----------------------------------------------------------------------


class Gateway:
    """One ``chatkernel run`` on a fixed port (the same after each restart, so the
    WhatsApp webhook keeps its address), its home kept over restarts."""

    def __init__(self, name: str, home: Path, log: Path) -> None:
        self.name = name
        self.home = home
        self.log_path = log
        self.port = free_port()
        self.process: Process | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    async def start(self, timeout: float = 60.0) -> None:
        environ = {**os.environ, "CHATKERNEL_HOME": str(self.home)}
        environ.pop("CHATKERNEL_CONFIG", None)
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        text = ""
        with self.log_path.open("ab") as log:
            for attempt in range(20):  # the port of a killed process may linger a moment
                self.process = await anyio.open_process(
                    [CHATKERNEL, "run", "--listen", f"127.0.0.1:{self.port}"],
                    env=environ, stdin=None, stdout=log, stderr=log)
                self.starts += 1
                with anyio.move_on_after(timeout):
                    while self.process.returncode is None:
                        with self.log_path.open("rb") as read:
                            read.seek(offset)
                            text = read.read().decode(errors="replace")
                        if "listening on" in text:
                            return
                        await anyio.sleep(0.05)
                await self.process.wait()
                if "address already in use" not in text.lower():
                    break
                offset = self.log_path.stat().st_size
                await anyio.sleep(0.25)
        raise RuntimeError(f"{self.name} did not start:\n{self.log()[-3000:]}")

    def signal(self, number: int) -> None:
        if self.alive:
            assert self.process is not None
            self.process.send_signal(number)

    async def wait(self, timeout: float) -> None:
        """Wait for it to end; SIGKILL after ``timeout`` seconds."""
        if self.process is None:
            return
        with anyio.move_on_after(timeout):
            await self.process.wait()
            return
        self.signal(signal.SIGKILL)
        await self.process.wait()

    async def stop(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        await self.wait(20)


# -- the platforms ----------------------------------------------------------------------------


class Platforms:
    """The four fakes, each behind a FaultProxy, and what the soak reads from them."""

    def __init__(self, channels: list[str]) -> None:
        self.channels = channels
        self.fakes: dict[str, Any] = {}
        self.proxies: dict[str, FaultProxy] = {}
        self.messages: dict[int, Message] = {}
        #: Answers whose token names no message of this run (must stay 0).
        self.strays: list[tuple[str, str]] = []
        #: When a gateway was stopped with SIGSTOP (monotonic start and end).
        self.stops: list[tuple[float, float]] = []

    @contextlib.asynccontextmanager
    async def running(self, seed: int) -> AsyncIterator[Platforms]:
        async with contextlib.AsyncExitStack() as stack:
            for channel in self.channels:
                fake = await stack.enter_async_context(make_fake(channel, seed))
                self.fakes[channel] = fake
                self.proxies[channel] = await stack.enter_async_context(
                    FaultProxy(fake.base_url))
                self._watch(channel, fake)
            if "slack" in self.fakes:  # the websocket's address: the proxy's, not the fake's
                self.fakes["slack"].socket_base = self.proxies["slack"].url
            yield self

    def _watch(self, channel: str, fake: Any) -> None:
        """Note each answer's time as the fake takes it (an instance attribute wraps the
        fake's own ``record_sent``)."""
        record = fake.record_sent

        def recorded(sent: Any) -> None:
            record(sent)
            text = answer_text(channel, sent) or ""
            for match in TOKEN.finditer(text):
                message = self.messages.get(int(match[2]))
                if message is None or message.channel != channel:
                    self.strays.append((channel, text))
                else:
                    message.answers.append(time.monotonic())

        fake.record_sent = recorded

    def account_tables(self, variant: int) -> dict[str, Any]:
        """Each channel's ``[channels.X]`` table; ``variant`` flips settings a reload
        applies by restarting the account."""
        tables: dict[str, Any] = {"webchat": {"enabled": False}}
        for channel, fake in self.fakes.items():
            base = self.proxies[channel].url
            account: dict[str, Any] = {"allow_from": ["*"]}
            if channel == "telegram":
                account.update(bot_token=fake.token, api_base=base, poll_timeout=1 + variant)
            elif channel == "slack":
                account.update(bot_token=fake.bot_token, app_token=fake.app_token,
                               api_base=f"{base}/api/", ping_interval=5.0 - variant)
            elif channel == "whatsapp":
                account.update(access_token=fake.token, phone_number_id=fake.phone_number_id,
                               app_secret=fake.app_secret, verify_token=fake.verify_token,
                               api_base=base)
            else:
                account.update(bot_token=fake.token, api_base=base, cdn_base=f"{base}/c2c")
            tables[channel] = {"accounts": {"soak": account}}
        return tables

    def inject(self, message: Message) -> None:
        fake = self.fakes[message.channel]
        self.messages[message.index] = message
        message.sent_at = time.monotonic()
        if message.channel == "telegram":
            fake.inject_message(int(message.chat), message.text, from_id=int(message.chat))
        elif message.channel == "slack":
            fake.inject_message(message.chat, message.text, user="U" + message.chat[1:])
            message.handle = fake.emitted[-1][1]["event_id"]
        elif message.channel == "whatsapp":
            message.handle = fake.inject_messages([fake.message(message.chat, message.text)])
        else:
            fake.inject_message(message.chat, message.text)

    def handed_over(self, message: Message) -> float:
        """When the platform handed the message to the gateways (monotonic). Their
        platforms hand a chat's messages over in the order they were written (a poll's
        updates in order, the fake WhatsApp's notifications of a user one after
        another, Slack's events as they happen), but for a Slack event sent to the
        socket of a gateway stopped with SIGSTOP and acknowledged only after it woke:
        the gateways had it when it woke."""
        sent = message.sent_at or 0.0
        if message.channel == "slack":
            fake = self.fakes["slack"]
            sent = fake.first_sent.get(message.handle, sent)
            acked = fake.acked_events.get(message.handle)
            for start, end in self.stops:
                if start <= sent < end and acked is not None and acked >= end:
                    return end
        return sent

    def state(self, message: Message) -> str:
        """``accepted``, ``pending`` (the platform still tries) or ``given up``."""
        fake = self.fakes[message.channel]
        if message.channel == "slack":
            if message.handle in fake.acked_events:
                return "accepted"
            if any(w["event_id"] == message.handle for w in fake.dropped):
                return "given up"
            return "pending"
        if message.channel == "whatsapp":
            notification = message.handle
            if notification.delivered:
                return "accepted"
            return "given up" if notification.attempts else "pending"
        return "accepted"  # a long poll's platform keeps it until the cursor passes it

    def network_fault(self, channel: str, kind: str, detail: Any) -> None:
        proxy, fake = self.proxies[channel], self.fakes[channel]
        if kind == "refused":
            proxy.stop()
        elif kind == "5xx-html":
            proxy.fail(502)
        elif kind == "5xx-json":
            proxy.fail(503, body=json.dumps(JSON_ERRORS[channel]).encode(),
                       headers={"Content-Type": "application/json"})
        elif kind == "hang":
            proxy.hold()
        elif kind == "drop":
            if channel == "slack":
                fake.drop_sockets()
            else:
                method, after = random.Random(detail).choice(DROPS[channel])
                fake.faults.drop(method, after_processing=after)

    def recover(self, channel: str) -> None:
        self.proxies[channel].recover()
        self.proxies[channel].start()


def answer_text(channel: str, sent: Any) -> str | None:
    if channel in ("telegram", "slack"):
        return sent.plain_text
    return sent.text


def make_fake(channel: str, seed: int) -> Any:
    if channel == "telegram":
        from chatkernel_telegram.fake import FakeBotAPI

        return FakeBotAPI()
    if channel == "slack":
        return soak_slack(seed)
    if channel == "whatsapp":
        from chatkernel_whatsapp.fake import FakeGraph

        graph = FakeGraph(webhook_workers=4, seed=seed)
        graph.webhooks.delays = WHATSAPP_RETRIES
        return graph
    from chatkernel_wechat.fake import FakeILink

    return FakeILink(seed=seed)


def soak_slack(seed: int) -> Any:
    """The fake Slack, its Socket Mode URLs pointing at the proxy (so the websocket goes
    through it), and the events whose envelopes were acknowledged kept by event id."""
    from chatkernel_slack.fake import FakeSlack

    class SoakSlack(FakeSlack):
        socket_base: str | None = None

        def __init__(self) -> None:
            super().__init__(seed=seed)
            #: Event id -> when an envelope of it was first sent, and first
            #: acknowledged (monotonic).
            self.first_sent: dict[str, float] = {}
            self.acked_events: dict[str, float] = {}

        async def _send_envelope(self, app, delivery, sockets):  # type: ignore[no-untyped-def]
            self.first_sent.setdefault(delivery.event_id, time.monotonic())
            await super()._send_envelope(app, delivery, sockets)

        async def _api_apps_connections_open(self, app, p):  # type: ignore[no-untyped-def]
            answer = await super()._api_apps_connections_open(app, p)
            if self.socket_base:
                answer["url"] = answer["url"].replace(
                    self.base_url.replace("http://", "ws://"),
                    self.socket_base.replace("http://", "ws://"))
            return answer

        def _ack(self, app, data):  # type: ignore[no-untyped-def]
            super()._ack(app, data)
            with contextlib.suppress(ValueError, AttributeError):
                envelope = self._envelopes_by_id.get(json.loads(data).get("envelope_id"))
                if envelope is not None:
                    self.acked_events.setdefault(envelope.event_id, time.monotonic())

    return SoakSlack()


# -- the run ------------------------------------------------------------------------------------


class Soak:
    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args = args
        self.root = root
        self.rng = random.Random(args.seed)
        self.platforms = Platforms(args.channels)
        self.gateways: list[Gateway] = []
        self.disk: SmallDisk | None = None
        self.disk_note = ""
        self.redis: Any = None
        self.variant = 0
        self.fault_counts: collections.Counter[str] = collections.Counter()
        self.faults_on = True
        self.events: list[str] = []
        self.started = 0.0

    def note(self, line: str) -> None:
        stamp = time.monotonic() - self.started if self.started else 0.0
        self.events.append(f"{stamp:8.2f}s {line}")
        if self.args.verbose:
            print(f"  {stamp:8.2f}s {line}", file=sys.stderr, flush=True)

    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "agent": {"kind": "echo"},
            "queue": {"mode": "followup", "debounce_ms": 0},
            "channels": self.platforms.account_tables(self.variant),
        }
        if self.redis is not None:
            config["store"] = {"backend": "redis", "url": self.redis.url, "prefix": "soak:"}
        return config

    def write_configs(self) -> None:
        text = tomlkit.dumps(self.config())
        for gateway in self.gateways:
            (gateway.home / "config.toml").write_text(text)

    async def run(self) -> int:
        args = self.args
        messages = plan_messages(self.rng, args)
        span = min(args.duration, messages[-1].at if messages else 0.0)
        kinds = PROCESS_FAULTS[args.store]
        if args.store == "sqlite":
            self.disk = SmallDisk(self.root / "disk", size_mb=args.disk_mb)
            try:
                self.disk.mount()
            except DiskUnavailable as exc:
                self.disk, self.disk_note = None, f"disk-full left out: {exc}"
                kinds = tuple(k for k in kinds if k != "disk-full")
        kinds = tuple(k for k in kinds if k not in args.without)
        faults = plan_faults(random.Random(f"{args.seed}:faults"), args, span, kinds)
        faults = [f for f in faults if f.kind not in args.without]
        if args.max_faults is not None:
            faults = faults[:args.max_faults]
        try:
            return await self._run(messages, faults, span)
        finally:
            if self.disk is not None:
                self.disk.free()
                self.disk.unmount()

    async def _run(self, messages: list[Message], faults: list[Fault], span: float) -> int:
        args = self.args
        with contextlib.ExitStack() as stack:
            if args.store == "redis":
                from chatkernel.testing.redis import RedisServer

                self.redis = stack.enter_context(RedisServer(self.root / "redis"))
            async with self.platforms.running(args.seed) as platforms, \
                    contextlib.AsyncExitStack() as processes:
                homes = self.disk.path if self.disk is not None else self.root / "homes"
                for n in range(2 if args.store == "redis" else 1):
                    home = homes / f"gateway-{n + 1}"
                    home.mkdir(parents=True)
                    self.gateways.append(Gateway(f"gateway-{n + 1}", home,
                                                 self.root / f"gateway-{n + 1}.log"))
                self.write_configs()
                for gateway in self.gateways:
                    processes.push_async_callback(gateway.stop)
                    await gateway.start()
                front = None
                if "whatsapp" in platforms.fakes:
                    webhook = self.gateways[0].url
                    if len(self.gateways) > 1:
                        from chatkernel.testing.instances import RoundRobin

                        front = await processes.enter_async_context(RoundRobin())
                        front.backends = [g.url for g in self.gateways]
                        webhook = front.url
                    graph = platforms.fakes["whatsapp"]
                    if not await graph.subscribe(f"{webhook}/whatsapp/soak/webhook"):
                        raise RuntimeError(f"the webhook's verification failed: "
                                           f"{graph.verifications[-1]}")
                await anyio.sleep(1.0)  # the accounts connected
                self.started = time.monotonic()
                sent = await self._load(messages, faults, span)
                drained = await self._drain(messages[:sent])
                await anyio.sleep(args.settle)  # late duplicates show up too
                return self._report(messages[:sent], len(messages), drained, faults)

    async def _load(self, messages: list[Message], faults: list[Fault], span: float) -> int:
        """Inject the messages on their schedule while the fault lanes run; returns how
        many were sent within ``--duration``."""
        sent = 0
        async with anyio.create_task_group() as tg:
            lanes: dict[str, list[Fault]] = collections.defaultdict(list)
            for fault in faults:
                lanes[fault.lane].append(fault)
            for lane in lanes.values():
                tg.start_soon(self._lane, lane)
            deadline = self.started + self.args.duration
            for message in messages:
                when = self.started + message.at
                if when > deadline:
                    break
                await anyio.sleep(max(0.0, when - time.monotonic()))
                self.platforms.inject(message)
                sent += 1
                if sent % 1000 == 0:
                    self.note(f"{sent} messages sent, "
                              f"{sum(1 for m in messages[:sent] if m.answers)} answered")
            self.faults_on = False
            tg.cancel_scope.cancel()
        await self._heal()
        return sent

    async def _lane(self, faults: list[Fault]) -> None:
        for fault in faults:
            await anyio.sleep(max(0.0, self.started + fault.at - time.monotonic()))
            if not self.faults_on:
                return
            self.fault_counts[f"{fault.lane} {fault.kind}"] += 1
            self.note(f"{fault.lane}: {fault.kind} ({fault.length:.1f}s)")
            if fault.lane == "gateway":
                await self._process_fault(fault)
            else:
                self.platforms.network_fault(fault.lane, fault.kind, fault.detail)
                try:
                    await anyio.sleep(fault.length)
                finally:
                    self.platforms.recover(fault.lane)

    async def _process_fault(self, fault: Fault) -> None:
        target = self.gateways[fault.detail or 0]
        if fault.kind == "kill-9":
            target.signal(signal.SIGKILL)
            await target.wait(10)
            with anyio.CancelScope(shield=True):
                await anyio.sleep(fault.length)
                await target.start()
        elif fault.kind == "sigterm":
            target.signal(signal.SIGTERM)
            with anyio.CancelScope(shield=True):
                await target.wait(30)
                await anyio.sleep(fault.length)
                await target.start()
        elif fault.kind == "reload":
            self.variant ^= 1
            self.write_configs()
            for gateway in self.gateways:
                gateway.signal(signal.SIGHUP)
        elif fault.kind == "sigstop":
            target.signal(signal.SIGSTOP)
            stopped = time.monotonic()
            try:
                await anyio.sleep(fault.length)
            finally:
                target.signal(signal.SIGCONT)
                self.platforms.stops.append((stopped, time.monotonic()))
        elif fault.kind == "disk-full":
            assert self.disk is not None
            taken = await anyio.to_thread.run_sync(self.disk.fill)
            self.note(f"disk full ({taken / 1e6:.0f} MB taken)")
            try:
                await anyio.sleep(fault.length)
            finally:
                self.disk.free()

    async def _heal(self) -> None:
        """Every fault undone: proxies forward, the disk has room, every gateway runs."""
        for channel in self.platforms.channels:
            self.platforms.recover(channel)
        if self.disk is not None:
            self.disk.free()
        for gateway in self.gateways:
            gateway.signal(signal.SIGCONT)
            if not gateway.alive:
                await gateway.wait(30)
                await gateway.start()

    async def _drain(self, messages: list[Message]) -> float:
        """Wait (at most ``--drain`` seconds) until every message is answered, given up
        by its platform, or reported "delivery unknown" by the gateway (never sent
        again: no answer is coming); returns how long it took."""
        began = time.monotonic()
        with anyio.move_on_after(self.args.drain):
            while True:
                open_ = [m for m in messages if not m.answers
                         and self.platforms.state(m) != "given up"]
                if open_:
                    unknown = "\n".join(line for gateway in self.gateways
                                        for line in gateway.log().splitlines()
                                        if "delivery unknown" in line)
                    open_ = [m for m in open_ if not reported_unknown(m, unknown)]
                if not open_:
                    break
                await anyio.sleep(0.5)
        return time.monotonic() - began

    # -- the report ---------------------------------------------------------------------------

    def _report(self, messages: list[Message], planned: int, drained: float,
                faults: list[Fault]) -> int:
        args = self.args
        platforms = self.platforms
        logs = "\n".join(g.log() for g in self.gateways)
        rows = []
        problems = 0
        lost_lines: list[str] = []
        for channel in args.channels:
            mine = [m for m in messages if m.channel == channel]
            states = collections.Counter(platforms.state(m) for m in mine)
            answered = [m for m in mine if m.answers]
            unanswered = [m for m in mine if not m.answers
                          and platforms.state(m) != "given up"]
            refused = [m for m in unanswered if refused_by_rule(m, logs)]
            unknown = [m for m in unanswered
                       if m not in refused and reported_unknown(m, logs)]
            lost = [m for m in unanswered if m not in refused and m not in unknown]
            dup = sum(len(m.answers) - 1 for m in mine if len(m.answers) > 1)
            reordered = 0
            chats: dict[str, list[Message]] = collections.defaultdict(list)
            for m in answered:
                chats[m.chat].append(m)
            for chat_messages in chats.values():
                by_gateway, by_platform = out_of_order(chat_messages, platforms.handed_over)
                reordered += len(by_gateway)
                for m, after in by_gateway:
                    lost_lines.append(
                        f"  out of order {channel} chat {m.chat}: #{m.seq} "
                        f"{m.text.split()[0]!r} (sent at {(m.sent_at or 0) - self.started:.1f}s)"
                        f" answered at {m.answers[0] - self.started:.1f}s, after #{after.seq}")
                for m, after in by_platform:
                    lost_lines.append(
                        f"  handed over out of order by {channel} (not counted) chat {m.chat}:"
                        f" #{m.seq} {m.text.split()[0]!r} (sent at "
                        f"{(m.sent_at or 0) - self.started:.1f}s) reached the gateway at "
                        f"{platforms.handed_over(m) - self.started:.1f}s, after #{after.seq} "
                        f"at {platforms.handed_over(after) - self.started:.1f}s, and was "
                        "answered after it")
            latencies = sorted(m.answers[0] - m.sent_at for m in answered
                               if m.sent_at is not None)
            rows.append((channel, len(mine), states["accepted"], states["given up"],
                         len(answered), len(lost), dup, reordered, len(refused), len(unknown),
                         latencies))
            problems += len(lost) + dup + reordered
            for m in lost[:10] + unknown[:10] + refused[:3]:
                token = m.text.split()[0]
                said = [line for line in logs.splitlines() if token in line]
                what = "refused" if m in refused else "unknown" if m in unknown else "lost"
                if what == "unknown":
                    said = [line for line in said if "delivery unknown" in line]
                lost_lines.append(f"  {what} {channel} chat {m.chat} #{m.seq} {token!r} "
                                  f"(sent at {(m.sent_at or 0) - self.started:.1f}s, "
                                  f"{platforms.state(m)})"
                                  + (f": {said[-1].strip()[:300]}" if said else
                                     ": nothing about it in the gateway's log"))
            for m in [m for m in mine if len(m.answers) > 1][:10]:
                times = ", ".join(f"{t - self.started:.2f}s" for t in m.answers)
                lost_lines.append(f"  twice {channel} chat {m.chat} #{m.seq} "
                                  f"{m.text.split()[0]!r}: sent at "
                                  f"{(m.sent_at or 0) - self.started:.2f}s, answered at {times}")
        problems += len(platforms.strays)

        print(f"soak seed {args.seed}: {len(messages):,} of {planned:,} messages sent over "
              f"{', '.join(args.channels)} ({args.chats} chats each, {args.rate:g}/s), "
              f"store {args.store}, {len(self.gateways)} gateway(s)")
        if self.disk_note:
            print(f"  ({self.disk_note})")
        print(f"\n{'channel':<9} {'sent':>6} {'accepted':>8} {'given up':>8} "
              f"{'answered':>8} {'lost':>5} {'dup':>4} {'reord':>5} {'refused':>7} "
              f"{'unknown':>7} {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>8} {'max ms':>8}")
        every: list[float] = []
        for (channel, sent, accepted, given_up, answered, lost, dup, reordered, refused_n,
             unknown_n, latencies) in rows:
            every += latencies
            print(f"{channel:<9} {sent:>6,} {accepted:>8,} {given_up:>8,} {answered:>8,} "
                  f"{lost:>5} {dup:>4} {reordered:>5} {refused_n:>7} {unknown_n:>7} "
                  + latency_columns(latencies))
        every.sort()
        totals = [sum(r[i] for r in rows) for i in range(1, 10)]
        print(f"{'total':<9} {totals[0]:>6,} {totals[1]:>8,} {totals[2]:>8,} "
              f"{totals[3]:>8,} {totals[4]:>5} {totals[5]:>4} {totals[6]:>5} {totals[7]:>7} "
              f"{totals[8]:>7} " + latency_columns(every))
        counts = collections.Counter()
        for key, count in self.fault_counts.items():
            counts[key.split(" ", 1)[1]] += count
        print(f"\nfaults ({sum(counts.values())}): "
              + ", ".join(f"{kind} {count}" for kind, count in sorted(counts.items())))
        per_lane = collections.Counter()
        for key, count in self.fault_counts.items():
            per_lane[key.split(" ", 1)[0]] += count
        print("by lane: " + ", ".join(f"{lane} {n}" for lane, n in sorted(per_lane.items())))
        starts = sum(g.starts for g in self.gateways)
        print(f"gateway starts: {starts} ({len(self.gateways)} at first); drained in "
              f"{drained:.1f}s; run {time.monotonic() - self.started:.0f}s")
        unknown = len(re.findall(r"delivery unknown", logs))
        failed = len(re.findall(r"delivery failed", logs))
        logging_errors = logs.count("--- Logging error ---")
        # What logging prints when it cannot write its own file (a full disk) is not
        # the gateway failing: those blocks are counted apart.
        rest = re.sub(r"--- Logging error ---.*?\nArguments:[^\n]*\n", "", logs,
                      flags=re.DOTALL)
        tracebacks = rest.count("Traceback (most recent call last)")
        print(f"gateway log: {unknown} 'delivery unknown', {failed} 'delivery failed', "
              f"{tracebacks} traceback(s); {logging_errors} logging error(s) (its own log "
              "file on the full disk)")
        if platforms.strays:
            print(f"answers naming no message of this run: {len(platforms.strays)}, e.g. "
                  f"{platforms.strays[:3]}")
        for line in lost_lines:
            print(line)
        verdict = "PASS" if not problems else "FAIL"
        refusals = (f"; {totals[7]} refused by the platform's own rules"
                    if totals[7] else "")
        unknowns = (f"; {totals[8]} delivery unknown (in flight at a kill -9)"
                    if totals[8] else "")
        print(f"\n{verdict}: {totals[4]} lost, {totals[5]} duplicated, {totals[6]} reordered"
              f"{refusals}{unknowns} (seed {args.seed}; replay: --seed {args.seed})")
        if args.keep and problems:
            for gateway in self.gateways:
                shutil.copytree(gateway.home, Path(args.keep) / gateway.name,
                                ignore=shutil.ignore_patterns(".filler"), dirs_exist_ok=True)
            if self.redis is not None:  # its append-only file: the shared state
                shutil.copytree(self.redis.directory, Path(args.keep) / "redis",
                                dirs_exist_ok=True)
        if args.events:
            Path(args.events).write_text("\n".join(self.events) + "\n")
        if args.keep_logs:
            for gateway in self.gateways:
                shutil.copy(gateway.log_path, Path(args.keep_logs) / gateway.log_path.name)
        return 1 if problems else 0


def refused_by_rule(message: Message, logs: str) -> bool:
    """Whether the gateway reports its answer refused by a rule of the platform's own
    (WeChat's ``ret=-2``: ten bot messages since the user last wrote), or held back
    after such a refusal: the platform's limit, not the gateway losing it."""
    token = message.text.split()[0]
    return any(token in line and ("WeChat refused" in line or "held back after WeChat "
                                  "refused" in line) for line in logs.splitlines())


def reported_unknown(message: Message, logs: str) -> bool:
    """Whether the gateway reports the message's reply as "delivery unknown": its request
    may or may not have reached the platform (a kill -9 between its ``sending`` mark
    and the request; the next owner or start names it), so it is never sent again
    (docs/outbound.md). Unanswered, it is a loss by design, not the gateway's."""
    token = message.text.split()[0]
    return any(token in line and "delivery unknown" in line for line in logs.splitlines())


def out_of_order(answered: list[Message], handed_over: Callable[[Message], float]
                 ) -> tuple[list[tuple[Message, Message]], list[tuple[Message, Message]]]:
    """A chat's answers out of its sequence, each as (message, the latest message of
    the chat answered before it), in two lists: those the gateway put out of order, and
    those its platform handed over in that order (``handed_over(message)``: when the
    gateway got it), which the gateway answered as it got them."""
    by_answer = sorted(answered, key=lambda m: m.answers[0])
    by_gateway: list[tuple[Message, Message]] = []
    by_platform: list[tuple[Message, Message]] = []
    for index, message in enumerate(by_answer):
        later = [m for m in by_answer[:index] if m.seq > message.seq]
        if not later:
            continue
        handed_later = [m for m in later if handed_over(m) > handed_over(message)]
        if handed_later:
            by_gateway.append((message, max(handed_later, key=lambda m: m.seq)))
        else:
            by_platform.append((message, max(later, key=lambda m: m.seq)))
    return by_gateway, by_platform


def latency_columns(values: list[float]) -> str:
    if not values:
        return f"{'-':>7} {'-':>7} {'-':>8} {'-':>8}"

    def q(p: float) -> float:
        return values[min(len(values) - 1, int(p * len(values)))] * 1000

    return f"{q(0.5):>7,.0f} {q(0.9):>7,.0f} {q(0.99):>8,.0f} {values[-1] * 1000:>8,.0f}"


async def main(args: argparse.Namespace) -> int:
    print(f"soak: seed {args.seed}", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="chatkernel-soak-") as tmp:
        try:
            return await Soak(args, Path(tmp)).run()
        except RuntimeError as exc:  # a gateway that would not start, a failed handshake
            print(f"soak: {exc}", file=sys.stderr)
            return 2


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None,
                        help="the schedule's seed (default: a new one, printed)")
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=12.0, help="messages a second")
    parser.add_argument("--chats", type=int, default=60, help="chats on each channel")
    parser.add_argument("--channels", default=",".join(CHANNELS),
                        help="comma-separated, of " + ", ".join(CHANNELS))
    parser.add_argument("--store", choices=("sqlite", "redis"), default="sqlite",
                        help="redis: two gateways sharing a redis-server")
    parser.add_argument("--duration", type=float, default=1200.0,
                        help="stop sending after this many seconds")
    parser.add_argument("--drain", type=float, default=240.0,
                        help="wait at most this long for the answers afterwards")
    parser.add_argument("--settle", type=float, default=3.0,
                        help="seconds to wait for late duplicates after the drain")
    parser.add_argument("--fault-every", type=float, default=10.0,
                        help="the mean pause between two faults of a lane, in seconds")
    parser.add_argument("--max-faults", type=int, default=None,
                        help="only the first N faults of the schedule")
    parser.add_argument("--without", default="",
                        help="fault kinds left out, comma-separated")
    parser.add_argument("--disk-mb", type=int, default=192,
                        help="the size of the home's tmpfs (disk-full faults)")
    parser.add_argument("--events", metavar="FILE", help="write the timeline of faults here")
    parser.add_argument("--keep-logs", metavar="DIR", help="copy the gateways' logs here")
    parser.add_argument("--keep", metavar="DIR",
                        help="on a loss, duplicate or reordering, copy the gateways' homes "
                             "(state databases) and the Redis server's files here")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print each fault as it happens (stderr)")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 1_000_000)
    args.channels = [c for c in args.channels.split(",") if c]
    unknown = set(args.channels) - set(CHANNELS)
    if unknown or not args.channels:
        parser.error(f"unknown channel(s) {sorted(unknown)}; of {', '.join(CHANNELS)}")
    args.without = {k for k in args.without.split(",") if k}
    return args


if __name__ == "__main__":
    sys.exit(anyio.run(main, parse()))
