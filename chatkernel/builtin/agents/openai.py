"""The ``openai`` agent: any OpenAI-compatible chat-completions endpoint, streaming,
with the session's history from the store."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import anyio

from chatkernel.core.turns.agents import Agent, AgentEvent, TurnRequest

if TYPE_CHECKING:
    from chatkernel.core.config import AgentConfig
    from chatkernel.core.store.base import Store

log = logging.getLogger("chatkernel.agents")


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
        usage = _usage(data)
        if usage is not None:
            yield usage
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
    usage = _usage(chunk)  # the last chunk's, where the endpoint sends one
    events: list[AgentEvent] = [usage] if usage is not None else []
    choices = chunk.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return events  # e.g. the usage chunk
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


def _usage(data: dict) -> AgentEvent | None:
    """The tokens an answer (or a stream's chunk) reports it used, if it does."""
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return None
    model = data.get("model")
    return AgentEvent.usage(model=model if isinstance(model, str) else None,
                            input_tokens=_count(usage.get("prompt_tokens")),
                            output_tokens=_count(usage.get("completion_tokens")))


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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
