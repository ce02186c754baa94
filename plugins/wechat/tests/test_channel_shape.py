"""The WeChat channel is written against the current channel contract: it uses no name the
kit keeps only for older plugins, and receives through its long poll."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from chatkernel.channels import Account, Capabilities, refusal
from chatkernel_wechat.api import SEND_REFUSED, ILinkError
from chatkernel_wechat.channel import SESSION_EXPIRED, WeChatAccount, WeChatChannel
from chatkernel_wechat.contract import TOKEN
from chatkernel_wechat.receiving import WeChatPolling


def channel() -> WeChatChannel:
    return WeChatChannel(Account("wechat", "main", WeChatAccount.model_validate(
        {"bot_token": TOKEN})))


@pytest.mark.slow
def test_nothing_it_does_warns_of_a_deprecated_name():
    # A fresh interpreter: the class is made (and checked by the kit) on import.
    script = textwrap.dedent(f"""
        from chatkernel.channels import Account, refusal
        from chatkernel_wechat.api import ILinkError
        from chatkernel_wechat.channel import WeChatAccount, WeChatChannel
        config = WeChatAccount.model_validate({{"bot_token": {TOKEN!r}}})
        channel = WeChatChannel(Account("wechat", "main", config))
        transport = channel.transport()
        transport.quiet, transport.http_routes(), transport.backoff
        assert "chatkernel login wechat" in refusal(channel, ILinkError("expired", code=-14))
        """)
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", script],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_its_transport_is_the_long_poll():
    polling = channel().transport()
    assert type(polling) is WeChatPolling and not polling.quiet
    assert polling.http_routes() == [] and polling.backoff == (2.0, 30.0)


def test_platform_features_are_declared_as_data():
    assert WeChatChannel.capabilities == Capabilities(
        busy_hint=False, recipient_error_codes=frozenset({SEND_REFUSED}))
    assert WeChatChannel.limits.indicator_interval == 5.0
    assert WeChatAccount.identity == ("api_base", "bot_token")


def test_an_expired_session_says_what_to_do():
    words = refusal(channel(), ILinkError(SESSION_EXPIRED, code=-14))
    assert words == channel().session_expired
