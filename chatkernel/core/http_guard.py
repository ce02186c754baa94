"""What every request to the gateway's HTTP server goes through, in one middleware.

:func:`install` puts it on the gateway's aiohttp application:

* **Body size.** No body is larger than :data:`MAX_BODY_BYTES`; one that
  declares more with ``Content-Length`` is refused before a byte is read. Routes
  that parse JSON themselves read at most their own, smaller limit
  (:func:`read_json_object`).
* **Errors.** An ``HTTPException`` a handler raises (aiohttp's own 413 for an
  oversized body among them) is answered with a fresh response, and the
  exception is dropped here. Left to aiohttp, it is kept in a local variable
  of the frame that handled it, while its traceback holds that same frame and
  every frame it passed through, the one that read the body with its buffer
  included: a reference cycle as large as the rejected body (tens of MB), freed
  only by a full collection, which a serving gateway runs rarely
  (:mod:`chatkernel.core.gc_tuning`). The traceback is dropped too, which breaks
  the smaller cycle of a 404 (its exception is kept by the route that raised it).
  So a rejected request costs nothing once answered.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

log = logging.getLogger("chatkernel.http")

#: The largest request body the gateway takes on any route (webhooks included).
MAX_BODY_BYTES = 8 * 1024 * 1024

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RequestError(Exception):
    """A request the gateway refuses; ``status`` is its HTTP status, the message says why
    (and is sent to the client as ``{"error": ...}``)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def error_response(status: int, message: str, **headers: str) -> web.Response:
    """``{"error": message}`` with ``status``: how every refusal of the gateway reads."""
    return web.json_response({"error": message}, status=status, headers=headers or None)


def install(app: web.Application) -> None:
    """Put the gateway's request checks on ``app`` (built with
    ``client_max_size=MAX_BODY_BYTES``)."""
    app.middlewares.append(_guard)


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    length = request.content_length
    if length is not None and length > MAX_BODY_BYTES:
        return too_large(MAX_BODY_BYTES)
    try:
        return await handler(request)
    except RequestError as exc:
        return error_response(exc.status, str(exc))
    except web.HTTPException as exc:
        return _answer(exc)


def _answer(exc: web.HTTPException) -> web.Response:
    """A response like the exception (status, reason, headers, body), so that the
    exception and its traceback go now (see the module's docstring)."""
    # Also for an exception that lives on: aiohttp's 404 and 405 are made once per
    # request and kept by the route they were raised from, which the traceback holds.
    exc.__traceback__ = exc.__context__ = exc.__cause__ = None
    headers = {name: value for name, value in exc.headers.items()
               if name.lower() != "content-length"}
    body = exc.body if isinstance(exc.body, (bytes, bytearray)) else None
    return web.Response(status=exc.status, reason=exc.reason, headers=headers, body=body)


def too_large(limit: int) -> web.Response:
    return error_response(413, f"the request body is larger than {_size(limit)}")


def _size(limit: int) -> str:
    if limit >= 1024 * 1024 and limit % (1024 * 1024) == 0:
        return f"{limit // (1024 * 1024)} MB"
    if limit >= 1024 and limit % 1024 == 0:
        return f"{limit // 1024} KB"
    return f"{limit} bytes"


# -- JSON bodies ------------------------------------------------------------------------


async def read_json_object(request: web.Request, *, limit: int) -> dict[str, Any]:
    """The request's body as a JSON object, read up to ``limit`` bytes.

    Raises :class:`RequestError`: 413 when the body is larger than ``limit``
    (declared or sent), 400 when it is not a JSON object.
    """
    length = request.content_length
    if length is not None and length > limit:
        raise RequestError(413, f"the request body is larger than {_size(limit)}")
    body = bytearray()
    async for chunk in request.content.iter_any():
        body += chunk
        if len(body) > limit:
            raise RequestError(413, f"the request body is larger than {_size(limit)}")
    return parse_json_object(bytes(body))


def parse_json_object(raw: bytes | str) -> dict[str, Any]:
    """A JSON object from a request body; :class:`RequestError` (400) for anything else.

    Stricter than ``json.loads``: no ``NaN`` or ``Infinity`` (not JSON, and a
    number nobody means), no number too large for a float; nesting too deep for
    the parser is a bad request, not a crash.
    """
    try:
        value = json.loads(raw, parse_constant=_not_json, parse_float=_finite)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise RequestError(400, "the body must be a JSON object") from None
    if not isinstance(value, dict):
        raise RequestError(400, "the body must be a JSON object")
    return value


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large a number")
    return value
