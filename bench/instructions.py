"""Instructions a message: a contender's CPU work counted, not timed.

These machines are shared and noisy: a CPU time per message moves by a third between
runs, more than most changes to the pipeline move it. valgrind counts the instructions
a process executes, and that count is the same run after run whatever else the machine
does (within 1–2 % here: the batching of a run still varies, more so with another count
beside it). This runs one contender of an echo benchmark alone under ``valgrind
--tool=cachegrind --cache-sim=no`` twice, with a small and a large number of messages,
and divides the difference by the difference in messages: start-up, shutdown and the
bench's own fixed work cancel out, what is left is the work of one message. The fakes
run in their own processes, which valgrind does not follow. (bench/pipeline_instructions.py
counts the in-memory pipeline alone the same way; this counts each platform's path, its
real channel against its fake, beside the path's floor.)

valgrind slows the contender about 25-fold and not the fake, so the contender's polls,
commits and concurrent requests carry more messages each than at full speed: compare the
counts of one run (this checkout against ``--tree``, chatkernel against the floor), not a
count with a CPU time.

    .venv/bin/python bench/instructions.py telegram                 # chatkernel and the floor
    .venv/bin/python bench/instructions.py whatsapp slack-events --only chatkernel
    .venv/bin/python bench/instructions.py telegram --tree /tmp/old  # another checkout beside it

``--tree DIR`` (repeatable) runs the same with another checkout's ``chatkernel`` and
plugins first on ``PYTHONPATH`` (an earlier commit: ``git worktree add /tmp/old HEAD~1``),
so a change is measured against the code before it in one run. valgrind is Debian's
``valgrind`` package (``apt-get install valgrind``); a measuring tool, not a dependency.

Instructions are not time: a cache miss or a system call costs time that is no
instruction here, so the ratio of two contenders' instructions is a little kinder than
the ratio of their CPU times (bench/README.md, "Instructions a message"). Use it to tell
whether a change to the pipeline made it cheaper, and by how much; the targets are in
CPU time, measured by the benchmarks themselves.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable

#: For each path: the benchmark command for ``{n}`` messages of one contender alone,
#: the contenders it has, and the plugin whose package a ``--tree`` must put first.
PATHS: dict[str, tuple[list[str], dict[str, str], str]] = {
    "telegram": (["bench/telegram_echo.py", "--latency", "0", "--rounds", "1", "--alone",
                  "--updates", "{n}", "--only", "{contender}"],
                 {"chatkernel": "chatkernel", "floor": "pipelined"}, "telegram"),
    "whatsapp": (["bench/whatsapp_echo.py", "--rounds", "1", "--messages", "{n}",
                  "--users", "{users}", "--only", "{contender}"],
                 {"chatkernel": "chatkernel", "floor": "floor",
                  "floor-journaled": "floor-journaled"}, "whatsapp"),
    "whatsapp-10": (["bench/whatsapp_echo.py", "--rounds", "1", "--messages", "{n}",
                     "--users", "{users}", "--per-notification", "10", "--only",
                     "{contender}"],
                    {"chatkernel": "chatkernel", "floor": "floor",
                     "floor-journaled": "floor-journaled"}, "whatsapp"),
    "slack-events": (["bench/slack_events_echo.py", "--rounds", "1", "--messages", "{n}",
                      "--only", "{contender}"],
                     {"chatkernel": "chatkernel", "floor": "floor",
                      "floor-journaled": "floor-journaled"}, "slack"),
    "webchat": (["bench/webchat_echo.py", "--rounds", "1", "--chats", "{chats}",
                 "--per-chat", "20", "--only", "{contender}"],
                {"chatkernel": "chatkernel", "floor": "floor",
                 "floor-journaled": "floor-journaled"}, ""),
}

_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def instructions(command: list[str], pythonpath: str | None) -> int:
    """The instructions the benchmark's own process executed (not its children)."""
    env = dict(os.environ)
    if pythonpath is None:
        env.pop("PYTHONPATH", None)
    else:
        env["PYTHONPATH"] = pythonpath
    done = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
         PYTHON, *command], cwd=ROOT, env=env, capture_output=True, text=True)
    found = _REFS.search(done.stderr)
    if done.returncode != 0 or found is None:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise SystemExit(f"{' '.join(command)} failed under valgrind:\n{tail}")
    return int(found.group(1).replace(",", ""))


def per_message(path: str, contender: str, small: int, large: int,
                pythonpath: str | None) -> float:
    template, names, _ = PATHS[path]

    def command(n: int) -> list[str]:
        values = {"n": str(n), "users": str(max(1, n // 10)), "chats": str(max(1, n // 20)),
                  "contender": names[contender]}
        return [part.format(**values) for part in template]

    # The web chat's size is chats x 20 posts: round both to whole chats.
    if path == "webchat":
        small, large = small // 20 * 20, large // 20 * 20
    return (instructions(command(large), pythonpath)
            - instructions(command(small), pythonpath)) / (large - small)


def tree_path(tree: Path, plugin: str) -> str:
    parts = [str(tree)]
    if plugin:
        parts.append(str(tree / "plugins" / plugin))
    return os.pathsep.join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", choices=tuple(PATHS))
    parser.add_argument("--only", default="chatkernel,floor",
                        help="comma-separated: chatkernel, floor (default both), "
                             "floor-journaled (the webhook paths and the web chat)")
    parser.add_argument("--small", type=int, default=500)
    parser.add_argument("--large", type=int, default=2500)
    parser.add_argument("--tree", action="append", type=Path, default=[],
                        help="another checkout to count beside this one (repeatable)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    wanted = [name for name in args.only.split(",") if name]
    print(f"instructions a message: ({args.large:,} messages) - ({args.small:,} messages), "
          f"divided by {args.large - args.small:,}; Python {sys.version.split()[0]}")
    print(f"{'path':14} {'contender':15} {'tree':28} {'instructions':>13} {'x floor':>8} "
          f"{'x journaled':>12}")
    for path in args.paths:
        # The ratios to each floor counted before (the floors come first).
        floors: dict[str, float] = {}
        contenders = ("floor", "floor-journaled", "chatkernel")
        for contender in [c for c in contenders if c in wanted and c in PATHS[path][1]]:
            trees = [None] + (args.tree if contender == "chatkernel" else [])
            for tree in trees:
                pythonpath = None if tree is None else tree_path(tree, PATHS[path][2])
                count = per_message(path, contender, args.small, args.large, pythonpath)
                ratios = [f"{count / floors[base]:{width}.2f}" if base in floors
                          else " " * width
                          for base, width in (("floor", 8), ("floor-journaled", 12))]
                if tree is None and contender != "chatkernel":
                    floors[contender] = count
                print(f"{path:14} {contender:15} {str(tree or 'this checkout'):28} "
                      f"{count:13,.0f} {' '.join(ratios)}", flush=True)


if __name__ == "__main__":
    main()
