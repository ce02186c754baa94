"""Cold-start wall time of the ``chatkernel`` CLI.

Each command runs N times (``--runs``, default 15), each time in a fresh
subprocess, and the median is reported next to its ratio to a bare
``import pluggy, click`` — the floor any pluggy + click CLI pays. The commands
take turns, one run of each a round, so a machine busy for a while slows them
alike and the ratios hold.

Target: ``chatkernel plugins --json`` takes at most 2.5x the pluggy+click
import, with or without installed channel plugins (plugins must import their
heavy dependencies lazily, and listing must not import the channels).

Usage::

    .venv/bin/python bench/startup.py [--runs 15] [--json]

The synthetic plugins are built in a temporary directory with
``pip install --no-deps --no-build-isolation --no-index --target``; nothing is
installed into the environment.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

TARGET_RATIO = 2.5
SYNTHETIC_CHANNELS = ("alpha", "bravo", "charlie", "delta")
TIMEOUT = 120


def console_script() -> str:
    script = Path(sys.executable).with_name("chatkernel")
    if not script.exists():
        sys.exit(f"no chatkernel console script next to {sys.executable}; "
                 "install the kernel into this environment first")
    return str(script)


def write_synthetic_plugin(root: Path, channel: str) -> Path:
    """A channel plugin shaped like a real one: its module only imports the
    marker; the channel class is imported lazily inside ``register_channels``."""
    project = root / f"chatkernel-bench{channel}"
    package = project / f"chatkernel_bench{channel}"
    package.mkdir(parents=True)
    (project / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools>=77"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "chatkernel-bench{channel}"
        version = "1.0"
        classifiers = ["Framework :: chatkernel"]

        [project.entry-points.chatkernel]
        bench{channel} = "chatkernel_bench{channel}"

        [tool.setuptools]
        packages = ["chatkernel_bench{channel}"]
        """))
    (package / "__init__.py").write_text(textwrap.dedent(f"""\
        from chatkernel import hookimpl


        @hookimpl
        def register_channels(register):
            from chatkernel_bench{channel}.channel import Bench{channel.title()}Channel

            register(Bench{channel.title()}Channel)
        """))
    (package / "channel.py").write_text(textwrap.dedent(f"""\
        from chatkernel import Channel


        class Bench{channel.title()}Channel(Channel):
            name = "bench{channel}"
        """))
    return project


def install_synthetic_plugins(work: Path) -> Path:
    target = work / "target"
    projects = [write_synthetic_plugin(work / "src", name) for name in SYNTHETIC_CHANNELS]
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
               "--no-index", "--no-cache-dir", "--disable-pip-version-check", "--quiet",
               "--target", str(target), *map(str, projects)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=work)
    if result.returncode != 0:
        sys.exit(f"installing the synthetic plugins failed:\n{result.stdout}{result.stderr}")
    return target


def once(command: list[str], env: dict[str, str]) -> float:
    """The wall time in ms of one fresh run of ``command``."""
    start = time.perf_counter()
    result = subprocess.run(command, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, timeout=TIMEOUT)
    elapsed = (time.perf_counter() - start) * 1000
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stderr.decode()}")
    return elapsed


def measure(cases: list[tuple[str, list[str], dict[str, str]]], runs: int
            ) -> list[list[float]]:
    """Wall times in ms of ``runs`` fresh runs of each case, the cases taking turns, after
    one untimed warm-up run of each (which fills the OS file cache and stevedore's
    entry-point cache)."""
    for _, command, env in cases:
        once(command, env)
    times: list[list[float]] = [[] for _ in cases]
    for _ in range(runs):
        for index, (_, command, env) in enumerate(cases):
            times[index].append(once(command, env))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="runs per command (default 15)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()

    script = console_script()
    with tempfile.TemporaryDirectory(prefix="chatkernel-bench-") as tmp:
        work = Path(tmp)
        base_env = {k: v for k, v in os.environ.items()
                    if not k.startswith("CHATKERNEL_") and k != "PYTHONPATH"}
        base_env["CHATKERNEL_HOME"] = str(work / "home")
        base_env["XDG_CACHE_HOME"] = str(work / "cache")  # a private entry-point cache
        target = install_synthetic_plugins(work)
        plugin_env = dict(base_env, PYTHONPATH=str(target))

        cases = [
            ("python -c pass", [sys.executable, "-c", "pass"], base_env),
            ("import pluggy, click", [sys.executable, "-c", "import pluggy, click"], base_env),
            ("chatkernel --help", [script, "--help"], base_env),
            ("chatkernel plugins --json", [script, "plugins", "--json"], base_env),
            (f"plugins --json, {len(SYNTHETIC_CHANNELS)} plugins",
             [script, "plugins", "--json"], plugin_env),
        ]
        check = subprocess.run([script, "plugins", "--json"], env=plugin_env,
                               capture_output=True, text=True, timeout=TIMEOUT)
        names = {item["name"] for item in json.loads(check.stdout)}
        missing = {f"bench{c}" for c in SYNTHETIC_CHANNELS} - names
        if missing:
            sys.exit(f"the synthetic plugins were not listed: {sorted(missing)}")

        results = [{"command": label, "median_ms": statistics.median(times),
                    "min_ms": min(times), "max_ms": max(times)}
                   for (label, _, _), times in zip(cases, measure(cases, args.runs))]
        shutil.rmtree(work / "src", ignore_errors=True)

    floor = results[1]["median_ms"]
    for row in results:
        row["ratio"] = row["median_ms"] / floor
    worst = max(row["ratio"] for row in results if "plugins --json" in row["command"])
    verdict = "met" if worst <= TARGET_RATIO else "MISSED"

    if args.json:
        print(json.dumps({"runs": args.runs, "python": sys.version.split()[0],
                          "results": results, "target_ratio": TARGET_RATIO,
                          "worst_plugins_ratio": worst, "target_met": worst <= TARGET_RATIO},
                         indent=2))
        return
    width = max(len(row["command"]) for row in results)
    print(f"chatkernel start-up, median of {args.runs} fresh runs "
          f"(Python {sys.version.split()[0]})\n")
    print(f"{'command'.ljust(width)}  {'median ms':>9}  {'min':>7}  {'max':>7}  "
          f"{'x pluggy+click':>14}")
    for row in results:
        print(f"{row['command'].ljust(width)}  {row['median_ms']:9.1f}  {row['min_ms']:7.1f}  "
              f"{row['max_ms']:7.1f}  {row['ratio']:14.2f}")
    print(f"\ntarget: chatkernel plugins --json <= {TARGET_RATIO}x the pluggy+click import; "
          f"worst {worst:.2f}x: {verdict}")


if __name__ == "__main__":
    main()
