"""A fake OpenAI-compatible chat-completions server, for offline tests.

A real aiohttp server on 127.0.0.1 (a free port) speaking the wire format of
``POST /v1/chat/completions`` (streaming server-sent events, or one JSON
answer when ``"stream"`` is false) and ``GET /v1/models``::

    from chatkernel.testing.fakes.openai import FakeOpenAI, FakeReply

    async with FakeOpenAI(replies=["Hello there!"], api_key="sk-test") as fake:
        config = AgentConfig(kind="openai", base_url=fake.base_url, model="m")
        ...
        assert fake.requests[0].json["messages"][-1]["role"] == "user"

Replies are taken from ``replies`` in order (a string, or a :class:`FakeReply`
for thinking, tool calls, an error status or a delay), then from
``reply(messages)`` — by default the text of the last user message, echoed.
Every request is recorded in :attr:`FakeOpenAI.requests`, even refused ones.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = ["FakeOpenAI", "FakeReply", "RecordedRequest"]

#: Default error bodies per status: (message, type, code).
ERRORS: dict[int, tuple[str, str, str | None]] = {
    400: ("Bad request", "invalid_request_error", None),
    401: ("Incorrect API key provided", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to sample from this model", "invalid_request_error", None),
    404: ("The model does not exist or you do not have access to it",
          "invalid_request_error", "model_not_found"),
    429: ("Rate limit reached for requests", "requests", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request. Sorry about that!",
          "server_error", None),
    502: ("Bad gateway.", "server_error", None),
    503: ("The engine is currently overloaded, please try again later.",
          "server_error", None),
}

MISSING_KEY = ("You didn't provide an API key. You need to provide your API key in an "
               "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")

ReplyFunction = Callable[[list[dict[str, Any]]], "str | FakeReply | Awaitable[str | FakeReply]"]


@dataclass(slots=True)
class FakeReply:
    """One scripted answer.

    ``content`` is split into several deltas when streamed; ``reasoning``
    streams first as ``delta.reasoning_content``; ``tool_calls`` are
    ``{"name": ..., "arguments": "<json text>"}`` items. ``status`` answers with
    that HTTP error instead (``error`` is its message); ``delay`` waits first.
    """

    content: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    status: int | None = None
    error: str | None = None
    delay: float = 0.0


@dataclass(slots=True)
class RecordedRequest:
    """A request the fake received."""

    method: str
    path: str
    headers: dict[str, str]
    json: Any  # the decoded body, or None

    @property
    def messages(self) -> list[dict[str, Any]]:
        if isinstance(self.json, dict) and isinstance(self.json.get("messages"), list):
            return self.json["messages"]
        return []


def echo_last_user_message(messages: list[dict[str, Any]]) -> str:
    """The default reply: the text of the last user message."""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):  # content parts
                return "".join(part.get("text", "") for part in content
                               if isinstance(part, dict))
            return content if isinstance(content, str) else ""
    return ""


def split_deltas(text: str) -> list[str]:
    """``text`` cut into word-sized pieces whose concatenation is ``text``."""
    return re.findall(r"\S+\s*|\s+", text)


class FakeOpenAI:
    """The fake server. Use as ``async with FakeOpenAI(...) as fake:`` or start()/stop().

    :param replies: scripted answers, used in order before ``reply``.
    :param reply: ``reply(messages) -> str | FakeReply`` (may be async) once
        ``replies`` is used up; default: echo the last user message.
    :param api_key: when set, requests need ``Authorization: Bearer <api_key>``
        (401 otherwise).
    :param error_status: answer every chat request with this HTTP error.
    :param error_message: the message of that error (a default per status).
    :param delay: seconds to wait before answering each chat request.
    :param chunk_delay: seconds to wait between streamed chunks.
    :param streaming: ``None`` (default) streams when the request asks to;
        ``True`` / ``False`` stream / answer one JSON regardless of it, as some
        servers do.
    :param model: the model id reported by ``/v1/models`` (answers echo the
        requested model).
    """

    def __init__(
        self,
        replies: Iterable[str | FakeReply] = (),
        *,
        reply: ReplyFunction | None = None,
        api_key: str | None = None,
        error_status: int | None = None,
        error_message: str | None = None,
        delay: float = 0.0,
        chunk_delay: float = 0.0,
        streaming: bool | None = None,
        model: str = "fake-model",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.replies: list[str | FakeReply] = list(replies)
        self.reply = reply or echo_last_user_message
        self.api_key = api_key
        self.error_status = error_status
        self.error_message = error_message
        self.delay = delay
        self.chunk_delay = chunk_delay
        self.streaming = streaming
        self.model = model
        self.host = host
        self.port = port
        self.requests: list[RecordedRequest] = []
        #: ``time.monotonic()`` when each streamed answer's first content piece was
        #: written (the agent's first token, for measurements).
        self.first_token_at: list[float] = []
        self._runner: web.AppRunner | None = None
        self._ids = itertools.count(1)

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (still known after :meth:`stop`)."""
        if not self.port:
            raise RuntimeError("the fake OpenAI server has not been started")
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: what ``agent.base_url`` takes."""
        return f"{self.url}/v1"

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """The recorded ``POST .../chat/completions`` requests."""
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    async def start(self) -> "FakeOpenAI":
        app = web.Application()
        for prefix in ("/v1", ""):
            app.router.add_post(f"{prefix}/chat/completions", self._chat)
            app.router.add_get(f"{prefix}/models", self._models)
        runner = web.AppRunner(app, handle_signals=False, access_log=None,
                               handler_cancellation=True, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        self._runner = runner
        self.port = runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> "FakeOpenAI":
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- helpers --------------------------------------------------------------------------

    @staticmethod
    def error_response(status: int, message: str | None = None) -> web.Response:
        default, kind, code = ERRORS.get(status, ("Error", "server_error", None))
        body = {"error": {"message": message or default, "type": kind, "param": None,
                          "code": code}}
        return web.json_response(body, status=status)

    async def _record(self, request: web.Request) -> RecordedRequest:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        recorded = RecordedRequest(request.method, request.path, dict(request.headers), body)
        self.requests.append(recorded)
        return recorded

    def _refused(self, request: web.Request) -> web.Response | None:
        if self.api_key is None:
            return None
        header = request.headers.get("Authorization", "")
        if not header:
            return self.error_response(401, MISSING_KEY)
        if header != f"Bearer {self.api_key}":
            return self.error_response(401)
        return None

    async def _next_reply(self, messages: list[dict[str, Any]]) -> FakeReply:
        if self.replies:
            answer: Any = self.replies.pop(0)
        else:
            answer = self.reply(messages)
            if inspect.isawaitable(answer):
                answer = await answer
        return answer if isinstance(answer, FakeReply) else FakeReply(content=str(answer))

    # -- handlers -------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        await self._record(request)
        refused = self._refused(request)
        if refused is not None:
            return refused
        return web.json_response({"object": "list", "data": [
            {"id": self.model, "object": "model", "created": 1700000000,
             "owned_by": "chatkernel"}]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        recorded = await self._record(request)
        refused = self._refused(request)
        if refused is not None:
            return refused
        body = recorded.json
        if not isinstance(body, dict):
            return self.error_response(400, "We could not parse the JSON body of your request.")
        if "model" not in body:
            return self.error_response(400, "you must provide a model parameter")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return self.error_response(400, "'messages' must be a non-empty array")
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.error_status is not None:
            return self.error_response(self.error_status, self.error_message)
        answer = await self._next_reply(messages)
        if answer.delay:
            await asyncio.sleep(answer.delay)
        if answer.status is not None:
            return self.error_response(answer.status, answer.error)
        model = str(body.get("model") or self.model)
        completion_id = f"chatcmpl-fake{next(self._ids)}"
        created = int(time.time())
        usage = {"prompt_tokens": sum(len(str(m.get("content", "")).split())
                                      for m in messages if isinstance(m, dict)),
                 "completion_tokens": len(answer.content.split())}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        finish = "tool_calls" if answer.tool_calls and not answer.content else "stop"
        stream = bool(body.get("stream")) if self.streaming is None else self.streaming
        if not stream:
            message: dict[str, Any] = {"role": "assistant",
                                       "content": answer.content or (
                                           None if answer.tool_calls else "")}
            if answer.reasoning:
                message["reasoning_content"] = answer.reasoning
            if answer.tool_calls:
                message["tool_calls"] = [
                    {"id": f"call_{i}", "type": "function",
                     "function": {"name": call.get("name", ""),
                                  "arguments": call.get("arguments", "")}}
                    for i, call in enumerate(answer.tool_calls)]
            return web.json_response({
                "id": completion_id, "object": "chat.completion", "created": created,
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage})
        return await self._stream(request, answer, completion_id, created, model, finish,
                                  usage if (body.get("stream_options") or {}).get(
                                      "include_usage") else None)

    async def _stream(self, request: web.Request, answer: FakeReply, completion_id: str,
                      created: int, model: str, finish: str,
                      usage: dict[str, int] | None) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)

        async def send(delta: dict[str, Any] | None, finish_reason: str | None = None,
                       **extra: Any) -> None:
            chunk: dict[str, Any] = {
                "id": completion_id, "object": "chat.completion.chunk", "created": created,
                "model": model,
                "choices": [] if delta is None else [
                    {"index": 0, "delta": delta, "finish_reason": finish_reason}],
                **extra}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)

        await send({"role": "assistant", "content": ""})
        for piece in split_deltas(answer.reasoning):
            await send({"reasoning_content": piece})
        for index, call in enumerate(answer.tool_calls):
            await send({"tool_calls": [{"index": index, "id": f"call_{index}",
                                        "type": "function",
                                        "function": {"name": call.get("name", ""),
                                                     "arguments": ""}}]})
            arguments = str(call.get("arguments", ""))
            for start in range(0, len(arguments), 8):
                await send({"tool_calls": [{"index": index, "function": {
                    "arguments": arguments[start:start + 8]}}]})
        for index, piece in enumerate(split_deltas(answer.content)):
            if not index:
                self.first_token_at.append(time.monotonic())
            await send({"content": piece})
        await send({}, finish)
        if usage is not None:
            await send(None, usage=usage)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response
