"""Resident memory of a real gateway across many distinct chats, and its throughput.

A ``chatkernel run`` child process (the embedded web chat, echo agent, SQLite) gets
``--chats`` messages, each in a chat never seen before, from ``--clients`` concurrent
HTTP clients on 127.0.0.1. Every ``--sample`` messages the gateway's resident memory
(``VmRSS``) and the window's rate are printed; at the end, the ratios of the last
window to the first. Flat memory is a ratio near 1 once the caches are full
(``[sessions] cache_size``, the web chat's ``max_chats``).

Then, in this process, the rate limiter alone (chatkernel.core.outbound.ratelimit, a
per-chat limit of 1/s as Telegram's): how many chats it tracks while sends to
``--chats`` distinct chats go out at ``--send-rate`` per second of a simulated clock.

    .venv/bin/python bench/memory.py [--chats 100000] [--clients 32] [--sample 10000]

Linux only (it reads /proc). Figures are machine-dependent: compare the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

MB = 1024 * 1024


def resident(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


async def load(url: str, pid: int, chats: int, clients: int, sample: int
               ) -> list[tuple[int, float, float]]:
    """Post one message to each of ``chats`` new chats; returns (messages sent, RSS in MB,
    messages/s in the window) per sample."""
    import aiohttp

    samples: list[tuple[int, float, float]] = []
    sent = 0
    window_started = time.perf_counter()
    lock = asyncio.Lock()
    numbers = iter(range(chats))

    async def client(http: aiohttp.ClientSession) -> None:
        nonlocal sent, window_started
        for n in numbers:
            body = {"chat_id": f"bench-{n}", "user_id": f"user-{n}", "text": f"hello {n}"}
            async with http.post(f"{url}/webchat/messages", json=body) as response:
                if response.status != 202:
                    raise RuntimeError(f"message {n}: HTTP {response.status} "
                                       f"{await response.text()}")
            async with lock:
                sent += 1
                if sent % sample == 0:
                    now = time.perf_counter()
                    samples.append((sent, resident(pid) / MB, sample / (now - window_started)))
                    print(f"{sent:>10,}{samples[-1][1]:>12.1f}{samples[-1][2]:>12,.0f}",
                          flush=True)
                    window_started = now

    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return samples


def gateway_figures(chats: int, clients: int, sample: int, settle: float) -> None:
    from chatkernel.testing.process import gateway_process

    with tempfile.TemporaryDirectory() as home, gateway_process(Path(home)) as gateway:
        pid = gateway.process.pid
        started = resident(pid) / MB
        print(f"gateway pid {pid}, {started:.1f} MB resident after start\n")
        print(f"{'messages':>10}{'RSS MB':>12}{'msgs/s':>12}")
        samples = asyncio.run(load(gateway.url, pid, chats, clients, sample))
        time.sleep(settle)  # the last replies go out
        idle = resident(pid) / MB
    first, last = samples[0], samples[-1]
    print(f"\nafter {settle:g} s idle: {idle:.1f} MB")
    print(f"RSS: {last[1]:.1f} MB after {last[0]:,} chats against {first[1]:.1f} MB after "
          f"{first[0]:,}: x{last[1] / first[1]:.2f} ({last[1] - first[1]:+.1f} MB); "
          f"{last[1] - started:+.1f} MB since start")
    print(f"rate: {last[2]:,.0f}/s in the last window against {first[2]:,.0f}/s in the "
          f"first: x{last[2] / first[2]:.2f}")


def limiter_figures(chats: int, send_rate: float) -> None:
    """The rate limiter's per-chat state under sends to ever new chats (simulated clock:
    no waiting, the figures do not depend on this machine)."""
    import anyio

    from chatkernel.core.outbound.ratelimit import RateLimiter

    clock = [0.0]

    async def sleep(seconds: float) -> None:
        clock[0] += seconds

    limiter = RateLimiter.from_limits({}, {"chat": "1/s"}, clock=lambda: clock[0], sleep=sleep)

    async def run() -> tuple[int, int]:
        most = 0
        for n in range(chats):
            await limiter.acquire(f"chat-{n}")
            clock[0] += 1 / send_rate
            most = max(most, limiter.tracked_chats)
        clock[0] += 60  # a minute later, one more send prunes what expired
        await limiter.acquire("late")
        return most, limiter.tracked_chats

    most, after = anyio.run(run)
    print(f"\nrate limiter (chat 1/s, margin {limiter.margin:g} s), {chats:,} distinct chats at "
          f"{send_rate:,.0f} sends/s: at most {most:,} chats tracked at once, {after:,} a "
          f"minute after the last: bounded by the send rate times the window, not by the "
          f"chats seen")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--sample", type=int, default=10_000)
    parser.add_argument("--settle", type=float, default=5.0,
                        help="seconds to wait after the load before the last reading")
    parser.add_argument("--send-rate", type=float, default=2000.0,
                        help="the rate limiter part's sends per simulated second")
    args = parser.parse_args()
    if not sys.platform.startswith("linux"):
        sys.exit("bench/memory.py reads /proc: Linux only")
    print(f"{args.chats:,} messages, each in a new chat, {args.clients} clients\n"
          f"(Python {sys.version.split()[0]}, {os.path.realpath(sys.executable)})\n")
    gateway_figures(args.chats, args.clients, min(args.sample, args.chats), args.settle)
    limiter_figures(args.chats, args.send_rate)


if __name__ == "__main__":
    main()
