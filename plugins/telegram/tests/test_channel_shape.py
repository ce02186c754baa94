"""The Telegram channel is written against the current channel contract: it uses no name
the kit keeps only for older plugins, and receives through its transports."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from chatkernel.channels import Account, Capabilities, PlatformError, refusal
from chatkernel_telegram.channel import TelegramAccount, TelegramChannel
from chatkernel_telegram.receiving import SECRET_HEADER, TelegramPolling, TelegramWebhook

TOKEN = "123456:AAShapeTokenForTestsOnly_abcdefghij"
WEBHOOK = {"mode": "webhook", "webhook_url": "https://bot.example.org/hook"}


def channel(**extra: str) -> TelegramChannel:
    config = TelegramAccount.model_validate({"bot_token": TOKEN, **extra})
    return TelegramChannel(Account("telegram", "main", config))


@pytest.mark.slow
def test_nothing_it_does_warns_of_a_deprecated_name():
    # A fresh interpreter: the class is made (and checked by the kit) on import.
    script = textwrap.dedent(f"""
        from chatkernel.channels import Account, PlatformError, refusal
        from chatkernel_telegram.channel import TelegramAccount, TelegramChannel
        for extra in ({{}}, {WEBHOOK!r}):
            config = TelegramAccount.model_validate({{"bot_token": {TOKEN!r}, **extra}})
            channel = TelegramChannel(Account("telegram", "main", config))
            transport = channel.transport()
            transport.quiet, transport.http_routes(), channel.secret_token
            error = PlatformError("Unauthorized", status=401, code=401)
            assert "restart the gateway" in refusal(channel, error)
        """)
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", script],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_each_mode_has_its_transport():
    polling, webhook = channel().transport(), channel(**WEBHOOK).transport()
    assert type(polling) is TelegramPolling and not polling.quiet
    assert polling.http_routes() == []
    assert type(webhook) is TelegramWebhook and webhook.quiet
    assert [(method, path) for method, path, _ in webhook.http_routes()] == [
        ("POST", "/telegram/main/webhook"), ("GET", "/telegram/main/webhook")]
    # The webhook checks the secret its channel gives setWebhook.
    webhook.verifier().verify({SECRET_HEADER: webhook.channel.secret_token}, b"{}")


def test_platform_features_are_declared_as_data():
    assert TelegramChannel.capabilities == Capabilities()
    assert TelegramAccount.identity == ("api_base", "bot_token")


def test_a_rejected_token_says_what_to_do_in_telegram_words():
    words = refusal(channel(), PlatformError("Unauthorized", status=401, code=401))
    assert words is not None and "@BotFather" in words
    assert "channels.telegram.accounts.main.bot_token" in words and TOKEN not in words
