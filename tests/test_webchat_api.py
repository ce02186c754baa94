"""The web chat API's parsers under arbitrary input: a 400 (or 413), never a 500.

The parsers are fuzzed directly, then the same kind of input goes over HTTP to a
real gateway process (bounded numbers of examples, no deadline: the machine is shared).
"""

from __future__ import annotations

import http.client
import json
import string
import urllib.parse
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from chatkernel.core.gateway.http_guard import RequestError, parse_json_object
from chatkernel.testing.process import GatewayProcess, gateway_process
from chatkernel.webchat.channel import (
    FIELD_LIMITS,
    MAX_ID_DIGITS,
    PostedMessage,
    parse_message_id,
    parse_post,
    parse_transcript_query,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12)
field_names = st.sampled_from(["chat_id", "user_id", "text", "user_name",
                               "client_message_id", "other"])
bodies = st.dictionaries(field_names, json_values | st.text(min_size=250, max_size=300),
                         max_size=6)
ids = st.text(alphabet=string.digits + "²٣-+ .e", max_size=25) | st.integers().map(str)
FUZZ = settings(max_examples=300, deadline=None)


@pytest.mark.slow
@FUZZ
@given(bodies)
@example({"chat_id": "c", "user_id": "u", "text": "hi"})
def test_parse_post_accepts_what_is_valid_and_names_what_is_not(body):
    try:
        posted = parse_post(body)
    except RequestError as exc:
        assert exc.status == 400
        assert any(f"'{name}'" in str(exc) for name in FIELD_LIMITS)
        return
    assert isinstance(posted, PostedMessage)
    for name, limit in FIELD_LIMITS.items():
        value = getattr(posted, name)
        assert value is None or (isinstance(value, str) and len(value) <= limit)
    assert posted.chat_id.strip() and posted.user_id.strip() and posted.text.strip()


@pytest.mark.slow
@FUZZ
@given(st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode())
       | st.integers(min_value=1, max_value=50_000).map(lambda n: b"[" * n + b"]" * n))
def test_parse_json_object_is_an_object_or_a_400(raw):
    try:
        value = parse_json_object(raw)
    except RequestError as exc:
        assert exc.status == 400
    else:
        assert isinstance(value, dict)


@FUZZ
@given(ids)
@example("²")
@example("9" * 5000)
@example("")
def test_parse_message_id_is_a_bounded_int_or_a_400(text):
    try:
        value = parse_message_id(text, "'after'")
    except RequestError as exc:
        assert exc.status == 400 and "'after' must be a message id" in str(exc)
    else:
        assert 0 <= value < 10 ** MAX_ID_DIGITS and value == int(text) and text.isascii()


@FUZZ
@given(st.dictionaries(st.sampled_from(["chat_id", "after", "x"]),
                       st.text(max_size=20) | ids, max_size=3))
def test_parse_transcript_query_is_a_chat_and_an_id_or_a_400(query):
    try:
        chat_id, after = parse_transcript_query(query)
    except RequestError as exc:
        assert exc.status == 400
    else:
        assert chat_id == query["chat_id"] and after >= 0


# -- over HTTP, against a real gateway -------------------------------------------------


@pytest.fixture(scope="module")
def gateway(tmp_path_factory) -> Iterator[GatewayProcess]:
    with gateway_process(tmp_path_factory.mktemp("webchat-fuzz")) as running:
        yield running


def request(gateway: GatewayProcess, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> int:
    parts = urllib.parse.urlsplit(gateway.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        return conn.getresponse().status  # the status line is enough (events stream on)
    finally:
        conn.close()


HTTP_FUZZ = settings(max_examples=60, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.slow
@HTTP_FUZZ
@given(st.binary(max_size=300) | bodies.map(lambda b: json.dumps(b).encode()))
@example(b"[" * 100_000 + b"]" * 100_000)
def test_posted_messages_are_answered_never_with_a_500(gateway, raw):
    status = request(gateway, "POST", "/webchat/messages", raw,
                     {"Content-Type": "application/json"})
    assert status in (202, 400, 413)


@HTTP_FUZZ
@given(st.text(max_size=30), ids)
@example("c", "²")
@example("c", "9" * 5000)
def test_transcript_reads_are_answered_never_with_a_500(gateway, chat_id, after):
    query = urllib.parse.urlencode({"chat_id": chat_id, "after": after})
    assert request(gateway, "GET", f"/webchat/messages?{query}") in (200, 400)


@HTTP_FUZZ
@given(ids.filter(lambda text: text.isascii()))
@example("²".encode().decode("latin-1"))
@example("9" * 5000)
def test_event_streams_are_answered_never_with_a_500(gateway, last_event_id):
    status = request(gateway, "GET", "/webchat/events?chat_id=c",
                     headers={"Last-Event-ID": last_event_id})
    assert status in (200, 400)
