"""Each channel guide's "Developing offline" commands, run as written:
a throwaway CHATKERNEL_HOME, the venv's binaries, the config the guide shows validated,
the dev server and the gateway as processes, and the platform's "unknown recipient"
error rehearsed. A guide that stops working as written fails here.

The guide's shell block runs the way a person pastes it into a shell. It is read line by line (a ``<<'EOF'`` heredoc is one command with its body):

- ``export NAME=VALUE`` sets NAME for the lines after it (VALUE expanded by bash);
- a command ending in ``&`` starts in the background, as a shell job; the runner waits
  until the port it names (``--port N``, ``--listen HOST:N``) takes connections, and
  ends it (SIGTERM) at the end;
- ``wait`` (``wait %N``) waits for the last background job to end by itself;
- ``kill %...`` is left to the end, when every job is stopped anyway;
- anything else runs in bash, must exit 0 unless the test expects otherwise, and its
  output is kept.

Every command runs from the repository root, with ``.venv/bin/`` meaning the running
interpreter's directory (the repository's venv under ./scripts/test), and with the
guide's ports (``--port N``, ``127.0.0.1:N``) each replaced by a free one, so that a
test never needs a fixed port. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = str(Path(sys.executable).parent)
_PORT = re.compile(r"(?:--port |127\.0\.0\.1:)(\d{4,5})\b")


def shell_block(guide: Path, heading: str) -> str:
    """The first ```sh block after ``heading`` in the guide."""
    text = guide.read_text()
    start = text.index(heading)
    match = re.search(r"```sh\n(.*?)```", text[start:], re.S)
    assert match, f"{guide}: no sh block after {heading!r}"
    return match[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def commands(block: str) -> list[str]:
    """The block's commands: one per line, a heredoc with its body; comments dropped."""
    found: list[str] = []
    lines = block.splitlines()
    while lines:
        line = lines.pop(0)
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        heredoc = re.search(r"<<-?'?(\w+)'?", line)
        if heredoc:
            body = [line]
            while lines:
                body.append(lines.pop(0))
                if body[-1].strip() == heredoc[1]:
                    break
            found.append("\n".join(body))
        else:
            found.append(_strip_comment(line))
    return found


def _strip_comment(line: str) -> str:
    """The line without a trailing ``# comment`` (outside quotes)."""
    quote = None
    for index, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index].rstrip()
    return line.rstrip()


@dataclass
class Ran:
    command: str
    returncode: int
    output: str  # stdout and stderr
    stdout: str


@dataclass
class GuideRun:
    """One run of a guide's block: the environment it built, the jobs it started."""

    block: str
    env: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    jobs: list[tuple[str, subprocess.Popen, Path]] = field(default_factory=list)
    ran: list[Ran] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.env = {key: value for key, value in os.environ.items()
                    if not key.startswith("CHATKERNEL_")}
        # A shell outside the venv: a bare `python` or `chatkernel` is not the venv's.
        self.env["PATH"] = ":".join(part for part in self.env.get("PATH", "/usr/bin:/bin")
                                    .split(":") if part and Path(part) != Path(BIN))
        self.env.pop("VIRTUAL_ENV", None)
        for port in _PORT.findall(self.block):
            self.ports.setdefault(port, free_port())

    def local(self, command: str) -> str:
        """The command as it runs here: free ports, the venv's binaries."""
        command = command.replace(".venv/bin/", f"{BIN}/")
        for port, free in self.ports.items():
            command = re.sub(rf"(--port |127\.0\.0\.1:){port}\b", rf"\g<1>{free}", command)
        return command

    def run(self, command: str, *, expect_rc: int = 0, until: str | None = None,
            timeout: float = 30.0) -> Ran:
        """Run one command of the block; ``until``: again until its output holds it."""
        deadline = time.monotonic() + timeout
        while True:
            done = subprocess.run(["bash", "-c", self.local(command)], cwd=ROOT, env=self.env,
                                  capture_output=True, text=True, timeout=timeout)
            ran = Ran(command, done.returncode, done.stdout + done.stderr, done.stdout)
            if until is None or until in ran.output or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.ran.append(ran)
        assert ran.returncode == expect_rc, self.failure(f"{command!r} exited {ran.returncode}")
        if until is not None:
            assert until in ran.output, self.failure(f"{command!r} never printed {until!r}")
        return ran

    def export(self, command: str) -> None:
        name, _, value = command.removeprefix("export ").partition("=")
        expanded = subprocess.run(["bash", "-c", f"printf %s {value}"], env=self.env, cwd=ROOT,
                                  capture_output=True, text=True, timeout=10, check=True)
        self.env[name.strip()] = expanded.stdout

    def start(self, command: str, timeout: float = 30.0) -> None:
        command = command.rstrip("& ").rstrip()
        log = Path(self.env.get("CHATKERNEL_HOME") or "/tmp") / f"job-{len(self.jobs)}.log"
        with open(log, "w") as out:
            process = subprocess.Popen(["bash", "-c", "exec " + self.local(command)], cwd=ROOT,
                                       env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        self.jobs.append((command, process, log))
        match = re.search(r"(?:--port |--listen [\d.]+:)(\d+)", self.local(command))
        if match is None:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert process.poll() is None, self.failure(f"{command!r} ended at once")
            try:
                socket.create_connection(("127.0.0.1", int(match[1])), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(self.failure(f"{command!r} did not listen in {timeout:g}s"))

    def wait(self, timeout: float = 30.0) -> None:
        command, process, _ = self.jobs[-1]
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(self.failure(f"{command!r} did not end")) from None
        assert process.returncode == 0, self.failure(f"{command!r} exited {process.returncode}")

    def follow(self, expectations: dict[str, dict] | None = None) -> None:
        """Run every command of the block in order; ``expectations`` maps a command's
        start to the keywords of :meth:`run` for it."""
        expectations = expectations or {}
        for command in commands(self.block):
            if command.startswith("export "):
                self.export(command)
            elif command.endswith("&"):
                self.start(command)
            elif command == "wait" or command.startswith("wait %"):
                self.wait()
            elif command.startswith("kill %"):
                continue
            else:
                options = next((v for k, v in expectations.items() if command.startswith(k)), {})
                self.run(command, **options)

    def job_output(self, index: int) -> str:
        return self.jobs[index][2].read_text()

    def failure(self, what: str) -> str:
        lines = [what, "", "commands run:"]
        lines += [f"$ {r.command}\n{r.output}" for r in self.ran]
        for command, _, log in self.jobs:
            lines += [f"--- job {command!r}:", log.read_text() if log.exists() else ""]
        return "\n".join(lines)

    def close(self) -> None:
        for _, process, _ in reversed(self.jobs):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()

    def __enter__(self) -> "GuideRun":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()




pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell")
GUIDES = ROOT / "docs" / "channels"
HEADING = "## Developing offline"


@pytest.fixture
def guide_run(request):
    """Run a guide's block; its throwaway home is removed afterwards."""
    runs: list[GuideRun] = []

    def start(name: str) -> GuideRun:
        run = GuideRun(shell_block(GUIDES / name, HEADING))
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.close()
        home = run.env.get("CHATKERNEL_HOME")
        if home and Path(home).parent == Path("/tmp") and Path(home).name.startswith("tmp."):
            shutil.rmtree(home, ignore_errors=True)


def assert_throwaway_home(run: GuideRun) -> None:
    """The block's first command makes a throwaway home, and the state went there."""
    first = commands(run.block)[0]
    assert first.startswith('export CHATKERNEL_HOME="$(mktemp -d)"'), first
    home = Path(run.env["CHATKERNEL_HOME"])
    assert home != Path.home() / ".chatkernel" and (home / "state.db").exists()


def test_the_heredoc_and_comments_are_read_as_a_shell_would():
    block = ("export A=1   # a comment\ncat > f <<'EOF'\nx = \"#not a comment\"\nEOF\n"
             "# a line of comment\ncurl -d '{\"a\": \"#1\"}' http://x  # trailing\n")
    assert commands(block) == ["export A=1", "cat > f <<'EOF'\nx = \"#not a comment\"\nEOF",
                               "curl -d '{\"a\": \"#1\"}' http://x"]


def test_the_telegram_guide(guide_run):
    run = guide_run("telegram.md")
    run.follow({
        ".venv/bin/chatkernel config validate": {"until": "1 channel account(s)"},
        "curl 'http://127.0.0.1:8081/_fake/sent": {"until": '"text": "hello"'},
        ".venv/bin/chatkernel send": {"expect_rc": 1, "until": "chat not found"},
    })
    assert_throwaway_home(run)
    sent = json.loads(run.ran[-2].stdout)["messages"]
    assert sent[0]["parse_mode"] in ("HTML", None) and sent[0]["text"] == "hello"
    log = run.job_output(0)
    assert "bot -> chat 42: sendMessage (parse_mode" in log
    assert "bot -> sendMessage refused: Bad Request: chat not found" in log
    # The config the guide shows references the token; the dev server prints the same.
    config = (Path(run.env["CHATKERNEL_HOME"]) / "config.toml").read_text()
    assert 'bot_token = "${TELEGRAM_BOT_TOKEN}"' in config
    assert 'bot_token = "${TELEGRAM_BOT_TOKEN}"' in log


def test_the_slack_guide(guide_run):
    run = guide_run("slack.md")
    run.follow({
        ".venv/bin/chatkernel config validate": {"until": "1 channel account(s)"},
        "curl 'http://127.0.0.1:8082/_fake/sent": {"until": '"text": "hello"'},
        ".venv/bin/chatkernel send": {"expect_rc": 1, "until": "channel_not_found"},
    })
    assert_throwaway_home(run)
    config = (Path(run.env["CHATKERNEL_HOME"]) / "config.toml").read_text()
    assert 'bot_token = "${SLACK_BOT_TOKEN}"' in config
    # The snippet the dev server prints is the guide's.
    log = run.job_output(0)
    assert 'bot_token = "${SLACK_BOT_TOKEN}"' in log and run.env["SLACK_BOT_TOKEN"] in log


def test_the_whatsapp_guide(guide_run):
    run = guide_run("whatsapp.md")
    run.follow({
        ".venv/bin/chatkernel config validate": {"until": "1 channel account(s)"},
        "curl -d '{\"url\"": {"until": '"passed": true'},
        "curl 'http://127.0.0.1:8082/_fake/sent": {"until": '"text": "hello"'},
        ".venv/bin/chatkernel send": {"expect_rc": 1, "until": "131047"},
    })
    assert_throwaway_home(run)
    log = run.job_output(0)
    assert 'access_token = "${WHATSAPP_TOKEN}"' in log and run.env["WHATSAPP_TOKEN"] in log


def test_the_wechat_guide(guide_run):
    run = guide_run("wechat.md")
    run.follow({
        # The login fetches its QR code a moment after it starts.
        "curl -d '{\"status\": \"scaned\"}'": {"until": '"qrcode"'},
        "curl -d '{\"status\": \"confirmed\"}'": {"until": '"qrcode"'},
        ".venv/bin/chatkernel config validate": {"until": "1 channel account(s)"},
        "curl 'http://127.0.0.1:8082/_fake/sent": {"until": '"text": "hello"'},
        ".venv/bin/chatkernel send": {"expect_rc": 1, "until": "no context_token"},
    })
    assert_throwaway_home(run)
    config = (Path(run.env["CHATKERNEL_HOME"]) / "config.toml").read_text()
    assert "bot_token" in config and 'cdn_base = "http://127.0.0.1:' in config
    assert "bot_token stored under channels.wechat.accounts.main in " \
        f"{run.env['CHATKERNEL_HOME']}/config.toml" in run.job_output(1)
