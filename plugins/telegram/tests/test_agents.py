"""Several agents behind Telegram: bindings by channel, by account and by chat route each
update to its agent, through the receive loops against the fake Bot API."""

from __future__ import annotations

import anyio
import pytest

import chatkernel_telegram
from chatkernel.testing import KernelHarness, LabelAgent, agent_plugin
from chatkernel_telegram.fake import FakeBotAPI

pytestmark = pytest.mark.anyio

MAIN = "123456:AAExampleTokenForTestsOnly_abcdefghij"
FAMILY = "654321:AAFamilyBotTokenForTestsOnly_abcdefg"


def label(name: str) -> dict:
    return {"kind": "label", "system_prompt": name}


async def test_three_agents_behind_two_bots_and_another_channel(tmp_path):
    async with FakeBotAPI(token=MAIN, username="chatkernel_bot") as api:
        api.add_bot(FAMILY, "family_bot")
        bots = {name: {"bot_token": token, "api_base": api.base_url, "allow_from": ["*"],
                       "poll_timeout": 1} for name, token in (("main", MAIN),
                                                              ("family", FAMILY))}
        config = {
            "agent": label("default"),
            "agents": {"work": label("work"), "home": label("home"),
                       "family": label("family")},
            "bindings": [{"agent": "work", "channel": "telegram"},
                         {"agent": "family", "channel": "telegram", "account": "family"},
                         {"agent": "home", "channel": "telegram", "account": "main",
                          "chat": "77"}],
            "queue": {"mode": "followup", "debounce_ms": 0},
            "channels": {"telegram": {
                "rate_limits": {"chat": "100/s", "account": "1000/s", "group": "1000/s"},
                "accounts": bots}},
        }
        async with KernelHarness(tmp_path, config=config, plugins=[
                ("telegram", chatkernel_telegram), ("agents", agent_plugin(LabelAgent))]) as h:
            async with anyio.create_task_group() as tg:
                for name in bots:
                    tg.start_soon(h.receive_loop, "telegram", name)
                api.inject_message(42, "by channel")
                api.inject_message(77, "by chat")
                api.inject_message(42, "by account", token=FAMILY)
                await api.wait_for_sent(3)
                await h.channel.receive("no rule")  # the kit's memory channel
                await h.settle()
                tg.cancel_scope.cancel()
        assert api.texts(42, token=MAIN) == ["work (0 before): by channel"]
        assert api.texts(77, token=MAIN) == ["home (0 before): by chat"]
        assert api.texts(42, token=FAMILY) == ["family (0 before): by account"]
        assert h.channel.texts() == ["default (0 before): no rule"]
