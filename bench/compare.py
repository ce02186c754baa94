"""The channels' echo benchmarks for the working tree and an earlier commit, side by side.

For each channel of ``--channels``, its echo bench (``bench/<channel>_echo.py``, this
tree's: one harness and one fake for both) runs chatkernel alone, one round at a time,
alternately on the working tree's code and on ``--against REF``'s (a temporary git
worktree of REF, removed afterwards), ``--rounds`` times each; who goes first rotates.
Both run on this interpreter (the venv's python) with ``PYTHONPATH`` naming the tree's
kernel and plugins, from a directory outside both, so each imports only its own code.
The fake platforms always run the working tree's code (the same fake for both).

Per channel it prints every run, then the medians: messages answered per second, this
process's CPU microseconds per message where the bench measures it (the contender's
own, not the fake's), and the working tree's ratio to REF's (rate: above 1 is faster;
CPU: below 1 is cheaper).

    .venv/bin/python bench/compare.py --against d28b3db
    .venv/bin/python bench/compare.py --against main --channels whatsapp,slack_events \\
        --messages 2000 --rounds 5
    .venv/bin/python bench/compare.py --against d28b3db --channels gateway --rounds 5

``gateway`` is not a channel's in-process bench but bench/gateway_echo.py: the WhatsApp
echo through a real ``chatkernel run`` process of each tree's code (its CPU read from
/proc), the bench and its fake on the working tree's code.

A bench of this tree that cannot drive REF's kernel (an API it needs is not there yet)
fails on REF: its error is printed and that channel is skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


@dataclass(frozen=True)
class Bench:
    """How to run one channel's echo bench for chatkernel alone, once, and read it."""

    script: str
    #: The options for one round of chatkernel alone; ``{n}``: --messages.
    options: tuple[str, ...]
    #: The line of the run: its ``rate`` and, where measured, its ``cpu`` (µs/message).
    line: re.Pattern[str]
    #: The option that points the fake's own process at the working tree's code.
    fake_path_option: str | None = None
    #: The bench runs a gateway process of a tree's code itself (``--tree DIR --alone``):
    #: the bench, and its fake, on the working tree's code.
    runs_tree: bool = False


ROUND_LINE = re.compile(r"round 1 chatkernel\s+(?P<rate>[\d.]+) msg/s.*?"
                        r"cpu\s+(?P<cpu>[\d.]+) us/msg")
BENCHES: dict[str, Bench] = {
    "whatsapp": Bench("whatsapp_echo.py",
                      ("--only", "chatkernel", "--rounds", "1", "--messages", "{n}"),
                      ROUND_LINE, fake_path_option="--fake-pythonpath"),
    "slack_events": Bench("slack_events_echo.py",
                          ("--only", "chatkernel", "--rounds", "1", "--messages", "{n}"),
                          ROUND_LINE),
    "gateway": Bench("gateway_echo.py", ("--rounds", "1", "--messages", "{n}"),
                     re.compile(r"round 1\s+\S+\s+(?P<rate>[\d.]+) msg/s\s+"
                                r"cpu\s+(?P<cpu>[\d.]+) us/msg"), runs_tree=True),
    "telegram": Bench("telegram_echo.py",
                      ("--only", "chatkernel", "--alone", "--rounds", "1", "--updates", "{n}",
                       "--latency", "0"),
                      re.compile(r"round 1\s+chatkernel\s+\d+/\d+\s*(?P<rate>[\d.]+)/s")),
}


@dataclass
class Tree:
    """One side of the comparison: a tree of the project and its runs."""

    label: str
    root: Path
    rates: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)

    @property
    def pythonpath(self) -> str:
        """The kernel and every plugin of this tree, before anything installed."""
        plugins = sorted(p for p in (self.root / "plugins").iterdir()
                         if (p / "pyproject.toml").exists())
        return ":".join(str(p) for p in [self.root, *plugins])


def tree_metadata(tree: Tree, into: Path) -> Path:
    """The entry points of ``tree``'s kernel and plugins as the installed distributions
    would give them (a ``.dist-info`` each, from their pyproject.toml files), in ``into``:
    first on a run's path, they stand for the venv's, which are this tree's (an earlier
    commit's store backends, say, were entry points of their own)."""
    for project in [tree.root, *sorted((tree.root / "plugins").iterdir())]:
        if not (project / "pyproject.toml").exists():
            continue
        meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
        name = re.sub(r"[-_.]+", "_", meta["name"]).lower()
        info = into / f"{name}-{meta.get('version', '0')}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {meta['name']}\n"
                                       f"Version: {meta.get('version', '0')}\n")
        (info / "entry_points.txt").write_text("".join(
            f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in points.items())
            + "\n" for group, points in meta.get("entry-points", {}).items()))
    return into


@contextlib.contextmanager
def worktree(ref: str) -> Iterator[Path]:
    """A temporary git worktree of ``ref`` (detached), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp:
        path = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet",
                        str(path), ref], check=True)
        try:
            yield path
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(path)], check=False)


def run_once(bench: Bench, tree: Tree, work: Tree, messages: int,
             cwd: str) -> tuple[float, float | None] | str:
    """One chatkernel run of ``bench`` on ``tree``'s code: (rate, CPU µs/message), or
    the error's last lines."""
    command = [sys.executable, str(BENCH / bench.script),
               *(option.format(n=messages) for option in bench.options)]
    if bench.fake_path_option:
        command += [bench.fake_path_option, work.pythonpath]
    if bench.runs_tree:
        command += ["--tree", str(tree.root), "--alone"]
    if bench.runs_tree:  # the bench makes the tree's entry points itself
        path = work.pythonpath
    else:
        metadata = Path(cwd) / "metadata" / tree.label.replace(" ", "-")
        if not metadata.exists():
            tree_metadata(tree, metadata)
        path = f"{metadata}:{tree.pythonpath}"
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    found = bench.line.search(done.stdout)
    if done.returncode != 0 or found is None:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-6:])
        return f"exit {done.returncode}:\n{tail}"
    cpu = found.groupdict().get("cpu")
    return float(found["rate"]), None if cpu is None else float(cpu)


def compare(channel: str, trees: list[Tree], args: argparse.Namespace, cwd: str) -> bool:
    bench = BENCHES[channel]
    print(f"\n{channel}: bench/{bench.script}, {args.messages} messages, "
          f"{args.rounds} rounds each, alternating", flush=True)
    for round_number in range(args.rounds):
        order = trees if round_number % 2 == 0 else trees[::-1]
        for tree in order:
            result = run_once(bench, tree, trees[0], args.messages, cwd)
            if isinstance(result, str):
                print(f"  {tree.label}: the bench failed, {channel} skipped\n{result}")
                return False
            rate, cpu = result
            tree.rates.append(rate)
            if cpu is not None:
                tree.cpus.append(cpu)
            shown = f"{cpu:6.0f} µs/msg" if cpu is not None else ""
            print(f"  round {round_number + 1} {tree.label:>14} {rate:8.0f} msg/s  {shown}",
                  flush=True)
    work, ref = trees
    print(f"\n| {channel} | messages/s (median) | CPU µs/msg (median) | runs |")
    print("|---|---:|---:|---:|")
    for tree in trees:
        cpu = f"{statistics.median(tree.cpus):.0f}" if tree.cpus else "—"
        print(f"| {tree.label} | {statistics.median(tree.rates):.0f} | {cpu} | "
              f"{len(tree.rates)} |")
    rate_ratio = statistics.median(work.rates) / statistics.median(ref.rates)
    cpu_ratio = (f"{statistics.median(work.cpus) / statistics.median(ref.cpus):.2f}"
                 if work.cpus and ref.cpus else "—")
    print(f"| working tree / {ref.label} | {rate_ratio:.2f} | {cpu_ratio} | |")
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", required=True, metavar="REF",
                        help="the commit (or branch, tag) to compare the working tree with")
    parser.add_argument("--channels", default="whatsapp",
                        help=f"comma-separated, of: {', '.join(BENCHES)} (default whatsapp)")
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3, help="runs per tree and channel")
    args = parser.parse_args()
    channels = [name for name in args.channels.split(",") if name]
    for name in channels:
        if name not in BENCHES:
            parser.error(f"--channels: no echo bench for {name!r} (there are "
                         f"{', '.join(BENCHES)})")
    ref_name = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.against],
                              check=True, capture_output=True, text=True).stdout.strip()
    print(f"python {sys.version.split()[0]} ({sys.executable}); the working tree "
          f"{ROOT} against {args.against} ({ref_name})")
    failed = False
    with worktree(args.against) as ref_root, tempfile.TemporaryDirectory() as cwd:
        for channel in channels:
            trees = [Tree("working tree", ROOT), Tree(ref_name, ref_root)]
            failed |= not compare(channel, trees, args, cwd)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
