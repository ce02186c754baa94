"""The store codec's JSON contract (chatkernel.sdk.codec)."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import uuid
from pathlib import Path

import pytest

from chatkernel.sdk.models import InboundMessage
from chatkernel.sdk.codec import (
    decode_json,
    decode_message,
    encode_json,
    encode_json_bytes,
    encode_message,
)


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int


def test_json_values_round_trip_compactly_as_utf8():
    value = {"text": "héllo ✓ 👋", "n": 1, "f": 0.1, "big": 2**64 - 1, "neg": -(2**63),
             "none": None, "list": [True, False, [], {}], "tuple": (1, 2)}
    text = encode_json(value)
    assert "héllo ✓ 👋" in text  # UTF-8, not \\u escapes
    assert " " not in text.replace("héllo ✓ 👋", "")  # compact
    assert decode_json(text) == {**value, "tuple": [1, 2]}
    assert encode_json_bytes(value) == text.encode()
    assert decode_json(text.encode()) == decode_json(text)


def test_lone_surrogates_round_trip_through_the_ascii_fallback():
    value = {"emoji": "broken \ud83d half", "key \udc00": ["\udfff"]}
    text = encode_json(value)
    assert text.isascii() and "\\ud83d" in text
    assert decode_json(text) == value


def test_non_finite_floats_are_written_as_null():
    assert decode_json(encode_json({"a": float("nan"), "b": [float("inf"), -float("inf")]})) \
        == {"a": None, "b": [None, None]}
    # also where the fallback encoder writes the value
    assert decode_json(encode_json({"a": float("nan"), "s": "\ud83d"})) == {"a": None,
                                                                          "s": "\ud83d"}


def test_integers_beyond_64_bits_are_refused_naming_the_value():
    for value in ({"n": 2**64}, {"n": -(2**63) - 1}, {"n": 2**70, "s": "\ud83d"}):
        with pytest.raises(TypeError, match=r"route_extra must hold JSON values only: "
                                            r"integer -?\d+ is beyond 64 bits"):
            encode_json(value, what="route_extra")


@pytest.mark.parametrize("value", [b"bytes", {1, 2}, Point(1), datetime.date(2026, 1, 1),
                                   Path("/tmp/x"), object()])
def test_values_that_are_not_json_are_refused(value):
    with pytest.raises(TypeError, match=rf"log meta must hold JSON values only: Object of "
                                        rf"type {type(value).__name__} is not JSON"):
        encode_json({"meta": [value]}, what="log meta")


def test_uuids_enums_and_non_str_keys_are_written_as_their_json_form():
    ident = uuid.UUID(int=7)
    assert decode_json(encode_json({"id": ident, "colour": Colour.RED, 3: "three"})) == \
        {"id": str(ident), "colour": "red", "3": "three"}


def test_rows_written_by_the_ascii_encoder_still_read():
    # what earlier versions wrote: ASCII escapes, and NaN / Infinity tokens
    old = json.dumps({"t": "h\u00e9 \ud83d\ude00 \udc00", "x": float("nan"),
                      "y": float("inf")})
    value = decode_json(old)
    assert value["t"] == "hé 😀 \udc00" and value["y"] == float("inf")
    assert value["x"] != value["x"]  # NaN


def test_invalid_json_raises_a_json_decode_error():
    for text in ("", "{", b"\xff\xfe", "nope"):
        with pytest.raises((json.JSONDecodeError, UnicodeDecodeError)):
            decode_json(text)


def test_a_message_with_non_ascii_text_is_stored_as_written():
    message = InboundMessage(channel="telegram", account="main", chat_id="c", message_id="1",
                             sender_id="u", text="Grüße 🌍", route_extra={"k": [1, "ü"]})
    text = encode_message(message)
    assert "Grüße 🌍" in text
    assert decode_message(text) == message
