"""Slack's request signature: the channel's verifier against the formula Slack publishes
("Verifying requests from Slack"), computed here independently, and against the signer
of the fake."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatkernel.channels import WebhookRejected
from chatkernel_slack.fake import SlackSigner
from chatkernel_slack.signature import SlackSignature


def slack_headers(secret: str, body: bytes, ts: int) -> dict[str, str]:
    digest = hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": str(ts), "X-Slack-Signature": f"v0={digest}"}


def refused(verifier, headers, body=b"{}") -> int:
    with pytest.raises(WebhookRejected) as info:
        verifier.verify(headers, body)
    return info.value.status


def test_slack_signature_and_its_five_minute_window():
    now = 1_700_000_000
    verifier = SlackSignature("slack-secret", clock=lambda: now)
    body = b'{"type":"event_callback","text":"caf\xc3\xa9 @here"}'
    verifier.verify(slack_headers("slack-secret", body, now), body)
    verifier.verify(slack_headers("slack-secret", body, now - 300), body)
    assert refused(verifier, slack_headers("slack-secret", body, now - 301), body) == 401
    assert refused(verifier, slack_headers("slack-secret", body, now + 301), body) == 401
    assert refused(verifier, slack_headers("other", body, now), body) == 401
    assert refused(verifier, slack_headers("slack-secret", body + b" ", now), body) == 401
    assert refused(verifier, {"X-Slack-Signature": "v0=00"}, body) == 401
    assert refused(verifier, {"X-Slack-Request-Timestamp": "soon",
                              "X-Slack-Signature": "v0=00"}, body) == 401


def test_the_example_of_slacks_docs_and_the_fakes_signer():
    # The worked example of Slack's "Verifying requests from Slack".
    secret, ts = "8f742231b10e8888abcd99yyyzzz85a5", 1531420618
    body = (b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&"
            b"channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&"
            b"command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2F"
            b"commands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&"
            b"trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c")
    expected = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
    assert SlackSignature(secret).signature(body, str(ts)) == expected
    headers = SlackSigner(secret, clock=lambda: ts)(body)
    assert headers == {"X-Slack-Request-Timestamp": str(ts), "X-Slack-Signature": expected}
    SlackSignature(secret, clock=lambda: ts).verify(headers, body)


@settings(max_examples=100, deadline=None)
@given(secret=st.text(min_size=1, max_size=40), body=st.binary(max_size=300),
       flip=st.integers(min_value=0))
def test_signatures_verify_their_own_body_and_no_other(secret, body, flip):
    slack = SlackSignature(secret, clock=lambda: 1000)
    headers = {"X-Slack-Request-Timestamp": "1000",
               "X-Slack-Signature": slack.signature(body, "1000")}
    slack.verify(headers, body)
    assert headers == slack_headers(secret, body, 1000)
    if body:
        index = flip % len(body)
        other = body[:index] + bytes([body[index] ^ 1]) + body[index + 1:]
        with pytest.raises(WebhookRejected):
            slack.verify(headers, other)


def test_the_kernels_old_names_still_import_with_a_deprecation_warning():
    import chatkernel.channels

    with pytest.warns(DeprecationWarning, match="chatkernel_slack.signature.SlackSignature"):
        assert chatkernel.channels.SlackSignature is SlackSignature
