"""Whose failure a failed send is: one recipient's (that send's only) or the account's
(its health turns red), decided in one place from the channel's recipient codes."""

from __future__ import annotations

from chatkernel.channels import Capabilities, Channel
from chatkernel.core.outbound.deliveries import is_account_failure
from chatkernel.sdk.models import SendError


class Graphish(Channel):
    name = "graphish"
    capabilities = Capabilities(recipient_error_codes=frozenset({131026, "channel_not_found"}))


def test_a_recipients_refusal_is_not_the_accounts():
    for error in (SendError("Bad Request: chat not found", status=400),
                  SendError("Forbidden: bot was blocked by the user", status=403),
                  SendError("chat.postMessage: channel_not_found", status=200,
                            code="channel_not_found"),
                  SendError("Message undeliverable (code 131026)", code=131026),
                  SendError("Message undeliverable", code="131026")):  # digits as text
        assert not is_account_failure(error, Graphish), error


def test_the_accounts_own_failures_count_whatever_the_codes_say():
    for error in (SendError("no answer within 30s", retryable=True, delivery_unknown=True),
                  SendError("cannot connect", retryable=True),
                  SendError("Bad Gateway", retryable=True, status=502),
                  SendError("Unauthorized", status=401, code=131026),
                  SendError("Too Many Requests", retryable=True, status=429),
                  SendError("chat.postMessage: invalid_auth", status=200, code="invalid_auth"),
                  SendError("an unknown code", code=999),
                  RuntimeError("not a SendError"), None):
        assert is_account_failure(error, Graphish), error
    # A channel that declares nothing: only 400 and 403 are a recipient's.
    assert is_account_failure(SendError("x", status=200, code="channel_not_found"), Channel)
