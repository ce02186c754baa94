"""Each channel guide's "Developing offline" block, run as a person pastes it: the whole
block as one bash script, in a shell outside the venv, with nothing between its lines
to wait or to stop what it starts. So the block itself must wait for the dev server and
the gateway, and stop every process it started: one it leaves running fails the test
(and is then stopped).

Only two things differ from a person's shell: ``.venv/bin/`` is the running
interpreter's directory (the repository's venv under ./scripts/test), and the guide's
ports (``--port N``, ``127.0.0.1:N``) are each replaced by a free one, so that a test
never needs a fixed port. ``mktemp -d`` makes the throwaway home under the test's own
temporary directory. The run is bounded (:data:`TIMEOUT`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = str(Path(sys.executable).parent)
GUIDES = ROOT / "docs" / "channels"
HEADING = "## Developing offline"
_PORT = re.compile(r"(?:--port |127\.0\.0\.1:)(\d{4,5})\b")
#: Seconds a whole block may take (it takes a few).
TIMEOUT = 120

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell")


def shell_block(guide: Path, heading: str = HEADING) -> str:
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


def localized(block: str, ports: dict[str, int] | None = None) -> str:
    """The block as it runs here: the venv's binaries, a free port for each of its ports
    (``ports``: the guide's port → the one to use instead, for a port the test holds)."""
    block = block.replace(".venv/bin/", f"{BIN}/")
    for port in dict.fromkeys(_PORT.findall(block)):
        chosen = (ports or {}).get(port) or free_port()
        block = re.sub(rf"(--port |127\.0\.0\.1:){port}\b", rf"\g<1>{chosen}", block)
    return block


@dataclass
class Pasted:
    """What one pasted block did."""

    block: str
    returncode: int
    stdout: str
    stderr: str
    home: Path

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def json_lines(self) -> list[dict]:
        """Every line of stdout that is a JSON object (what curl and the commands printed,
        one answer per line or several run together)."""
        found = []
        decoder = json.JSONDecoder()
        for line in self.stdout.splitlines():
            index = line.find("{")
            while index != -1:
                try:
                    value, end = decoder.raw_decode(line, index)
                except ValueError:
                    index = line.find("{", index + 1)
                    continue
                if isinstance(value, dict):
                    found.append(value)
                index = line.find("{", end)
        return found

    def sent(self) -> list[dict]:
        """The messages of the first ``/_fake/sent`` answer."""
        return next(v["messages"] for v in self.json_lines() if "messages" in v)

    def report(self) -> str:
        return (f"--- the block:\n{self.block}\n--- exit status {self.returncode}\n"
                f"--- stdout:\n{self.stdout}\n--- stderr:\n{self.stderr}")


def paste(guide: str, tmp_path: Path) -> Pasted:
    """Run the guide's block as one bash script; fail if it overruns or leaves a process."""
    return paste_block(shell_block(GUIDES / guide), tmp_path)


def paste_block(block: str, tmp_path: Path, *, path: tuple[Path, ...] = (),
                cwd: Path = ROOT) -> Pasted:
    """Run ``block`` as one bash script in ``cwd``, with ``path`` first on PATH; fail
    unless it ran to its end and said nothing of a failure."""
    pasted = run_block(block, tmp_path, path=path, cwd=cwd)
    assert pasted.returncode == 0, pasted.report()
    for bad in ("Traceback", "home in use", "Connection refused", "No such job",
                "no such job", "Couldn't connect"):
        assert bad not in pasted.output, pasted.report() + f"\n--- says {bad!r}"
    return pasted


def run_block(block: str, tmp_path: Path, *, path: tuple[Path, ...] = (), cwd: Path = ROOT,
              ports: dict[str, int] | None = None) -> Pasted:
    """Run ``block`` as one bash script (:func:`localized` with ``ports``), whatever its
    exit status; fail if it overruns or leaves a process."""
    block = localized(block, ports)
    env = {key: value for key, value in os.environ.items() if not key.startswith("CHATKERNEL_")}
    # A shell outside the venv: a bare `python` or `chatkernel` is not the venv's.
    env["PATH"] = ":".join([*map(str, path), *(
        part for part in env.get("PATH", "/usr/bin:/bin").split(":")
        if part and Path(part) != Path(BIN))])
    env.pop("VIRTUAL_ENV", None)
    temp = tmp_path / "tmp"
    temp.mkdir(parents=True)
    env["TMPDIR"] = str(temp)
    # Output to files, not pipes: a process the block leaves running would hold a pipe
    # open, and the block's end would not be seen.
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        shell = subprocess.Popen(["bash", "-c", block], cwd=cwd, env=env, stdout=stdout,
                                 stderr=stderr, start_new_session=True)  # a group, to clean up
    try:
        shell.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        _stop_group(shell.pid)
        shell.wait()
        raise AssertionError(Pasted(block, -1, out.read_text(), err.read_text(), temp)
                             .report() + f"\n--- did not end within {TIMEOUT} s") from None
    stdout, stderr = out.read_text(), err.read_text()
    (home,) = temp.iterdir()
    pasted = Pasted(block, shell.returncode, stdout, stderr, home)
    leftovers = _stop_group(shell.pid)
    assert not leftovers, pasted.report() + f"\n--- left running: {leftovers}"
    return pasted


def _stop_group(pgid: int) -> list[str]:
    """Stop whatever is left in the block's process group; what it was (empty: nothing)."""
    listing = subprocess.run(["ps", "-eww", "-o", "pgid=,stat=,pid=,args="],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    # A zombie (stat Z) has ended: only its parent, gone with the shell, would reap it.
    left = [line.split(None, 2)[2] for line in listing if len(line.split()) > 2
            and line.split()[0] == str(pgid) and not line.split()[1].startswith("Z")]
    if not left:
        return []
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, signum)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return left
            time.sleep(0.1)  # real time: the guide's processes end on their own signal
    return left


def assert_throwaway_home(pasted: Pasted) -> None:
    """The block's first command makes a throwaway home, and the state went there."""
    assert pasted.block.startswith('export CHATKERNEL_HOME="$(mktemp -d)"'), pasted.block
    assert (pasted.home / "state.db").exists(), pasted.report()


@pytest.mark.slow
def test_the_telegram_guide(tmp_path):
    pasted = paste("telegram.md", tmp_path)
    assert_throwaway_home(pasted)
    assert "2 channel account(s): telegram:main, webchat:default" in pasted.stdout
    (hello,) = pasted.sent()
    assert hello["text"] == "hello" and hello["parse_mode"] in ("HTML", None)
    assert "not sent to telegram:main → 777" in pasted.stderr
    assert "chat not found" in pasted.stderr
    assert "bot -> chat 42: sendMessage (parse_mode" in pasted.stderr
    assert "bot -> sendMessage refused: Bad Request: chat not found" in pasted.stderr
    # The config the guide shows references the token; the dev server prints the same.
    config = (pasted.home / "config.toml").read_text()
    assert 'bot_token = "${TELEGRAM_BOT_TOKEN}"' in config
    assert 'bot_token = "${TELEGRAM_BOT_TOKEN}"' in pasted.stderr


@pytest.mark.slow
def test_the_slack_guide(tmp_path):
    pasted = paste("slack.md", tmp_path)
    assert_throwaway_home(pasted)
    assert "2 channel account(s): slack:main, webchat:default" in pasted.stdout
    assert [m["text"] for m in pasted.sent()] == ["hello"]
    assert "not sent to slack:main → C0NOWHERE1" in pasted.stderr
    assert "channel_not_found" in pasted.stderr
    config = (pasted.home / "config.toml").read_text()
    assert 'bot_token = "${SLACK_BOT_TOKEN}"' in config
    # The snippet the dev server prints is the guide's.
    assert 'bot_token = "${SLACK_BOT_TOKEN}"' in pasted.stderr
    assert "xoxb-0000000001-0000000002-DEVSERVERofflineBotToken" in pasted.stderr


@pytest.mark.slow
def test_the_discord_guide(tmp_path):
    pasted = paste("discord.md", tmp_path)
    assert_throwaway_home(pasted)
    assert "2 channel account(s): discord:main, webchat:default" in pasted.stdout
    assert {"connected": True} in [{k: v for k, v in line.items() if k == "connected"}
                                   for line in pasted.json_lines()]
    assert [m["content"] for m in pasted.sent()] == ["hello"]
    assert "not sent to discord:main → 999" in pasted.stderr
    assert "Unknown Channel" in pasted.stderr
    config = (pasted.home / "config.toml").read_text()
    assert 'token = "${DISCORD_BOT_TOKEN}"' in config
    assert 'token = "${DISCORD_BOT_TOKEN}"' in pasted.stderr  # the dev server's snippet


@pytest.mark.slow
def test_the_whatsapp_guide(tmp_path):
    pasted = paste("whatsapp.md", tmp_path)
    assert_throwaway_home(pasted)
    assert "2 channel account(s): webchat:default, whatsapp:main" in pasted.stdout
    assert {"passed": True} in pasted.json_lines()
    assert [m["text"] for m in pasted.sent()] == ["hello"]
    assert "not sent to whatsapp:main → 15550009999" in pasted.stderr
    assert "131047" in pasted.stderr
    assert 'access_token = "${WHATSAPP_TOKEN}"' in pasted.stderr


@pytest.mark.slow
def test_the_wechat_guide(tmp_path):
    pasted = paste("wechat.md", tmp_path)
    assert_throwaway_home(pasted)
    assert sum("qrcode" in v for v in pasted.json_lines()) == 2  # scaned, confirmed
    assert "2 channel account(s): webchat:default, wechat:main" in pasted.stdout
    assert [m["text"] for m in pasted.sent()] == ["hello"]
    assert "no context_token for nobody@im.wechat" in pasted.stderr
    config = (pasted.home / "config.toml").read_text()
    assert "bot_token" in config and 'cdn_base = "http://127.0.0.1:' in config
    assert f"bot_token stored under channels.wechat.accounts.main in {pasted.home}/" \
        "config.toml" in pasted.output


@pytest.mark.slow
@pytest.mark.parametrize("guide", ["telegram.md", "slack.md", "whatsapp.md", "wechat.md"])
def test_a_block_whose_dev_server_cannot_listen_stops_saying_so(tmp_path, guide):
    block = shell_block(GUIDES / guide)
    channel, port = re.search(r"chatkernel_(\w+)\.devserver --port (\d+)", block).groups()
    taken = free_port()
    # The port is another dev server's: the same guide's, left running by an earlier paste.
    other = subprocess.Popen([sys.executable, "-m", f"chatkernel_{channel}.devserver",
                              "--port", str(taken)], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        first = json.loads(other.stdout.readline())  # printed once it listens
        pasted = run_block(block, tmp_path, ports={port: taken})
        with urllib.request.urlopen(f"{first['base_url']}/_fake/sent", timeout=10) as answer:
            sent = json.load(answer)["messages"]
    finally:
        other.terminate()
        other.wait(timeout=10)
    assert pasted.returncode == 1, pasted.report()
    assert f"stopped: 127.0.0.1:{taken} is not this dev server" in pasted.stderr, \
        pasted.report()
    # Nothing after the check ran against the other dev server: no gateway, no user.
    assert "Traceback" not in pasted.output, pasted.report()
    assert not (pasted.home / "state.db").exists(), pasted.report()
    assert sent == [] and "/_fake/messages" not in pasted.output


def test_the_ready_route_answers_only_as_the_process_asked_for(tmp_path):
    from chatkernel_telegram.devserver import server

    other = subprocess.Popen([sys.executable, "-m", "chatkernel_telegram.devserver",
                              "--port", "0"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        first = json.loads(other.stdout.readline())
        ready = f"{first['base_url']}/_fake/ready"

        def get(url: str) -> tuple[int, dict]:
            try:
                with urllib.request.urlopen(url, timeout=10) as answer:
                    return answer.status, json.load(answer)
            except urllib.error.HTTPError as refused:
                return refused.code, json.load(refused)

        assert get(ready) == (200, first)
        assert get(f"{ready}?pid={other.pid}") == (200, first)  # itself
        assert get(f"{ready}?pid={os.getpid()}") == (200, first)  # what started it
        status, body = get(f"{ready}?pid=1")  # neither
        assert status == 409 and "not process 1: another process has the port" in body["error"]
        assert server.prog in body["error"]
        assert get(f"{ready}?pid=x")[0] == 400
    finally:
        other.terminate()
        other.wait(timeout=10)
