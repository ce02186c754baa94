"""What every request to the gateway's HTTP server goes through, in one middleware.

:func:`install` puts it on the gateway's aiohttp application:

* **Host.** A browser sends the name it looked up. A web page whose own name
  is made to resolve to 127.0.0.1 (DNS rebinding) would otherwise be the
  gateway's "same origin" and read transcripts, ``/status`` and ``/metrics``.
  So a request must name the gateway: an IP address, ``localhost`` (and
  ``*.localhost``, which browsers resolve to loopback themselves), the listen
  host, or one of ``gateway.public_hosts``.
* **Origin.** A state-changing request (anything but GET, HEAD, OPTIONS) that
  a browser sends from another site carries that site's ``Origin``: refused,
  so no page the user visits can talk to their agent. Clients that are not
  browsers send none.
* **Content type.** A state-changing request with a body must say
  ``application/json``. A page can send ``text/plain`` or a form to any site
  without asking; JSON it cannot send across sites without a CORS preflight,
  which the gateway never grants.
* **Webhooks.** A channel's routes under ``/<channel>/<account>/webhook`` are
  called by the platform, with its own ``Host`` and content type, and the
  channel verifies them by their signature: they are exempt from the Host and
  content-type checks (the Origin check costs them nothing: platforms send none).
* **Headers.** Every response says ``X-Frame-Options: DENY``,
  ``Content-Security-Policy: frame-ancestors 'none'`` (no page may frame the
  chat or the status page, so none can trick a click) and
  ``X-Content-Type-Options: nosniff``.
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
  (:mod:`chatkernel.core.gateway.gc_tuning`). The traceback is dropped too, which breaks
  the smaller cycle of a 404 (its exception is kept by the route that raised it).
  So a rejected request costs nothing once answered.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import logging
import math
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from chatkernel.core.store.base import StoreError

log = logging.getLogger("chatkernel.gateway")

#: The largest request body the gateway takes on any route (webhooks included).
MAX_BODY_BYTES = 8 * 1024 * 1024
#: Methods that only read: no Origin or content-type check.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: On every response (see the module's docstring).
SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RequestError(Exception):
    """A request the gateway refuses; ``status`` is its HTTP status, the message says why
    (and is sent to the client as ``{"error": ...}``)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def error_response(status: int, message: str) -> web.Response:
    """``{"error": message}`` with ``status``: how every refusal of the gateway reads."""
    return web.json_response({"error": message}, status=status)


def install(app: web.Application, *, hosts: HostCheck | None = None,
            webhooks: Iterable[str] = ()) -> None:
    """Put the gateway's request checks on ``app`` (built with
    ``client_max_size=MAX_BODY_BYTES``). ``webhooks``: the paths exempt from the Host
    and content-type checks (see :func:`is_webhook_path`)."""
    app.middlewares.append(_guard(hosts or HostCheck(), frozenset(webhooks)))
    app.on_response_prepare.append(_add_security_headers)


def is_webhook_path(path: str, channel: str, account: str) -> bool:
    """Whether ``path`` is under ``/<channel>/<account>/webhook``: a platform's door."""
    base = f"/{channel}/{account}/webhook"
    return path == base or path.startswith(base + "/")


def _guard(hosts: HostCheck, webhooks: frozenset[str]) -> Callable[..., Any]:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        length = request.content_length
        if length is not None and length > MAX_BODY_BYTES:
            return error_response(413, _too_large(MAX_BODY_BYTES))
        resource = request.match_info.route.resource
        webhook = resource is not None and resource.canonical in webhooks
        host = request.headers.get("Host")
        if not webhook and not hosts.allows(host):
            return error_response(
                403, f"this gateway does not answer for the host {_shown(host)}: name it by "
                     "its address, or list the name in gateway.public_hosts")
        if request.method not in SAFE_METHODS:
            origin = request.headers.get("Origin")
            if origin is not None and not hosts.same_site(origin, host):
                return error_response(
                    403, f"a request from another site ({_shown(origin)}) is refused; the "
                         "gateway's own page may send it, or a client without an Origin")
            if not webhook and request.body_exists and not _is_json(request.content_type):
                return error_response(
                    415, f"send the body as JSON (Content-Type: application/json), not "
                         f"{_shown(request.content_type)}")
        try:
            return await handler(request)
        except RequestError as exc:
            return error_response(exc.status, str(exc))
        except web.HTTPException as exc:
            return _answer(exc)
        except StoreError as exc:
            # Nothing was recorded, so nothing is acknowledged: a platform sends a
            # webhook again on a 5xx, the web chat page keeps its text to retry.
            log.warning("%s %s: not recorded, answered 503: %s", request.method,
                        request.path, exc)
            response = error_response(503, "the gateway cannot record this now (its state "
                                           "store is unreachable): send it again")
            response.headers["Retry-After"] = "5"
            return response

    return guard


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


async def _add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)


# -- Host and Origin ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class HostCheck:
    """Which ``Host`` names are this gateway's (see the module's docstring)."""

    listen_host: str = "127.0.0.1"
    public_hosts: frozenset[str] = frozenset()

    def allows(self, header: str | None) -> bool:
        """Whether a request's ``Host`` header names this gateway (none at all: not a
        browser, which always sends one)."""
        return header is None or _host_allowed(self, header)

    def same_site(self, origin: str, host: str | None) -> bool:
        """Whether a request's ``Origin`` is the gateway's own page: the origin the
        request was sent to (``Host``), or one of ``gateway.public_hosts`` (a reverse
        proxy may rewrite ``Host``)."""
        parts = urllib.parse.urlsplit(origin.strip().lower())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False  # "null" (a sandboxed frame, a file), or not an origin at all
        if host is not None and _without_default_port(parts.netloc, parts.scheme) == \
                _without_default_port(host.strip().lower(), parts.scheme):
            return True
        return parts.hostname.rstrip(".") in self.public_hosts


# A page's requests all carry the same few Host headers: each is parsed once, not once a
# request (bounded, so a client making up names only churns it).
@functools.lru_cache(maxsize=256)
def _host_allowed(hosts: HostCheck, header: str) -> bool:
    name = host_name(header)
    if not name:
        return False
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name)
        return True  # no page can rebind an address: only a name
    except ValueError:
        pass
    return name == hosts.listen_host or name in hosts.public_hosts


def host_name(header: str) -> str | None:
    """The name in a ``Host`` header, lower case, without port or brackets (None: not
    a Host header)."""
    value = header.strip().lower()
    if value.startswith("["):
        name, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not _is_port(rest)):
            return None
        return name
    name, colon, port = value.rpartition(":")
    if not colon:
        name = value
    elif ":" in name or not _is_port(colon + port):
        return None
    return name.rstrip(".") or None


def _is_port(text: str) -> bool:
    port = text[1:]
    return text.startswith(":") and 0 < len(port) <= 5 and port.isascii() and port.isdigit()


def _without_default_port(netloc: str, scheme: str) -> str:
    default = ":443" if scheme == "https" else ":80"
    return netloc.removesuffix(default)


def _is_json(content_type: str) -> bool:
    return content_type == "application/json" or (
        content_type.startswith("application/") and content_type.endswith("+json"))


def _shown(value: str | None, limit: int = 80) -> str:
    """A header's value for an error message: quoted, cut short."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _too_large(limit: int) -> str:
    return f"the request body is larger than {_size(limit)}"


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
    if length is not None:
        if length > limit:
            raise RequestError(413, _too_large(limit))
        # Declared and within the limit: aiohttp reads no more than that, in one call.
        return parse_json_object(await request.read())
    body = bytearray()  # chunked: counted as it comes
    async for chunk in request.content.iter_any():
        body += chunk
        if len(body) > limit:
            raise RequestError(413, _too_large(limit))
    return parse_json_object(bytes(body))


def parse_json_object(raw: bytes | str) -> dict[str, Any]:
    """A JSON object from a request body; :class:`RequestError` (400) for anything else.

    Stricter than ``json.loads``: no ``NaN`` or ``Infinity`` (not JSON, and a
    number nobody means), no number too large for a float; nesting too deep for
    the parser is a bad request, not a crash.
    """
    try:
        if isinstance(raw, bytes):  # as json.loads reads bytes
            raw = raw.decode(json.detect_encoding(raw), "surrogatepass")
        if raw.startswith("\ufeff"):
            raise ValueError("a byte order mark")  # json.loads refuses it too
        value = _STRICT_JSON.decode(raw)
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


#: Built once: json.loads with these hooks builds a decoder a call.
_STRICT_JSON = json.JSONDecoder(parse_constant=_not_json, parse_float=_finite)
