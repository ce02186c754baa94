"""Run ``chatkernel run`` and a plugin's dev server as real processes, for end-to-end tests."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHATKERNEL = str(Path(sys.executable).with_name("chatkernel"))


@dataclass
class GatewayProcess:
    """A running gateway: its base URL, the process, and the log lines read so far."""

    url: str
    process: subprocess.Popen
    lines: list[str] = field(default_factory=list)

    def webchat_messages(self, chat_id: str, want: int, timeout: float = 10.0) -> list[dict]:
        """The web chat's messages in ``chat_id`` once there are ``want`` of them, or
        what there is when ``timeout`` seconds have passed (the caller asserts)."""
        import urllib.parse

        query = urllib.parse.urlencode({"chat_id": chat_id})
        return wait_for_messages(f"{self.url}/webchat/messages?{query}", want, timeout)

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, then wait; returns the exit status (killing it if it hangs)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise


def free_port() -> int:
    """A port on 127.0.0.1 that nobody listens on right now: one to listen on, or one
    whose connections are refused (a platform that is down)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_process(process: subprocess.Popen, *, timeout: float) -> None:
    """Stop a child process cleanly: SIGTERM, then SIGKILL when it has not ended within
    ``timeout`` seconds; its stderr pipe, if any, closed."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stderr is not None:
        process.stderr.close()


def wait_for_messages(url: str, want: int, timeout: float = 10.0) -> list[dict]:
    """GET ``url`` (JSON with a ``messages`` list) until it holds ``want`` messages, or
    ``timeout`` seconds have passed; returns the last list (the caller asserts)."""
    import json
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(url, timeout=5) as response:
            messages = json.load(response)["messages"]
        if len(messages) >= want or time.monotonic() > deadline:
            return messages
        time.sleep(0.05)


@contextmanager
def gateway_process(home: Path, *args: str, start_timeout: float = 20.0,
                    env: dict[str, str] | None = None, log_file: Path | None = None,
                    preexec_fn: Callable[[], Any] | None = None,
                    command: str = CHATKERNEL) -> Iterator[GatewayProcess]:
    """Start ``chatkernel run --listen 127.0.0.1:0 ARGS`` with ``CHATKERNEL_HOME=home``
    and yield once it logs the address it bound (``command``: the ``chatkernel`` to run,
    :func:`chatkernel_for` another user).

    Its log goes to a pipe read up to that line, or, with ``log_file``, to that file
    (for a test that makes it log a lot, or measures it). ``preexec_fn`` runs in the
    child before ``chatkernel`` starts (``resource.setrlimit`` for a lower ``ulimit``)."""
    environ = {**os.environ, "CHATKERNEL_HOME": str(home), **(env or {})}
    environ.pop("CHATKERNEL_CONFIG", None)
    with ExitStack() as files:
        stderr: Any = subprocess.PIPE
        if log_file is not None:
            stderr = files.enter_context(log_file.open("ab"))
        process = subprocess.Popen([command, "run", "--listen", "127.0.0.1:0", *args],
                                   env=environ, stderr=stderr, stdout=subprocess.DEVNULL,
                                   text=True, preexec_fn=preexec_fn)
    gateway = None
    try:
        lines: list[str] = []
        deadline = time.monotonic() + start_timeout
        while time.monotonic() < deadline:
            if log_file is not None:
                lines = log_file.read_text(errors="replace").splitlines(keepends=True)
                line = next((text for text in lines if "listening on" in text), "")
                if not line:
                    if process.poll() is not None:
                        break
                    time.sleep(0.05)
                    continue
            else:
                line = process.stderr.readline()  # type: ignore[union-attr]
                if not line:
                    break
                lines.append(line)
            match = re.search(r"listening on (http://\S+)", line)
            if match:
                gateway = GatewayProcess(match[1], process, lines)
                break
        if gateway is None:
            raise RuntimeError("the gateway did not start:\n" + "".join(lines))
        yield gateway
    finally:
        stop_process(process, timeout=15)


@asynccontextmanager
async def running_gateway_process(home: Path, *args: str, **options: Any
                                  ) -> AsyncIterator[GatewayProcess]:
    """:func:`gateway_process` from an async test: started and stopped in a thread, so
    the fake platforms in the test's event loop go on answering meanwhile."""
    import anyio

    stack = ExitStack()
    process = await anyio.to_thread.run_sync(
        lambda: stack.enter_context(gateway_process(home, *args, **options)))
    try:
        yield process
    finally:
        await anyio.to_thread.run_sync(stack.close)


#: A queue that answers each message on its own and at once, so a test counts one answer
#: per message it sent.
ONE_ANSWER_PER_MESSAGE = '[queue]\nmode = "followup"\ndebounce_ms = 0\n\n'


def gateway_home(home: Path, config: str) -> Path:
    """Make ``home`` a gateway's home (``CHATKERNEL_HOME``) whose config.toml is
    ``config`` (the channel's account tables) after :data:`ONE_ANSWER_PER_MESSAGE`;
    returns ``home``, for :func:`gateway_process`."""
    home.mkdir(parents=True)
    (home / "config.toml").write_text(ONE_ANSWER_PER_MESSAGE + config)
    return home


@contextmanager
def devserver(module: str, *args: str) -> Iterator[dict]:
    """Run a plugin's dev server (``python -m <module> --port 0 ARGS``) while the block
    runs; yields the JSON object it prints first (its URL, token...)."""
    import tempfile

    # Its log to a file: a pipe nobody reads would stop a dev server that logs a lot.
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen([sys.executable, "-m", module, "--port", "0", *args],
                                   stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            line = process.stdout.readline()  # type: ignore[union-attr]
            if not line:
                process.wait(timeout=10)
                log.seek(0)
                raise RuntimeError(f"the dev server {module} did not start: " + log.read())
            yield json.loads(line)
        finally:
            process.terminate()
            process.wait(timeout=10)
            process.stdout.close()  # type: ignore[union-attr]


def post_json(url: str, body: object, timeout: float = 10.0) -> tuple[int, object]:
    """POST ``body`` as JSON; the answer's status and JSON, whatever the status."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)



def chatkernel_for(user: Any) -> str:
    """The ``chatkernel`` command as ``user`` (a ``pwd`` entry) can run it, for a test
    that runs the gateway as ``nobody``: :data:`CHATKERNEL` where ``user`` can reach
    this environment and its sources; otherwise (a checkout in a folder closed to
    others, as anything under ``/root`` is) a copy of its packages in a temporary
    directory open to everyone, run by the base interpreter, made once per process and
    removed at exit. Raises ``PermissionError`` when not even the interpreter is
    within ``user``'s reach."""
    import ast
    import atexit
    import shutil
    import sysconfig
    import tempfile

    site = Path(sysconfig.get_paths()["purelib"])
    sources: dict[str, str] = {}  # the packages installed editable: setuptools' finders
    for finder in site.glob("__editable___*_finder.py"):
        for node in ast.parse(finder.read_text()).body:
            if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "MAPPING":
                sources.update(ast.literal_eval(node.value))  # type: ignore[arg-type]
    if all(_reachable(Path(path), user) for path in (sys.prefix, site, *sources.values())):
        return CHATKERNEL
    python = Path(getattr(sys, "_base_executable", "") or sys.executable)
    if not _reachable(python, user):
        raise PermissionError(f"{user.pw_name} can reach neither this environment nor "
                              f"its interpreter {python}")
    if str(python) in _RUNNABLE:
        return _RUNNABLE[str(python)]

    def place(src: str, dst: str) -> None:  # a hard link where all may read it already
        if os.stat(src).st_mode & 0o004:
            try:
                return os.link(src, dst)
            except OSError:
                pass
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o644)

    root = Path(tempfile.mkdtemp(prefix="chatkernel-runnable-"))
    atexit.register(shutil.rmtree, root, True)
    shutil.copytree(site, root / "site", copy_function=place,
                    ignore=shutil.ignore_patterns("__editable__*"))
    for name, source in sources.items():
        shutil.copytree(source, root / "src" / name, copy_function=place)
    for directory, _, _ in os.walk(root):
        os.chmod(directory, 0o755)
    command = root / "chatkernel"
    # -S: neither the interpreter's own site-packages nor the copy's .pth files.
    command.write_text(
        f"#!/bin/sh\nPYTHONPATH='{root}/src:{root}/site' exec '{python}' -S -c "
        "'import sys; from chatkernel.cli import main; sys.argv[0] = \"chatkernel\"; "
        "sys.exit(main())' \"$@\"\n")
    command.chmod(0o755)
    _RUNNABLE[str(python)] = str(command)
    return str(command)


#: The commands :func:`chatkernel_for` made, by interpreter.
_RUNNABLE: dict[str, str] = {}


def _reachable(path: Path, user: Any) -> bool:
    """Whether ``user`` may pass through every directory down to ``path`` (and into it)."""
    import grp
    import stat

    groups = {user.pw_gid} | {g.gr_gid for g in grp.getgrall() if user.pw_name in g.gr_mem}
    path = path.resolve()
    for directory in (path if path.is_dir() else path.parent, *path.parents):
        info = directory.stat()
        bit = (stat.S_IXUSR if info.st_uid == user.pw_uid else
               stat.S_IXGRP if info.st_gid in groups else stat.S_IXOTH)
        if not info.st_mode & bit:
            return False
    return True
