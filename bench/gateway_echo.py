"""The WhatsApp echo through a real gateway process, for this tree and another side by side.

Each run starts ``chatkernel run`` as a process of its own (a fresh ``CHATKERNEL_HOME``,
a config file with one WhatsApp account whose ``api_base`` is the fake Graph API, its
access token, app secret and verify token as ``${ENV}`` references, so the gateway
re-executes itself without them as it does in production; only the WhatsApp plugin
loaded, ``CHATKERNEL_LOAD_PLUGINS=whatsapp``; its log at INFO to a file): the gateway's
own HTTP server, HTTP guard, logging, collector settings, read receipts and typing
through the indicator, and the delivery statuses the fake posts back (``sent`` and
``delivered`` for every reply, as Meta does; ``--no-statuses``: none).

The fake (chatkernel_whatsapp.fake.FakeGraph, this tree's, in this process: the
gateway's CPU is what is measured, not the fake's) queues ``--messages`` messages from
``--users`` users, one a signed notification, before the webhook is verified, then posts
them ``--workers`` at a time (in order per user), as Meta does. The agent is the echo;
the queue ``followup`` with no debounce, 64 turns at once, the channel's pacing lifted
(as bench/whatsapp_echo.py), so the gateway's own cost is what limits the rate.

Per run, counted at the fake and in ``/proc``:

    rate        messages answered per second, from the webhook's verification to the
                last message's first echo
    CPU         the gateway process's CPU time (``/proc/<pid>/stat``: user + system,
                every thread) from the verification to the fake's last request or
                webhook post of the run (statuses and trailing read receipts included),
                per answered message
    receipts    read receipts the gateway sent (with the typing indicator or without)
    requests    requests the gateway made to the fake a message (sends and receipts)
    posts       webhook POSTs the fake made a message (messages and statuses)
    log         lines the gateway logged a message

``--tree DIR`` runs another checkout's code beside this tree's (the same interpreter,
``PYTHONPATH`` naming that tree's kernel and plugins, as bench/compare.py does);
``--against REF`` makes that checkout (a temporary git worktree of REF, removed
afterwards); ``--alone`` runs ``--tree``'s code only (bench/compare.py's
``--channels gateway`` does that, a run at a time). Rounds alternate the trees (who goes
first rotates); the table shows medians and the ratios of this tree to the other.

``--profile DIR`` runs each gateway under cProfile over the run's window only (the bench's
launcher enables it on SIGUSR1 and writes ``DIR/<tree>-<round>.prof`` on SIGUSR2; the
product has no such switch) and prints, per tree, the functions by own time a message,
and beside them the other tree's. Profiled runs are slower: their rates do not compare.

    .venv/bin/python bench/gateway_echo.py                        # this tree, 5 rounds
    .venv/bin/python bench/gateway_echo.py --against d28b3db      # side by side
    .venv/bin/python bench/gateway_echo.py --against d28b3db --rounds 1 --profile /tmp/prof

Linux only (it reads /proc). Figures are machine-dependent: compare the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import pstats
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from chatkernel_whatsapp.fake import FakeGraph
from compare import Tree, tree_metadata, worktree
from whatsapp_echo import score

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
APP_SECRET = "bench-app-secret"
VERIFY_TOKEN = "bench-verify-token"
TICKS = os.sysconf("SC_CLK_TCK")
#: The bench's own launcher of ``chatkernel run``: with BENCH_GATEWAY_PROFILE set,
#: cProfile is enabled on SIGUSR1 and written there on SIGUSR2 (the window of a run).
LAUNCHER = """\
import os, sys
path = os.environ.get("BENCH_GATEWAY_PROFILE")
if path:
    import cProfile, signal, time
    # The main thread's CPU time, not the wall clock a busy machine stretches.
    profiler = cProfile.Profile(time.thread_time)
    def dump(*_):
        profiler.disable()
        profiler.dump_stats(path)
    signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
    signal.signal(signal.SIGUSR2, dump)
sys.argv[0] = "chatkernel"
import chatkernel
print("bench: chatkernel from", os.path.dirname(chatkernel.__file__), file=sys.stderr, flush=True)
from chatkernel.cli import main
main()
"""
CONFIG = """\
[gateway]
log_level = "info"

[agent]
kind = "echo"

[queue]
mode = "followup"
debounce_ms = 0
max_concurrent = 64

[channels.whatsapp]
rate_limits = {{ chat = "100000/s", account = "100000/s" }}

[channels.whatsapp.accounts.main]
access_token = "${{BENCH_WHATSAPP_TOKEN}}"
phone_number_id = "{phone_number_id}"
app_secret = "${{BENCH_WHATSAPP_APP_SECRET}}"
verify_token = "${{BENCH_WHATSAPP_VERIFY_TOKEN}}"
api_base = "{base_url}"
allow_from = ["*"]
"""


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User plus system CPU time of process ``pid`` (all its threads; or only its
    ``thread``), in seconds."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class Gateway:
    """``chatkernel run`` of one tree, in a child process, logging to a file."""

    def __init__(self, tree: Tree, home: Path, graph: FakeGraph, profile: Path | None) -> None:
        self.tree, self.home, self.log = tree, home, home / "gateway.log"
        metadata = tree_metadata(tree, home / "metadata")
        config = home / "config.toml"
        config.write_text(CONFIG.format(phone_number_id=graph.phone_number_id,
                                        base_url=graph.base_url))
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CHATKERNEL_", "BENCH_")) and k != "PYTHONPATH"}
        env.update(CHATKERNEL_HOME=str(home), CHATKERNEL_LOAD_PLUGINS="whatsapp",
                   PYTHONPATH=f"{metadata}:{tree.pythonpath}",
                   XDG_CACHE_HOME=str(home / "cache"), BENCH_WHATSAPP_TOKEN=graph.token,
                   BENCH_WHATSAPP_APP_SECRET=APP_SECRET,
                   BENCH_WHATSAPP_VERIFY_TOKEN=VERIFY_TOKEN)
        if profile is not None:
            env["BENCH_GATEWAY_PROFILE"] = str(profile)
        self.profile = profile
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", LAUNCHER, "run", "--config", str(config),
                 "--listen", "127.0.0.1:0"],
                cwd=home, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=log)
        self.url = ""

    async def started(self, timeout: float = 60.0) -> str:
        """The gateway's base URL once it logs it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            log = self.log.read_text(errors="replace")
            found = re.search(r"listening on (http://\S+)", log)
            if found:
                code = re.search(r"bench: chatkernel from (\S+)", log)
                if code is None or Path(code[1]) != self.tree.root / "chatkernel":
                    raise SystemExit(f"the gateway of {self.tree.root} ran the code of "
                                     f"{code[1] if code else '?'}")
                self.url = found[1]
                return self.url
            if self.process.poll() is not None:
                break
            await asyncio.sleep(0.05)
        raise SystemExit("the gateway did not start:\n" + self.log.read_text(errors="replace"))

    def cpu(self) -> float:
        return cpu_seconds(self.process.pid)

    def main_thread_cpu(self) -> float:
        """The event loop's thread's alone (the others: the store's checkpoints, the
        resolver...)."""
        return cpu_seconds(self.process.pid, self.process.pid)

    def log_lines(self) -> int:
        with self.log.open("rb") as log:
            return sum(1 for _ in log)

    def signal(self, number: int) -> None:
        os.kill(self.process.pid, number)

    async def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        for _ in range(300):
            if self.process.poll() is not None:
                return
            await asyncio.sleep(0.05)
        self.process.kill()
        self.process.wait()


@contextlib.asynccontextmanager
async def running(tree: Tree, home: Path, graph: FakeGraph,
                  profile: Path | None) -> AsyncIterator[Gateway]:
    gateway = Gateway(tree, home, graph, profile)
    try:
        await gateway.started()
        yield gateway
    finally:
        await gateway.stop()


async def run_once(tree: Tree, args: argparse.Namespace, profile: Path | None
                   ) -> dict[str, Any]:
    texts: dict[str, list[str]] = {}
    messages = []
    for i in range(args.messages):
        user = f"1555{i % args.users:07d}"
        text = f"u{i % args.users} m{i // args.users}"
        texts.setdefault(user, []).append(text)
        messages.append((user, text))
    with tempfile.TemporaryDirectory(prefix="gateway-echo-") as tmp:
        async with FakeGraph(app_secret=APP_SECRET, verify_token=VERIFY_TOKEN,
                             webhook_workers=args.workers, statuses=args.statuses) as graph, \
                running(tree, Path(tmp), graph, profile) as gateway:
            for user, text in messages:  # queued before the webhook exists: held till then
                graph.inject_messages([graph.message(user, text)])
            await asyncio.sleep(args.settle)  # start-up's own work done (probe, identity)
            calls_before, lines_before = len(graph.calls), gateway.log_lines()
            if profile is not None:
                gateway.signal(signal.SIGUSR1)
            cpu_before, wall = gateway.cpu(), time.time()
            main_before = gateway.main_thread_cpu()
            if not await graph.subscribe(f"{gateway.url}/whatsapp/main/webhook"):
                raise SystemExit(f"{tree.label}: the webhook's GET verification failed")
            cpu_after = await until_quiet(graph, gateway, args)
            main_after = gateway.main_thread_cpu()
            if profile is not None:
                gateway.signal(signal.SIGUSR2)
                for _ in range(100):
                    if profile.exists():
                        break
                    await asyncio.sleep(0.05)
            sent = [{"to": m.to, "text": m.text, "when": m.when} for m in graph.sent_messages]
            receipts = graph.read_receipts
            result = score(tree.label, sent, texts, wall, args, journaled=None)
            answered = max(1, result["answered"])
            result.update(
                cpu_us=(cpu_after - cpu_before) / answered * 1e6,
                others_us=max(0.0, (cpu_after - cpu_before) - (main_after - main_before))
                / answered * 1e6,
                receipts=len(receipts),
                typing=sum(1 for r in receipts if r.get("typing_indicator")),
                requests=(len(graph.calls) - calls_before) / answered,
                posts=len(graph.webhooks.attempts) / answered,
                log=(gateway.log_lines() - lines_before) / answered)
    return result


async def until_quiet(graph: FakeGraph, gateway: Gateway, args: argparse.Namespace) -> float:
    """Wait until every message is answered, every notification posted and neither side
    did anything for ``--quiet`` seconds; the gateway's CPU time at its last activity."""
    deadline = time.monotonic() + args.timeout
    activity: tuple[int, int] = (-1, -1)
    last_cpu, last_change = gateway.cpu(), time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        cpu = gateway.cpu()
        now_activity = (len(graph.calls), len(graph.webhooks.attempts))
        if now_activity != activity:
            activity, last_change = now_activity, time.monotonic()
            last_cpu = cpu
            continue
        answered = len({m.text for m in graph.sent_messages})
        if (answered >= args.messages and not any(graph._queues)
                and time.monotonic() - last_change >= args.quiet):
            return last_cpu
    print(f"    ! timed out: {len({m.text for m in graph.sent_messages})} of "
          f"{args.messages} answered")
    return gateway.cpu()


# -- reporting ------------------------------------------------------------------------------

COLUMNS = (("rate", "messages/s", "{:.0f}"), ("cpu_us", "CPU µs/msg", "{:.0f}"),
           ("others_us", "of it, not the loop's thread", "{:.0f}"),
           ("receipts", "read receipts", "{:.0f}"), ("typing", "with typing", "{:.0f}"),
           ("requests", "requests to the fake/msg", "{:.2f}"),
           ("posts", "webhook posts/msg", "{:.2f}"), ("log", "log lines/msg", "{:.2f}"))


def print_run(number: int, tree: Tree, result: dict[str, Any]) -> None:
    print(f"  round {number} {tree.label:>14} {result['rate']:7.0f} msg/s  "
          f"cpu {result['cpu_us']:6.0f} us/msg (other threads {result['others_us']:.0f})  answered {result['answered']}  "
          f"dup {result['duplicates']}  order {result['order']}  "
          f"receipts {result['receipts']} (typing {result['typing']})  "
          f"requests/msg {result['requests']:.2f}  posts/msg {result['posts']:.2f}  "
          f"log/msg {result['log']:.2f}", flush=True)


def print_table(trees: list[Tree], results: dict[str, list[dict[str, Any]]]) -> None:
    print("\n| tree | " + " | ".join(title for _, title, _ in COLUMNS)
          + " | answered (min) | duplicates | reordered | runs |")
    print("|---|" + "---:|" * (len(COLUMNS) + 4))
    medians: dict[str, dict[str, float]] = {}
    for tree in trees:
        rows = results[tree.label]
        medians[tree.label] = {key: statistics.median(r[key] for r in rows)
                               for key, _, _ in COLUMNS}
        shown = " | ".join(form.format(medians[tree.label][key]) for key, _, form in COLUMNS)
        print(f"| {tree.label} | {shown} | {min(r['answered'] for r in rows)} | "
              f"{sum(r['duplicates'] for r in rows)} | {sum(r['order'] for r in rows)} | "
              f"{len(rows)} |")
    if len(trees) == 2:
        ours, theirs = (medians[t.label] for t in trees)
        ratios = " | ".join(f"{ours[key] / theirs[key]:.2f}" if theirs[key] else "—"
                            for key, _, _ in COLUMNS)
        print(f"| {trees[0].label} / {trees[1].label} | {ratios} | | | | |")


def print_profiles(trees: list[Tree], profiles: dict[str, list[Path]], messages: int,
                   top: int) -> None:
    """Each tree's functions by own time a message, the other tree's beside them."""
    stats = {}
    for tree in trees:
        paths = [str(p) for p in profiles[tree.label] if p.exists()]
        if paths:
            stats[tree.label] = pstats.Stats(*paths).stats  # type: ignore[attr-defined]
    runs = {label: len(profiles[label]) for label in stats}
    for label, table in stats.items():
        others = {other: t for other, t in stats.items() if other != label}
        per = messages * runs[label]
        total = sum(row[2] for row in table.values())
        calls = sum(row[1] for row in table.values())
        print(f"\n== cProfile of {label}: {total / per * 1e6:.0f} µs profiled a message, "
              f"{calls / per:.0f} calls a message ==")
        head = "  own µs/msg  calls/msg" + "".join(f"  | {o[:12]:>12} µs  calls" for o in others)
        print(head + "  function")
        for key, row in sorted(table.items(), key=lambda item: -item[1][2])[:top]:
            line = f"  {row[2] / per * 1e6:10.1f} {row[1] / per:10.2f}"
            for other, theirs in others.items():
                got = theirs.get(key)
                other_per = messages * runs[other]
                line += (f"  | {got[2] / other_per * 1e6:12.1f} {got[1] / other_per:6.2f}"
                         if got else f"  | {'—':>12} {'—':>6}")
            print(f"{line}  {_where(key)}")


def _where(key: tuple[str, int, str]) -> str:
    path, line, name = key
    for marker in ("/chatkernel/", "/chatkernel_", "site-packages/", "/python3.11/"):
        if marker in path:
            path = path[path.rfind(marker) + 1:]
            break
    return f"{name} ({path}:{line})" if line else name


# -- main -----------------------------------------------------------------------------------


async def main_async(args: argparse.Namespace, trees: list[Tree]) -> None:
    results: dict[str, list[dict[str, Any]]] = {tree.label: [] for tree in trees}
    profiles: dict[str, list[Path]] = {tree.label: [] for tree in trees}
    for round_number in range(args.rounds):
        order = trees if round_number % 2 == 0 else trees[::-1]
        for tree in order:
            profile = None
            if args.profile:
                name = re.sub(r"\W+", "-", tree.label).strip("-")
                profile = Path(args.profile) / f"{name}-{round_number + 1}.prof"
                profile.unlink(missing_ok=True)
                profiles[tree.label].append(profile)
            result = await run_once(tree, args, profile)
            results[tree.label].append(result)
            print_run(round_number + 1, tree, result)
    print_table(trees, results)
    if args.profile:
        print_profiles(trees, profiles, args.messages, args.profile_top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--workers", type=int, default=32,
                        help="notifications the fake posts at a time (in order per user)")
    parser.add_argument("--rounds", type=int, default=5, help="runs per tree")
    parser.add_argument("--no-statuses", dest="statuses", action="store_false",
                        help="the fake posts no sent/delivered statuses")
    parser.add_argument("--tree", metavar="DIR", help="another checkout, run beside this one")
    parser.add_argument("--against", metavar="REF",
                        help="a git worktree of REF as --tree (removed afterwards)")
    parser.add_argument("--alone", action="store_true",
                        help="run --tree's code only, not this tree's beside it")
    parser.add_argument("--settle", type=float, default=1.0,
                        help="seconds between the gateway's start and the load")
    parser.add_argument("--quiet", type=float, default=0.8,
                        help="seconds without a request or a post that end a run (past "
                             "the read receipts' 0.5 s)")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--profile", metavar="DIR",
                        help="cProfile each gateway over its run, into DIR")
    parser.add_argument("--profile-top", type=int, default=40)
    args = parser.parse_args()
    if not sys.platform.startswith("linux"):
        sys.exit("bench/gateway_echo.py reads /proc: Linux only")
    if args.tree and args.against:
        parser.error("--tree or --against, not both")
    if args.alone and not (args.tree or args.against):
        parser.error("--alone runs --tree's (or --against's) code only")
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        other = None
        if args.against:
            ref = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.against],
                                 check=True, capture_output=True, text=True).stdout.strip()
            other = Tree(ref, stack.enter_context(worktree(args.against)))
        elif args.tree:
            other = Tree(Path(args.tree).name, Path(args.tree).resolve())
        trees = [other] if args.alone and other else \
            [Tree("working tree", ROOT), *([other] if other else [])]
        load = os.getloadavg()
        print(f"python {sys.version.split()[0]} ({sys.executable}); {args.messages} messages "
              f"from {args.users} users, one a POST, {args.workers} posts at a time, statuses "
              f"{'on' if args.statuses else 'off'}, {args.rounds} rounds; "
              f"{', '.join(f'{t.label} = {t.root}' for t in trees)}; load average "
              f"{load[0]:.1f}", flush=True)
        asyncio.run(main_async(args, trees))
        print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
