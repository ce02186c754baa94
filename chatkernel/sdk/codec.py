"""JSON encoding of the kernel's value types, for every store backend.

Explicit field-by-field conversion, not ``dataclasses.asdict``: the stored
form is a format, and it must keep reading after the dataclasses change.
Decoding therefore ignores unknown keys and fills missing optional fields
with their defaults, so rows written by an older or newer kernel still load.

JSON is written by orjson (a C encoder; the standard library's is several
times slower, and every message is encoded at least three times on its way
through). Values a caller puts in ``route_extra``, ``Route.extra``, session
settings, log meta and account state must be JSON values: ``dict`` with
``str`` keys, ``list``, ``str``, ``int``, ``float``, ``bool``, ``None``.
Tuples come back as lists. UUIDs and enums are written as their JSON form (a
string, the enum's value); anything else (bytes, sets, dataclasses, dates)
raises :class:`TypeError` when stored. JSON has no NaN or infinity: they are
written as ``null``; an integer beyond 64 bits raises. Text is written as
UTF-8; a value orjson refuses (a lone surrogate, which a platform's
``\\ud83d`` escape may produce, a non-``str`` dict key, deep nesting) takes
the standard library's ASCII encoder instead, so every ``str`` a Python
program can hold round-trips. Decoding reads both forms, and the ``NaN``
that rows written by older versions may hold.
"""

from __future__ import annotations

import enum
import json
import math
import os
import uuid
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any

import orjson

from chatkernel.sdk.models import InboundMessage, MediaRef, OutboundPayload, Route

__all__ = [
    "decode_json",
    "decode_message",
    "decode_payload",
    "decode_route",
    "encode_json",
    "encode_json_bytes",
    "encode_message",
    "encode_payload",
    "encode_route",
    "media_from_dict",
    "media_to_dict",
    "message_from_dict",
    "message_to_dict",
    "payload_from_dict",
    "payload_to_dict",
    "route_from_dict",
    "route_to_dict",
]

_decoder = json.JSONDecoder()


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# Dataclasses and datetimes are refused like any other non-JSON type (orjson would
# write them), and str/int/dict/list subclasses are written as their base types.
_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME

if c_make_encoder is not None:
    # The fallback's C encoder, made once: JSONEncoder.encode builds one (and a
    # closure) per call. No circular check: a cycle raises RecursionError.
    _iterencode = c_make_encoder(None, _not_json, encode_basestring_ascii, None, ":", ",",
                                 False, False, True)

    def _encode_ascii(value: Any) -> str:
        return "".join(_iterencode(value, 0))
else:  # pragma: no cover - interpreters without the C accelerator
    _encode_ascii = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"),
                                     default=_not_json).encode


_INT_RANGE = range(-(2**63), 2**64)


def _as_orjson_would(value: Any) -> Any:
    """``value`` as orjson writes it (NaN and infinities as None, UUIDs as strings,
    enums as their values); an integer orjson cannot write raises (it would not read
    it back as an int either)."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return _as_orjson_would(value.value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, int) and value not in _INT_RANGE:
        raise TypeError(f"integer {value} is beyond 64 bits")
    if isinstance(value, dict):
        return {key: _as_orjson_would(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_orjson_would(item) for item in value]
    return value


def encode_json(value: Any, *, what: str = "value") -> str:
    """Compact JSON text; a value that is not JSON raises TypeError naming ``what``."""
    # encode_json_bytes inlined: this runs several times a message (journal, outbox,
    # session log).
    try:
        return orjson.dumps(value, default=_not_json, option=_OPTIONS).decode()
    except orjson.JSONEncodeError as exc:
        return _fallback(value, exc, what).decode()


def encode_json_bytes(value: Any, *, what: str = "value") -> bytes:
    """:func:`encode_json` as UTF-8 bytes (a request body)."""
    try:
        return orjson.dumps(value, default=_not_json, option=_OPTIONS)
    except orjson.JSONEncodeError as exc:
        return _fallback(value, exc, what)


def _fallback(value: Any, error: orjson.JSONEncodeError, what: str) -> bytes:
    """What the encoders write where orjson refused ``value``: a TypeError naming
    ``what`` for a value that is not JSON; otherwise (a lone surrogate, a non-str key,
    deep nesting) what the stdlib's encoder writes, with the values orjson would have
    written."""
    if isinstance(error.__cause__, TypeError):  # from _not_json: not a JSON value
        raise TypeError(f"{what} must hold JSON values only: {error.__cause__}") from None
    try:
        return _encode_ascii(_as_orjson_would(value)).encode("ascii")
    except (TypeError, ValueError, RecursionError) as exc:
        raise TypeError(f"{what} must hold JSON values only: {exc}") from None


def decode_json(text: str | bytes | None) -> Any:
    """The value of JSON text; ``None`` (SQL NULL) decodes to ``None``."""
    if text is None:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        # What orjson refuses but the stdlib reads: an escaped lone surrogate, NaN.
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return _decoder.decode(text)


# -- media ---------------------------------------------------------------------------------


def media_to_dict(media: MediaRef) -> dict[str, Any]:
    return {
        "kind": media.kind,
        "path": None if media.path is None else os.fspath(media.path),
        "mime": media.mime,
        "filename": media.filename,
        "size": media.size,
        "platform_id": media.platform_id,
        "note": media.note,
    }


def media_from_dict(data: dict[str, Any]) -> MediaRef:
    path = data.get("path")
    return MediaRef(
        kind=data["kind"],
        path=None if path is None else Path(path),
        mime=data.get("mime"),
        filename=data.get("filename"),
        size=data.get("size"),
        platform_id=data.get("platform_id"),
        note=data.get("note"),
    )


# -- inbound messages ------------------------------------------------------------------------


def message_to_dict(message: InboundMessage) -> dict[str, Any]:
    """The message as a dict of JSON values (media paths as strings)."""
    data: dict[str, Any] = {
        "channel": message.channel,
        "account": message.account,
        "chat_id": message.chat_id,
        "message_id": message.message_id,
        "sender_id": message.sender_id,
        "text": message.text,
        "sender_name": message.sender_name,
        "thread_id": message.thread_id,
        "is_group": message.is_group,
        "mentions_bot": message.mentions_bot,
        "reply_to_bot": message.reply_to_bot,
        "media": [media_to_dict(media) for media in message.media],
        "timestamp": message.timestamp,
        "route_extra": message.route_extra,
    }
    if message.sender_aliases:  # most messages have none: no key, as before
        data["sender_aliases"] = list(message.sender_aliases)
    return data


def message_from_dict(data: dict[str, Any]) -> InboundMessage:
    """The inverse of :func:`message_to_dict`; tolerant of unknown and missing optional keys."""
    message = InboundMessage(
        channel=data["channel"],
        account=data["account"],
        chat_id=data["chat_id"],
        message_id=data["message_id"],
        sender_id=data["sender_id"],
        text=data.get("text", ""),
        sender_name=data.get("sender_name", ""),
        thread_id=data.get("thread_id"),
        is_group=data.get("is_group", False),
        mentions_bot=data.get("mentions_bot", False),
        reply_to_bot=data.get("reply_to_bot", False),
        media=[media_from_dict(item) for item in data.get("media") or ()],
        route_extra=data.get("route_extra") or {},
        sender_aliases=tuple(data.get("sender_aliases") or ()),
    )
    if "timestamp" in data:  # else keep the dataclass default (now)
        message.timestamp = data["timestamp"]
    return message


def encode_message(message: InboundMessage) -> str:
    return encode_json(message_to_dict(message), what="an InboundMessage (fields and route_extra)")


def decode_message(text: str | bytes) -> InboundMessage:
    return message_from_dict(decode_json(text))


# -- routes -----------------------------------------------------------------------------------


def route_to_dict(route: Route) -> dict[str, Any]:
    return {
        "channel": route.channel,
        "account": route.account,
        "chat_id": route.chat_id,
        "thread_id": route.thread_id,
        "reply_to": route.reply_to,
        "is_group": route.is_group,
        "extra": route.extra,
    }


def route_from_dict(data: dict[str, Any]) -> Route:
    return Route(
        channel=data["channel"],
        account=data["account"],
        chat_id=data["chat_id"],
        thread_id=data.get("thread_id"),
        reply_to=data.get("reply_to"),
        is_group=data.get("is_group", False),
        extra=data.get("extra") or {},
    )


_ROUTE_CACHE_SIZE = 4096
_route_cache: dict[tuple[Any, ...], str] = {}


def encode_route(route: Route) -> str:
    if route.extra:  # arbitrary values: encode every time
        return encode_json(route_to_dict(route), what="Route.extra")
    # Every reply stores its route, and a chat's route rarely changes: the text of
    # a route without extras is remembered by its (immutable) field values.
    key = (route.channel, route.account, route.chat_id, route.thread_id, route.reply_to,
           route.is_group)
    text = _route_cache.get(key)
    if text is None:
        if len(_route_cache) >= _ROUTE_CACHE_SIZE:
            _route_cache.clear()
        text = _route_cache[key] = encode_json(route_to_dict(route), what="Route.extra")
    return text


def decode_route(text: str | bytes) -> Route:
    return route_from_dict(decode_json(text))


# -- outbound payloads ------------------------------------------------------------------------


def payload_to_dict(payload: OutboundPayload) -> dict[str, Any]:
    return {
        "text": payload.text,
        "media_path": None if payload.media_path is None else os.fspath(payload.media_path),
        "media_kind": payload.media_kind,
        "caption": payload.caption,
        "chunk_index": payload.chunk_index,
        "chunk_count": payload.chunk_count,
        "format": payload.format,
        **({"replaces": payload.replaces} if payload.replaces is not None else {}),
    }


def payload_from_dict(data: dict[str, Any]) -> OutboundPayload:
    path = data.get("media_path")
    return OutboundPayload(
        text=data.get("text", ""),
        media_path=None if path is None else Path(path),
        media_kind=data.get("media_kind"),
        caption=data.get("caption", ""),
        chunk_index=data.get("chunk_index", 1),
        chunk_count=data.get("chunk_count", 1),
        format=data.get("format", "markdown"),
        replaces=data.get("replaces"),
    )


def encode_payload(payload: OutboundPayload) -> str:
    return encode_json(payload_to_dict(payload), what="OutboundPayload")


def decode_payload(text: str | bytes) -> OutboundPayload:
    return payload_from_dict(decode_json(text))
