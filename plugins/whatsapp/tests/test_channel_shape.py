"""The WhatsApp channel is written against the current channel contract: it uses no name
the kit keeps only for older plugins, and receives through its transport."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from chatkernel.channels import Account, Capabilities
from chatkernel_whatsapp.api import RECIPIENT_CODES
from chatkernel_whatsapp.channel import WhatsAppAccount, WhatsAppChannel
from chatkernel_whatsapp.receiving import WhatsAppWebhook

CONFIG = {"access_token": "EAAG-shape-token", "phone_number_id": "106540352242922",
          "app_secret": "shape-app-secret", "verify_token": "shape-verify-token"}


@pytest.mark.slow
def test_nothing_it_does_warns_of_a_deprecated_name():
    # A fresh interpreter: the class is made (and checked by the kit) on import.
    script = textwrap.dedent(f"""
        from chatkernel.channels import Account, refusal
        from chatkernel_whatsapp.api import TOKEN_EXPIRED, GraphError
        from chatkernel_whatsapp.channel import WhatsAppAccount, WhatsAppChannel
        config = WhatsAppAccount.model_validate({CONFIG!r})
        channel = WhatsAppChannel(Account("whatsapp", "main", config))
        transport = channel.transport()
        transport.quiet, transport.http_routes()
        error = GraphError("Session has expired", code=TOKEN_EXPIRED, status=401)
        assert "restart the gateway" in refusal(channel, error)
        """)
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", script],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_it_receives_on_its_webhook():
    config = WhatsAppAccount.model_validate(CONFIG)
    transport = WhatsAppChannel(Account("whatsapp", "main", config)).transport()
    assert type(transport) is WhatsAppWebhook and transport.quiet
    assert [(method, path) for method, path, _ in transport.http_routes()] == [
        ("POST", "/whatsapp/main/webhook"), ("GET", "/whatsapp/main/webhook")]


def test_platform_features_are_declared_as_data():
    assert WhatsAppChannel.capabilities == Capabilities(
        delivery_statuses=True, recipient_error_codes=RECIPIENT_CODES)
    assert WhatsAppChannel.limits.indicator_interval == 20.0
    assert WhatsAppAccount.identity == ("api_base", "phone_number_id")
