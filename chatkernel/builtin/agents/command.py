"""The ``command`` agent: one run of ``agent.command`` per turn, prompt on stdin, reply
on stdout, in an explicit environment and its own process group."""

from __future__ import annotations

import codecs
import logging
import math
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio

from chatkernel.core.turns.agents import Agent, AgentEvent, TurnRequest, agent_environment

if TYPE_CHECKING:
    from chatkernel.core.config import AgentConfig

log = logging.getLogger("chatkernel.agents")

#: How much of a failed program's stderr an error event quotes.
STDERR_TAIL = 500
_STDERR_KEEP = 64 * 1024  # stderr is kept bounded; only its tail is ever shown


def utf8(text: str) -> bytes:
    """``text`` as UTF-8, a lone surrogate (which a chat message may carry: JSON and
    JavaScript strings allow them) written as U+FFFD instead of failing."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode()


def _env_value(text: str) -> str:
    """A value an environment can hold: no NUL, no lone surrogate."""
    return utf8(text).decode().replace("\x00", "\ufffd")


def _tail(data: bytes | bytearray, limit: int = STDERR_TAIL) -> str:
    text = bytes(data).decode("utf-8", errors="replace").strip()
    return text[-limit:] if len(text) > limit else text


def _failure(what: str, stderr: bytes | bytearray, advice: str) -> str:
    """An agent failure as sentences: what failed and why, what its error output ends
    with, what to do."""
    tail = _tail(stderr)
    quoted = f" Its error output ends with: {tail}" if tail else ""
    return f"{what}.{quoted}{' ' if advice else ''}{advice}"


class CommandAgent(Agent):
    """Runs ``agent.command`` once per turn.

    The program reads the prompt (envelope line, then the text) on stdin and
    writes its reply on stdout. Its environment is explicit
    (:func:`agent_environment`: :data:`SAFE_ENV`, ``agent.pass_env``,
    ``agent.env``), never the gateway's whole one, which holds its secrets, plus
    ``CHATKERNEL_SESSION``, ``CHATKERNEL_SESSION_ID`` and ``CHATKERNEL_HEARTBEAT``
    (``1``/``0``). A non-zero exit, a timeout (``agent.timeout``) or a program
    that cannot be started is an error event that says what failed, quotes the
    tail of stderr and says what to do.

    What the program writes is streamed as it arrives (non-final text events, which a
    live reply shows); the reply is all of its output once it exits with status 0.

    The program runs in its own process group (POSIX), which is killed on
    timeout and when the turn is cancelled, and the process is always reaped:
    a turn leaves no process behind.
    """

    name = "command"

    @classmethod
    def check_config(cls, config: "AgentConfig") -> None:
        if not config.command:
            from chatkernel.sdk.errors import ConfigError

            raise ConfigError('kind = "command" runs agent.command, which is not set: set it '
                              'to the program and its arguments, such as command = '
                              '["python", "bot.py"]', key="agent.command")

    async def turn(self, request: TurnRequest) -> AsyncIterator[AgentEvent]:
        argv = [str(arg) for arg in self.config.command]
        if not argv:
            yield AgentEvent.error(
                'The command agent has no program to run: agent.command is not set. Set '
                'it to the program and its arguments, such as command = ["python", "bot.py"].')
            return
        try:
            async for event in self._run(argv, request):
                yield event
        except Exception as exc:  # a bug of ours, not the program's: say so, log it
            while isinstance(exc, BaseExceptionGroup):  # "unhandled errors in a TaskGroup"
                exc = exc.exceptions[0]
            log.exception("command agent, session %s: the turn failed", request.session_key)
            yield AgentEvent.error(
                f"The agent's turn failed inside the gateway ({type(exc).__name__}: {exc}). "
                "This is a bug in chatkernel; the gateway's log has the details.")

    async def _run(self, argv: list[str], request: TurnRequest) -> AsyncIterator[AgentEvent]:
        env = agent_environment(self.config)
        env["CHATKERNEL_SESSION"] = _env_value(request.session_key)
        env["CHATKERNEL_SESSION_ID"] = _env_value(request.session_id)
        env["CHATKERNEL_HEARTBEAT"] = "1" if request.heartbeat else "0"
        posix = os.name == "posix"
        program = argv[0]
        try:
            process = await anyio.open_process(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=env, start_new_session=posix)
        except FileNotFoundError:
            yield AgentEvent.error(
                f"The agent's program {program!r} was not found. Check agent.command, and "
                "that the program is on the PATH the agent gets (agent.env and "
                "agent.pass_env add to its environment).")
            return
        except PermissionError:
            yield AgentEvent.error(
                f"The agent's program {program!r} could not be run: permission denied. Make "
                "it executable (chmod +x), or put its interpreter first in agent.command.")
            return
        except OSError as exc:
            yield AgentEvent.error(
                f"The agent's program {program!r} could not be started: "
                f"{exc.strerror or exc}. Check agent.command.")
            return

        stdout = bytearray()
        stderr = bytearray()
        timed_out: list[bool] = []
        chunks, received = anyio.create_memory_object_stream[bytes](math.inf)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._feed, process, utf8(request.prompt))
                tg.start_soon(self._pipe, process.stdout, chunks)
                tg.start_soon(self._drain, process.stderr, stderr, _STDERR_KEEP)
                # The deadline kills the program rather than cancelling this scope,
                # which is open across the yields below.
                tg.start_soon(self._deadline, process, posix, timed_out)
                async with received:
                    async for chunk in received:  # stdout as it arrives: a live reply
                        stdout += chunk
                        delta = decoder.decode(chunk)
                        if delta:
                            yield AgentEvent("text", delta, final=False)
                await process.wait()
                tg.cancel_scope.cancel()  # the deadline's wait
        finally:
            # Normal end, timeout or cancellation: nothing of the turn survives it.
            with anyio.CancelScope(shield=True):
                if process.returncode is None or timed_out:
                    self._kill(process, posix)
                await process.aclose()

        if timed_out:
            yield AgentEvent.error(_failure(
                f"The agent did not answer within {self.config.timeout:g} s and was stopped",
                stderr, "If it needs longer, raise agent.timeout."))
            return
        status = process.returncode
        if status != 0:
            if status is not None and status < 0:
                try:
                    signame = signal.Signals(-status).name
                except ValueError:
                    signame = str(-status)
                what = f"The agent's program was killed by signal {signame}"
            else:
                what = f"The agent's program exited with status {status} instead of answering"
            yield AgentEvent.error(_failure(
                what, stderr, "Run agent.command by hand with a message on its input to see why."))
            return
        text = stdout.decode("utf-8", errors="replace")
        if text.endswith("\n"):
            text = text[:-1]
            if text.endswith("\r"):
                text = text[:-1]
        yield AgentEvent.reply(text)

    @staticmethod
    async def _feed(process: Any, data: bytes) -> None:
        try:
            if data:
                await process.stdin.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass  # the program does not read its stdin: that is its business
        finally:
            try:
                await process.stdin.aclose()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass

    async def _deadline(self, process: Any, posix: bool, timed_out: list[bool]) -> None:
        await anyio.sleep(self.config.timeout)
        timed_out.append(True)
        self._kill(process, posix)

    @staticmethod
    async def _pipe(stream: Any, into: Any) -> None:
        async with into:
            async for chunk in stream:
                await into.send(chunk)

    @staticmethod
    async def _drain(stream: Any, into: bytearray, keep: int | None) -> None:
        async for chunk in stream:
            into += chunk
            if keep is not None and len(into) > 2 * keep:
                del into[:-keep]

    @staticmethod
    def _kill(process: Any, posix: bool) -> None:
        if posix:
            try:
                # start_new_session made the child a group leader: pgid == pid.
                os.killpg(process.pid, signal.SIGKILL)
                return
            except (ProcessLookupError, PermissionError):
                pass
        if process.returncode is None:
            try:
                process.kill()
            except ProcessLookupError:
                pass
