"""Meta's webhook signature and subscription handshake: the channel's verifier against
the formula Meta publishes (computed here independently) and the fake's signer."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatkernel.channels import WebhookRejected
from chatkernel_whatsapp.fake import MetaSigner
from chatkernel_whatsapp.signature import MetaSignature

APP_SECRET = "meta-app-secret"
VERIFY_TOKEN = "verify-me"


def meta_headers(secret: str, body: bytes) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Hub-Signature-256": f"sha256={digest}"}


def refused(verifier, headers, body=b"{}") -> int:
    with pytest.raises(WebhookRejected) as info:
        verifier.verify(headers, body)
    return info.value.status


def test_meta_signature_is_over_the_raw_bytes_and_the_handshake_needs_none():
    verifier = MetaSignature(APP_SECRET, VERIFY_TOKEN)
    # Unicode and "@" exactly as Meta sent them: never re-serialised.
    body = '{"text":"ünïcödé @mention \\u00e9"}'.encode()
    verifier.verify(meta_headers(APP_SECRET, body), body)
    assert refused(verifier, {}, body) == 401
    assert refused(verifier, meta_headers("wrong", body), body) == 403
    reserialised = json.dumps(json.loads(body)).encode()
    assert reserialised != body
    assert refused(verifier, meta_headers(APP_SECRET, body), reserialised) == 403
    assert verifier.handshake({"hub.mode": "subscribe", "hub.verify_token": VERIFY_TOKEN,
                               "hub.challenge": "1158201444"}) == "1158201444"
    for query in ({"hub.mode": "unsubscribe", "hub.verify_token": VERIFY_TOKEN,
                   "hub.challenge": "x"},
                  {"hub.mode": "subscribe", "hub.verify_token": "nope", "hub.challenge": "x"},
                  {}):
        with pytest.raises(WebhookRejected) as info:
            verifier.handshake(query)
        assert info.value.status == 403
    with pytest.raises(ValueError):
        MetaSignature(APP_SECRET, "")


def test_the_fakes_signer_makes_what_the_channel_verifies():
    body = b'{"object":"whatsapp_business_account"}'
    assert MetaSigner(APP_SECRET)(body) == meta_headers(APP_SECRET, body)
    MetaSignature(APP_SECRET, VERIFY_TOKEN).verify(MetaSigner(APP_SECRET)(body), body)


@settings(max_examples=100, deadline=None)
@given(secret=st.text(min_size=1, max_size=40), body=st.binary(max_size=300),
       flip=st.integers(min_value=0))
def test_signatures_verify_their_own_body_and_no_other(secret, body, flip):
    meta = MetaSignature(secret, "token")
    meta.verify({"X-Hub-Signature-256": meta.signature(body)}, body)
    assert meta.signature(body) == meta_headers(secret, body)["X-Hub-Signature-256"]
    if body:
        index = flip % len(body)
        other = body[:index] + bytes([body[index] ^ 1]) + body[index + 1:]
        with pytest.raises(WebhookRejected):
            meta.verify({"X-Hub-Signature-256": meta.signature(body)}, other)


def test_the_kernels_old_names_still_import_with_a_deprecation_warning():
    import chatkernel.channels

    with pytest.warns(DeprecationWarning, match="chatkernel_whatsapp.signature.MetaSignature"):
        assert chatkernel.channels.MetaSignature is MetaSignature
