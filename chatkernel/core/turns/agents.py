"""Agents: what answers a session's turns. Agents are plugins too.

An agent turn is an async stream of :class:`AgentEvent`: text blocks (sent
only when ``final``), tool activity and thinking (never sent), errors and
system notes (sent with a clear prefix after flushing pending text).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import anyio

if TYPE_CHECKING:
    from chatkernel.core.config import AgentConfig
    from chatkernel.sdk.models import MediaRef
    from chatkernel.core.store.base import Store

log = logging.getLogger("chatkernel.agents")

EventKind = Literal["text", "tool", "thinking", "error", "system"]


@dataclass(slots=True)
class AgentEvent:
    """One event of an agent turn."""

    kind: EventKind
    text: str = ""
    final: bool = True  # for "text": a complete block that may be sent

    @classmethod
    def reply(cls, text: str) -> "AgentEvent":
        return cls("text", text, True)

    @classmethod
    def error(cls, text: str) -> "AgentEvent":
        return cls("error", text)


@dataclass(slots=True)
class TurnRequest:
    """What a turn gives the agent."""

    session_key: str
    session_id: str  # changes on /new: history belongs to it
    text: str  # the clean text (merged, for a collected turn)
    envelope: str  # "[channel: telegram | user: 42 | thread: 7]"
    media: list["MediaRef"] = field(default_factory=list)
    heartbeat: bool = False
    #: Where the history ends: entries with a smaller seq. None: the whole log, which
    #: is the history before this turn (a message turn's own entries are logged with
    #: its reply); a heartbeat turn, logged as it starts, sets its entry's seq.
    log_seq: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt(self) -> str:
        """The envelope line, then the text: what a text agent reads."""
        return f"{self.envelope}\n{self.text}" if self.envelope else self.text


class Agent:
    """Base class of agent kinds; subclasses set :attr:`name` and implement :meth:`turn`."""

    name: ClassVar[str]
    #: Whether :meth:`steer` can hand a message to a running turn.
    supports_steer: ClassVar[bool] = False

    def __init__(self, config: "AgentConfig", store: "Store") -> None:
        self.config = config
        self.store = store

    @classmethod
    def check_config(cls, config: "AgentConfig") -> None:
        """Refuse an ``[agent]`` table this kind cannot run with (a ConfigError naming
        the key), before anything starts: ``config validate``, a start, a reload."""

    def turn(self, request: TurnRequest) -> AsyncIterator[AgentEvent]:
        """Run one turn, yielding events. Cancelling the iteration aborts the turn."""
        raise NotImplementedError

    async def steer(self, session_key: str, text: str) -> bool:
        """Hand text to the running turn of a session; False if it cannot."""
        return False

    async def aclose(self) -> None:
        """Release clients and child processes."""


# -- registry ------------------------------------------------------------------------------


def collect_agents(pm: Any) -> dict[str, type[Agent]]:
    """Agent kinds by name, from every plugin's ``register_agents``.

    Each registered item must be an :class:`Agent` subclass with a non-empty
    string ``name``. pluggy calls the newest plugin first, so the first
    registration of a name wins: a plugin can replace a built-in kind.
    """
    from chatkernel.core.plugins import collect_registered

    return collect_registered(pm.hook.register_agents, "agent", Agent)


def describe_media(media: list["MediaRef"]) -> str:
    """``"received 1 image: cat.jpg"``; mixed kinds: ``"received 2 files: a.jpg (image), …"``."""

    def label(ref: "MediaRef") -> str:
        if ref.filename:
            return ref.filename
        if ref.path is not None:
            return ref.path.name
        return ref.platform_id or ref.kind

    kinds = {ref.kind for ref in media}
    count = len(media)
    if len(kinds) == 1:
        kind = next(iter(kinds)) or "file"
        noun = kind if count == 1 else ("audio files" if kind == "audio" else f"{kind}s")
        if kind == "audio" and count == 1:
            noun = "audio file"
        names = ", ".join(label(ref) for ref in media)
    else:
        noun = "files"
        names = ", ".join(f"{label(ref)} ({ref.kind})" for ref in media)
    return f"received {count} {noun}: {names}"


# -- echo ------------------------------------------------------------------------------------


class EchoAgent(Agent):
    """Answers every turn with its text: the embedded default, and a test double.

    A turn with no text but media answers with what was received.
    """

    name = "echo"

    async def turn(self, request: TurnRequest) -> AsyncIterator[AgentEvent]:
        text = request.text
        if not text.strip() and request.media:
            text = describe_media(request.media)
        yield AgentEvent.reply(text)


# -- what every agent's output passes ------------------------------------------------------


def redact_turns(agent: Agent, redact: Callable[[str], str]) -> None:
    """Make the text of every event of ``agent``'s turns pass ``redact``.

    The kernel does this to its agent with the secrets it knows
    (:func:`chatkernel.core.config.kernel_secrets`): whatever an agent prints,
    its replies, error notes and heartbeat answers reach neither a chat nor
    the session log with a secret in them.
    """
    turn = agent.turn

    async def redacted(request: TurnRequest) -> AsyncIterator[AgentEvent]:
        events = turn(request)
        try:
            async for event in events:
                if event.text:
                    event.text = redact(event.text)
                yield event
        finally:
            await events.aclose()

    agent.turn = redacted  # type: ignore[method-assign]


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


# -- command ---------------------------------------------------------------------------------

#: How much of a failed program's stderr an error event quotes.
STDERR_TAIL = 500
_STDERR_KEEP = 64 * 1024  # stderr is kept bounded; only its tail is ever shown

#: What the command agent's program gets of the gateway's environment without being
#: asked (with every ``LC_*``): enough to run a program, nothing that may be a secret.
SAFE_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR",
            # what programs need on Windows
            "SYSTEMROOT", "COMSPEC", "PATHEXT", "TEMP", "TMP")


def agent_environment(config: "AgentConfig", environ: dict[str, str] | None = None
                      ) -> dict[str, str]:
    """The command agent's environment: :data:`SAFE_ENV` and ``LC_*`` from the gateway's,
    the names in ``agent.pass_env``, then ``agent.env``'s values (resolved already)."""
    env = os.environ if environ is None else environ
    chosen = {name: value for name, value in env.items()
              if name in SAFE_ENV or name.startswith("LC_")}
    chosen.update((name, env[name]) for name in config.pass_env if name in env)
    chosen.update(config.env)
    return chosen


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
        timed_out = False
        try:
            with anyio.move_on_after(self.config.timeout) as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._feed, process, utf8(request.prompt))
                    tg.start_soon(self._drain, process.stdout, stdout, None)
                    tg.start_soon(self._drain, process.stderr, stderr, _STDERR_KEEP)
                await process.wait()
            timed_out = scope.cancelled_caught
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


# -- OpenAI-compatible -----------------------------------------------------------------------


class _TurnTimeout(Exception):
    """The turn's deadline passed while waiting for the endpoint."""


class _StreamError(Exception):
    """An error object sent by the endpoint inside a 2xx answer."""


def _error_detail(body: bytes, limit: int = 300) -> str:
    """The ``error.message`` of an OpenAI-style error body, or a short excerpt."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:limit]
        if isinstance(error, str) and error:
            return error[:limit]
        for key in ("message", "detail"):
            if isinstance(data.get(key), str) and data[key]:
                return data[key][:limit]
    return text[:limit]


def _content_text(content: Any) -> str:
    """Message content as text: a string, or a list of ``{"type": "text"}`` parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content
                       if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


class OpenAIAgent(Agent):
    """Any OpenAI-compatible chat-completions endpoint, streaming, with per-session history.

    Sends ``POST {agent.base_url}/chat/completions`` with the system prompt,
    the session's earlier user/assistant turns (``agent.history_limit`` of
    them, from the store's session log) and the turn's prompt. The key is read
    from the environment variable named by ``agent.api_key_env`` (no
    ``Authorization`` header when it is unset) and never appears in events or
    logs.

    Events: non-final ``text`` events carry each streamed content delta, then
    one final ``text`` event carries the whole reply; ``reasoning_content`` /
    ``reasoning`` deltas are ``thinking`` events and tool calls are ``tool``
    events (a non-final one when a call starts, a final one with its full
    arguments at the end). ``agent.timeout`` bounds the whole request.
    """

    name = "openai"

    def __init__(self, config: "AgentConfig", store: "Store") -> None:
        super().__init__(config, store)
        self._http: Any = None  # aiohttp.ClientSession, created on first use

    # -- plumbing ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        base = self.config.base_url.strip().rstrip("/")
        if base.endswith("/chat/completions"):
            return base
        return f"{base}/chat/completions"

    def _api_key(self) -> str | None:
        name = self.config.api_key_env
        return (os.environ.get(name) or None) if name else None

    def _redact(self, text: str) -> str:
        key = self._api_key()
        if key and len(key) >= 4:
            text = text.replace(key, "***")
        return text

    def _client(self) -> Any:
        import aiohttp

        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.config.timeout))
        return self._http

    async def aclose(self) -> None:
        http, self._http = self._http, None
        if http is not None and not http.closed:
            await http.close()

    async def messages(self, request: TurnRequest) -> list[dict[str, str]]:
        """The chat messages of a turn: system prompt, history, then the prompt."""
        messages: list[dict[str, str]] = []
        if self.config.system_prompt:
            messages.append({"role": "system", "content": self.config.system_prompt})
        if self.config.history_limit > 0:
            try:
                entries = await self.store.read_log(
                    request.session_key, session_id=request.session_id,
                    limit=self.config.history_limit, roles=("user", "assistant"),
                    before_seq=request.log_seq)
            except Exception:
                log.warning("cannot read the history of session %s; answering without it",
                            request.session_key, exc_info=True)
                entries = []
            for entry in entries:
                if entry.role in ("user", "assistant"):
                    messages.append({"role": entry.role, "content": entry.text})
        messages.append({"role": "user", "content": request.prompt})
        return messages

    # -- the turn ---------------------------------------------------------------------------

    async def turn(self, request: TurnRequest) -> AsyncIterator[AgentEvent]:
        import aiohttp

        timeout = self.config.timeout
        deadline = anyio.current_time() + timeout
        url = self.url
        where = self.config.base_url

        async def within(awaitable: Any) -> Any:
            # Each wait is bounded by the turn's deadline. No yield happens inside
            # the cancel scope, so it is safe in this async generator.
            with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
                return await awaitable
            raise _TurnTimeout

        body = {"model": self.config.model, "messages": await self.messages(request),
                "stream": True}
        headers = {"Content-Type": "application/json",
                   "Accept": "text/event-stream, application/json"}
        key = self._api_key()
        if key:
            headers["Authorization"] = f"Bearer {key}"

        response = None
        completed = False
        error: str | None = None
        try:
            try:
                response = await within(self._client().post(url, json=body, headers=headers))
                if response.status >= 300:
                    detail = _error_detail(await within(response.read()))
                    reason = f" {response.reason}" if response.reason else ""
                    error = (f"The model endpoint {where} answered HTTP {response.status}"
                             f"{reason}{': ' + detail if detail else ''}. "
                             f"{self._advice(response.status)}")
                else:
                    ctype = response.content_type
                    if ctype == "application/json":
                        data = json.loads(await within(response.read()))
                        events = self._from_json(data)
                    else:
                        events = self._from_stream(response, within)
                    async with aclosing(events):
                        async for event in events:
                            yield event
                completed = True
            except _TurnTimeout:
                error = (f"The model endpoint {where} did not answer within {timeout:g} s. "
                         "If it needs longer, raise agent.timeout.")
            except aiohttp.ClientConnectorError as exc:
                error = (f"Cannot connect to the model endpoint {where}: "
                         f"{exc.os_error or exc}. Check agent.base_url and that the server "
                         "runs.")
            except aiohttp.InvalidURL:
                error = (f"agent.base_url is not a valid URL: {where!r}. Set it to the "
                         "endpoint's base, such as http://127.0.0.1:11434/v1.")
            except aiohttp.ClientError as exc:
                error = (f"The connection to the model endpoint {where} failed: "
                         f"{type(exc).__name__}: {exc}. Try again; if it keeps failing, "
                         "check the server.")
            except ValueError as exc:  # bad JSON in the body or a stream chunk
                error = (f"The model endpoint {where} sent an answer that is not valid: "
                         f"{exc}. Check that agent.base_url is an OpenAI-compatible endpoint.")
            except _StreamError as exc:
                error = f"The model endpoint {where} reported an error: {exc}."
        finally:
            if response is not None:
                if completed:
                    response.release()
                else:
                    response.close()
        if error is not None:
            message = self._redact(error)
            log.warning("openai agent, session %s: %s", request.session_key, message)
            yield AgentEvent.error(message)

    def _advice(self, status: int) -> str:
        """What to do about an HTTP error of the endpoint."""
        if status in (401, 403):
            name = self.config.api_key_env
            return (f"Check the API key in ${name} (agent.api_key_env)." if name
                    else "Set agent.api_key_env to the variable that holds the API key.")
        if status == 404:
            return "Check agent.base_url and agent.model."
        if status == 429:
            return "It is limiting requests: try again later."
        if status >= 500:
            return "The server failed: try again later."
        return "Check agent.model and agent.base_url."

    async def _from_json(self, data: Any) -> AsyncIterator[AgentEvent]:
        if isinstance(data, dict) and data.get("error"):
            raise _StreamError(_error_detail(json.dumps(data).encode()))
        try:
            message = data["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            raise ValueError("no choices[0].message in the JSON answer") from None
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            yield AgentEvent("thinking", reasoning, True)
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            yield AgentEvent("tool", f"{function.get('name', '?')}"
                                     f"({function.get('arguments', '')})", True)
        yield AgentEvent.reply(_content_text(message.get("content")))

    async def _from_stream(self, response: Any, within: Any) -> AsyncIterator[AgentEvent]:
        parts: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        async with aclosing(_sse_data(response, within)) as stream:
            async for data in stream:
                if data.strip() == "[DONE]":
                    break
                for event in _chunk_events(data, parts, calls):
                    yield event
        for call in calls.values():
            yield AgentEvent("tool", f"{call['name'] or '?'}({call['arguments']})", True)
        yield AgentEvent.reply("".join(parts))


def _chunk_events(data: str, parts: list[str],
                  calls: dict[int, dict[str, str]]) -> list[AgentEvent]:
    """The events of one ``chat.completion.chunk``; content and tool calls accumulate."""
    chunk = json.loads(data)
    if not isinstance(chunk, dict):
        return []
    if chunk.get("error"):
        raise _StreamError(_error_detail(data.encode()))
    choices = chunk.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return []  # e.g. the usage chunk
    events: list[AgentEvent] = []
    delta = choices[0].get("delta") or choices[0].get("message") or {}
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        events.append(AgentEvent("thinking", reasoning, False))
    for call in delta.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        index = call.get("index", len(calls))
        function = call.get("function") or {}
        known = calls.setdefault(index, {"name": "", "arguments": ""})
        if function.get("name"):
            starting = not known["name"]
            known["name"] += function["name"]
            if starting:
                events.append(AgentEvent("tool", f"calling {known['name']}", False))
        if function.get("arguments"):
            known["arguments"] += function["arguments"]
    content = _content_text(delta.get("content"))
    if content:
        parts.append(content)
        events.append(AgentEvent("text", content, False))
    return events


async def _sse_data(response: Any, within: Any) -> AsyncIterator[str]:
    """The ``data`` of each server-sent event of a response, as text."""
    buffer = b""
    data_lines: list[str] = []
    while True:
        chunk = await within(response.content.readany())
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for raw in lines:
            line = raw.rstrip(b"\r").decode("utf-8", errors="replace")
            if not line:
                if data_lines:
                    yield "\n".join(data_lines)
                    data_lines = []
                continue
            if line.startswith(":"):
                continue  # a comment / keep-alive
            field_name, _, value = line.partition(":")
            if field_name == "data":
                data_lines.append(value[1:] if value.startswith(" ") else value)
    tail = buffer.rstrip(b"\r").decode("utf-8", errors="replace")
    if tail.startswith("data:"):
        value = tail[5:]
        data_lines.append(value[1:] if value.startswith(" ") else value)
    if data_lines:
        yield "\n".join(data_lines)
