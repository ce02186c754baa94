"""The bot token's age for ``chatkernel doctor``: the probe reports it from the time the
login noted (``extra["findings"]``), warns once iLink may end the session soon, fails with
the login to run when iLink ended it (``-14``), and says "age unknown" for a token no
login time was noted for (set by hand, or by a login before the time was kept)."""

from __future__ import annotations

import time

import pytest

from chatkernel.testing import open_contract_run
from chatkernel_wechat.channel import TOKEN_WARN_SECONDS
from chatkernel_wechat.contract import TOKEN, WeChatAdapter

pytestmark = pytest.mark.anyio

DAY = 86400.0


def token_finding(probe) -> dict[str, str]:
    [found] = [item for item in probe.extra["findings"] if item["check"] == "token"]
    return found


async def test_the_probe_reports_the_token_s_age_and_its_end(tmp_path):
    async with WeChatAdapter() as adapter:
        async with open_contract_run(adapter, tmp_path, loop=False) as run:
            unknown = token_finding(await run.probe())
            assert unknown["status"] == "ok" and "age unknown" in unknown["message"]

            await run.channel.context.record_credentials(time.time() - 3 * DAY)
            fresh = token_finding(await run.probe())
            assert fresh["status"] == "ok"
            assert fresh["message"].startswith("the bot token is 3 days old")
            assert "about 30 days after its login" in fresh["message"]

            await run.channel.context.record_credentials(
                time.time() - TOKEN_WARN_SECONDS - DAY)
            old = token_finding(await run.probe())
            assert old["status"] == "warn" and "26 days old" in old["message"]
            assert old["fix"] == "chatkernel login wechat, then restart the gateway"

            adapter.ilink.expire_session(TOKEN)  # iLink ended the session: -14
            probe = await run.probe()
            expired = token_finding(probe)
            assert not probe.ok and expired["status"] == "fail"
            assert "session expired (iLink ret=-14)" in expired["message"]
            assert "26 days old" in expired["message"]
            assert expired["fix"] == "chatkernel login wechat, then restart the gateway"
            # Paused since: the probe says it again without asking iLink.
            assert token_finding(await run.probe())["status"] == "fail"


async def test_the_fix_names_the_account():
    from chatkernel.channels import Account
    from chatkernel_wechat.channel import WeChatChannel

    account = Account("wechat", "work", WeChatChannel.account_model.model_validate(
        {"bot_token": TOKEN}))
    channel = WeChatChannel(account)  # no store: no login time to read
    expired = await channel.token_finding("expired")
    assert "age unknown" in expired["message"]
    assert expired["fix"] == "chatkernel login wechat --account work, then restart the gateway"
