"""The HEARTBEAT_OK reply contract (docs/heartbeats.md): examples and properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatkernel.core.heartbeat.ack import (
    HEARTBEAT_TOKEN,
    judge_heartbeat_reply,
    strip_stray_token,
    strip_token,
)


@pytest.mark.parametrize("reply", [
    "HEARTBEAT_OK",
    "  HEARTBEAT_OK \n",
    "**HEARTBEAT_OK**",
    "`HEARTBEAT_OK`",
    "HEARTBEAT_OK.",
    "HEARTBEAT_OK HEARTBEAT_OK",
])
def test_token_alone_is_an_ack_with_nothing_left(reply):
    assert judge_heartbeat_reply(reply, 300) == ("ack", "")


def test_token_at_the_start_is_stripped_with_its_separator():
    judged = judge_heartbeat_reply("HEARTBEAT_OK — all quiet", 300)
    assert (judged.kind, judged.text) == ("ack", "all quiet")


def test_token_at_the_end_is_stripped():
    judged = judge_heartbeat_reply("Nothing new since this morning. HEARTBEAT_OK", 300)
    assert (judged.kind, judged.text) == ("ack", "Nothing new since this morning.")


def test_token_in_the_middle_means_nothing():
    reply = "The disk is full HEARTBEAT_OK and the backup failed"
    judged = judge_heartbeat_reply(reply, 300)
    assert (judged.kind, judged.text) == ("alert", reply)
    assert strip_stray_token(reply) == reply


def test_remainder_of_exactly_ack_max_chars_is_dropped_one_more_is_sent():
    body = "x" * 10
    assert judge_heartbeat_reply(f"HEARTBEAT_OK {body}", 10).kind == "ack"
    assert judge_heartbeat_reply(f"{body} HEARTBEAT_OK", 10).kind == "ack"
    longer = judge_heartbeat_reply(f"HEARTBEAT_OK {body}y", 10)
    assert (longer.kind, longer.text) == ("alert", body + "y")


def test_ack_max_chars_zero_drops_only_the_bare_token():
    assert judge_heartbeat_reply("HEARTBEAT_OK", 0).kind == "ack"
    assert judge_heartbeat_reply("HEARTBEAT_OK ok", 0) == ("alert", "ok")


def test_a_reply_without_the_token_is_an_alert_whatever_its_length():
    assert judge_heartbeat_reply("Disk full", 300) == ("alert", "Disk full")


def test_an_empty_reply_is_empty():
    assert judge_heartbeat_reply("  \n", 300).kind == "empty"


@pytest.mark.parametrize("reply", ["HEARTBEAT_OKAY, all good", "MY_HEARTBEAT_OK",
                                   "HEARTBEAT_OK_2 is a name"])
def test_a_longer_word_is_not_the_token(reply):
    assert strip_token(reply) == (reply, False)


def test_outside_heartbeats_a_stray_token_is_stripped_and_token_only_replies_dropped():
    assert strip_stray_token("Here you go.\n\nHEARTBEAT_OK") == "Here you go."
    assert strip_stray_token("HEARTBEAT_OK: the build is green") == "the build is green"
    assert strip_stray_token("HEARTBEAT_OK") is None
    assert strip_stray_token(" **HEARTBEAT_OK** ") is None
    assert strip_stray_token("plain reply") == "plain reply"


# -- properties -------------------------------------------------------------------------------

_SEPARATORS = " \t\n\r:;,.!-–—*_`"
# Text that neither holds the token nor starts or ends with what the stripping eats.
body_text = st.text(min_size=1, max_size=80).map(str.strip).filter(
    lambda s: bool(s) and HEARTBEAT_TOKEN not in s and s[0] not in _SEPARATORS
    and s[-1] not in _SEPARATORS and "HEARTBEAT_OK" not in s.replace(" ", ""))


@given(st.text(max_size=200).filter(lambda s: HEARTBEAT_TOKEN not in s))
def test_property_text_without_the_token_is_never_changed_outside_heartbeats(text):
    assert strip_stray_token(text) == text


@given(st.text(max_size=200).filter(lambda s: HEARTBEAT_TOKEN not in s and s.strip()),
       st.integers(min_value=0, max_value=500))
def test_property_without_the_token_a_heartbeat_reply_is_always_an_alert(text, limit):
    assert judge_heartbeat_reply(text, limit) == ("alert", text.strip())


@given(body_text, st.integers(min_value=0, max_value=100), st.booleans())
def test_property_a_token_at_either_end_leaves_the_body(body, limit, at_start):
    reply = f"{HEARTBEAT_TOKEN} {body}" if at_start else f"{body} {HEARTBEAT_TOKEN}"
    judged = judge_heartbeat_reply(reply, limit)
    assert judged.text == body
    assert judged.kind == ("ack" if len(body) <= limit else "alert")
    assert strip_stray_token(reply) == body


@given(body_text, body_text)
def test_property_a_token_between_words_is_kept(left, right):
    reply = f"{left} {HEARTBEAT_TOKEN} {right}"
    assert strip_token(reply) == (reply, False)
