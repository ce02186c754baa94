"""Scale-out on Redis: the same work on one gateway on SQLite and on 1, 2 and 3 gateway
processes sharing a Redis server, in one run; then the failover gap.

The work: ``--accounts`` Telegram bots on the plugin's fake Bot API (pacing lifted, so
the gateways, not the limits, are measured), ``--messages`` messages spread over
``--chats`` chats of each bot, all injected at once, the echo agent answering. Each
contender runs real ``chatkernel run`` processes (their own homes, one Redis server the
benchmark starts on 127.0.0.1). Reported per contender: messages answered per second,
that as a ratio of the single SQLite gateway, the requests to Redis per message (each
process counts its own: ``chatkernel_store_round_trips`` on ``/metrics``; lease
renewals and inbox reads included), the gateways' CPU time per message (user + system,
from ``/proc``), on Redis the server's CPU time and the commands it ran per message
(``INFO cpu`` and ``INFO commandstats``: the commands a script runs count, the scripts'
calls too), and duplicates and reorderings (both must be 0).

Failover: three gateways with ``--lease`` seconds leases, one message a chat every 50 ms
to one bot, and its owner killed (SIGKILL) ``--kills`` times: the gap is the time from
the kill to the first answer by the next owner. It is about the lease's time to live
(the dead owner's lease must run out) plus up to a quarter of it (how often the others
look), plus the takeover. ``--failover-only`` measures just that, at the default lease
unless ``--lease`` says otherwise.

    .venv/bin/python bench/scaleout.py
    .venv/bin/python bench/scaleout.py --accounts 6 --messages 1200 --lease 10 --kills 3
    .venv/bin/python bench/scaleout.py --failover-only   # the gap at the default lease
    .venv/bin/python bench/scaleout.py --kills 1 --profile /tmp/prof   # cProfile each gateway
    .venv/bin/python bench/profile_summary.py /tmp/prof/redis-1/*.prof

``--profile DIR`` runs each gateway under cProfile (bench/profiling/sitecustomize.py),
writing ``DIR/<store>-<instances>/<pid>.prof`` when it exits.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import anyio

from chatkernel.testing import BUSY_HINT
from chatkernel.testing.instances import GatewayInstances, wait_for_owner
from chatkernel.testing.redis import RedisServer, RedisStore
from chatkernel_telegram.fake import FakeBotAPI


#: The sitecustomize that profiles a gateway (see --profile).
PROFILING = Path(__file__).with_name("profiling")


def profiling_env(args: argparse.Namespace, contender: str) -> dict[str, str]:
    """The environment that has a contender's gateways profiled, with --profile."""
    if not getattr(args, "profile", None):
        return {}
    where = Path(args.profile) / contender
    where.mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join(filter(None, [str(PROFILING), os.environ.get("PYTHONPATH")]))
    return {"CHATKERNEL_PROFILE": str(where), "PYTHONPATH": path}


def gateway_config(api: FakeBotAPI, tokens: list[str], store: dict[str, Any], *,
                   lease: float | None) -> dict[str, Any]:
    if store.get("backend") == "redis" and lease is not None:
        store = {**store, "lease_seconds": lease}
    return {
        "store": store,
        "agent": {"kind": "echo"},
        "queue": {"mode": "followup", "debounce_ms": 0, "max_concurrent": 64, "cap": 1000},
        "heartbeat": {"every": "0"},
        "channels": {"webchat": {"enabled": False}, "telegram": {
            "rate_limits": {"chat": "off", "account": "off", "group": "off"},
            "accounts": {f"bot{i}": {"bot_token": token, "api_base": api.base_url,
                                     "allow_from": ["*"], "poll_timeout": 1}
                         for i, token in enumerate(tokens)}}},
    }


def round_trips(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("chatkernel_store_round_trips "):
                return float(line.split()[1])
    return 0.0


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU time so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def answers(api: FakeBotAPI) -> list[Any]:
    return [m for m in api.sent_messages if m.plain_text != BUSY_HINT]


async def all_answered(api: FakeBotAPI, want: int) -> None:
    """Wait until ``want`` answers were sent, reading each sent message once: the
    fake shares this process, and a poll that went over every message so far each
    time took the CPU the fake's answers to the gateways wanted."""
    seen = answered = 0
    while True:
        sent = api.sent_messages
        answered += sum(1 for m in sent[seen:] if m.plain_text != BUSY_HINT)
        seen = len(sent)
        if answered >= want:
            return
        await anyio.sleep(0.01)


async def balanced(store: RedisStore, accounts: int, instances: int, timeout: float) -> None:
    """Wait until every account is owned and no instance owns more than its share."""
    share = -(-accounts // instances)
    with anyio.fail_after(timeout):
        while True:
            owners = collections.Counter(
                holder for name, (holder, _, _) in (await store.leases()).items()
                if name.startswith("account:"))
            if sum(owners.values()) == accounts and max(owners.values()) <= share \
                    and len(owners) == min(instances, accounts):
                return
            await anyio.sleep(0.1)


async def server_stats(url: str, *, reset: bool = False) -> tuple[float, int]:
    """The Redis server's CPU seconds so far and the commands it ran since the last
    reset (``reset``: start counting them now)."""
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(url)
    try:
        if reset:
            await client.config_resetstat()
        cpu = await client.info("cpu")
        commands = await client.info("commandstats")
    finally:
        await client.aclose()
    return (cpu["used_cpu_user"] + cpu["used_cpu_sys"],
            sum(stat["calls"] for name, stat in commands.items()
                if name != "cmdstat_config|resetstat"))


async def burst(root: Path, api: FakeBotAPI, tokens: list[str], store: dict[str, Any],
                instances: int, args: argparse.Namespace,
                shared: RedisStore | None) -> dict[str, Any]:
    api.sent_messages.clear()
    config = gateway_config(api, tokens, store, lease=args.burst_lease)
    env = profiling_env(args, f"{store['backend']}-{instances}")
    async with GatewayInstances(root, config, env=env) as gateways:
        for _ in range(instances):
            await gateways.start()
        if shared is not None:
            await balanced(shared, len(tokens), instances, timeout=120)
        await anyio.sleep(0.5)  # every poller waiting
        before = sum(round_trips(g.url) for g in gateways.alive)
        cpu_before = sum(cpu_seconds(g.pid) for g in gateways.alive)
        if shared is not None:
            server_cpu_before, _ = await server_stats(store["url"], reset=True)
        expected: dict[tuple[str, int], list[str]] = collections.defaultdict(list)
        per_bot = args.messages // len(tokens)
        started = time.perf_counter()
        for i in range(per_bot):
            for b, token in enumerate(tokens):
                chat = 5000 + i % args.chats
                text = f"bot {b} message {i}"
                expected[token, chat].append(text)
                api.inject_message(chat, text, token=token)
        want = per_bot * len(tokens)
        with anyio.fail_after(300):
            await all_answered(api, want)
        elapsed = time.perf_counter() - started
        after = sum(round_trips(g.url) for g in gateways.alive)
        cpu = sum(cpu_seconds(g.pid) for g in gateways.alive) - cpu_before
        server_cpu = server_commands = None
        if shared is not None:
            server_cpu, server_commands = await server_stats(store["url"])
            server_cpu -= server_cpu_before
    sent = answers(api)
    texts = collections.Counter(m.plain_text for m in sent)
    reordered = 0
    for (token, chat), wanted in expected.items():
        got = [m.plain_text for m in api.sent(token, chat_id=chat) if m.plain_text != BUSY_HINT]
        reordered += sum(1 for a, b in zip(got, wanted) if a != b)
    return {"rate": want / elapsed, "trips": (after - before) / want, "cpu": cpu / want,
            "server_cpu": None if server_cpu is None else server_cpu / want,
            "server_commands": None if server_commands is None else server_commands / want,
            "dupes": sum(count - 1 for count in texts.values() if count > 1),
            "reordered": reordered}


async def failover(root: Path, api: FakeBotAPI, tokens: list[str], url: str,
                   args: argparse.Namespace) -> list[float]:
    prefix = "bench-failover:"
    store = {"backend": "redis", "url": url, "prefix": prefix}
    config = gateway_config(api, tokens[:1], store, lease=args.lease)
    token = tokens[0]
    lease = args.lease or 10.0  # for the timeouts only
    gaps = []
    async with GatewayInstances(root, config) as gateways, \
            RedisStore.at(url, prefix=prefix) as shared:
        for _ in range(3):
            await gateways.start()
        for kill in range(args.kills):
            holder, _ = await wait_for_owner(shared, "account:telegram:bot0",
                                             timeout=lease * 5)
            victim = gateways.owner(holder)
            assert victim is not None
            victim.kill()
            killed_at = time.time()
            await victim.process.wait()
            marker = f"after kill {kill}"
            i = 0
            with anyio.fail_after(lease * 6):
                while True:  # one message every 50 ms until one is answered
                    api.inject_message(6000, f"{marker} #{i}", token=token)
                    i += 1
                    await anyio.sleep(0.05)
                    if any(m.plain_text.startswith(marker) for m in api.sent(token)):
                        break
            first = min(m.timestamp for m in api.sent(token) if m.plain_text.startswith(marker))
            gaps.append(first - killed_at)
            await gateways.start()  # three again
    return gaps


async def failover_only(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="chatkernel-failover-") as tmp, \
            RedisServer(Path(tmp) / "redis") as server:
        async with FakeBotAPI() as api:
            gaps = await failover(Path(tmp) / "failover", api, [api.token], server.url, args)
    print_gaps(args, gaps)


def print_gaps(args: argparse.Namespace, gaps: list[float]) -> None:
    lease = "the default" if args.lease is None else f"{args.lease:g} s"
    print(f"failover gap with {lease} leases (kill -9 of the owner to the next "
          f"owner's first answer): " + ", ".join(f"{gap:.2f} s" for gap in gaps)
          + (f"; median {statistics.median(gaps):.2f} s" if gaps else "none measured"))


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="chatkernel-scaleout-") as tmp, \
            RedisServer(Path(tmp) / "redis") as server:
        root = Path(tmp)
        async with FakeBotAPI() as api:
            tokens = [api.token] + [f"{123456 + i}:ABC-DEF1234ghIkl-zyx57W2v1u123ew11"
                                    for i in range(1, args.accounts)]
            for i, token in enumerate(tokens[1:], start=1):
                api.add_bot(token, f"bench{i}_bot")
            results = []
            for label, instances in (("sqlite", 1), ("redis", 1), ("redis", 2), ("redis", 3)):
                if label == "sqlite":
                    store, shared = {"backend": "sqlite"}, None
                else:
                    prefix = f"bench-{instances}:"
                    store = {"backend": "redis", "url": server.url, "prefix": prefix}
                    shared = RedisStore.at(server.url, prefix=prefix)
                    await shared.open()
                try:
                    result = await burst(root / f"{label}-{instances}", api, tokens, store,
                                         instances, args, shared)
                finally:
                    if shared is not None:
                        await shared.close()
                results.append((label, instances, result))
                print(f"  {label} x{instances}: {result['rate']:,.0f} msgs/s", file=sys.stderr)
            gaps = await failover(root / "failover", api, tokens, server.url, args)
    floor = results[0][2]["rate"]
    print(f"{args.messages} messages over {args.accounts} bots x {args.chats} chats, "
          "echo agent, pacing lifted")
    print(f"{'store':<8} {'instances':>9} {'msgs/s':>9} {'x sqlite':>9} "
          f"{'redis req/msg':>14} {'cpu µs/msg':>11} {'server µs/msg':>14} "
          f"{'server cmds/msg':>16} {'dupes':>6} {'reordered':>10}")
    for label, instances, r in results:
        trips = "-" if label == "sqlite" else f"{r['trips']:.2f}"
        server_cpu = "-" if r["server_cpu"] is None else f"{r['server_cpu'] * 1e6:,.0f}"
        commands = "-" if r["server_commands"] is None else f"{r['server_commands']:.1f}"
        print(f"{label:<8} {instances:>9} {r['rate']:>9,.0f} {r['rate'] / floor:>9.2f} "
              f"{trips:>14} {r['cpu'] * 1e6:>11,.0f} {server_cpu:>14} {commands:>16} "
              f"{r['dupes']:>6} {r['reordered']:>10}")
    print_gaps(args, gaps)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--accounts", type=int, default=6)
    parser.add_argument("--messages", type=int, default=1200)
    parser.add_argument("--chats", type=int, default=10)
    parser.add_argument("--lease", type=float, default=None,
                        help="the lease of the failover part (default: the config's default)")
    parser.add_argument("--burst-lease", type=float, default=3.0,
                        help="the lease while measuring throughput (shorter: balanced sooner)")
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--failover-only", action="store_true",
                        help="measure only the failover gap")
    parser.add_argument("--profile", metavar="DIR",
                        help="run each burst's gateways under cProfile, files in DIR")
    arguments = parser.parse_args()
    anyio.run(failover_only if arguments.failover_only else main, arguments)
