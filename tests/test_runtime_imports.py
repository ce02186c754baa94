"""Running the gateway imports no test kit: the fakes, devservers and chatkernel.testing ship
in the wheels (as aiohttp.test_utils does), but `chatkernel run` with all four channel
plugins installed and an account of each configured loads none of them, so what they alone
need can stay out of the run-time requirements (the `testing` extras)."""

from __future__ import annotations

import pytest

from chatkernel.testing.process import gateway_process

pytestmark = pytest.mark.slow  # a real gateway process

#: Where nothing answers: the accounts start, and their calls fail, offline.
NOWHERE = "http://127.0.0.1:9"

CONFIG = f"""\
[channels.telegram.accounts.main]
bot_token = "123456:test-token"
api_base = "{NOWHERE}"

[channels.slack.accounts.main]
bot_token = "xoxb-test"
app_token = "xapp-test"
api_base = "{NOWHERE}"

[channels.wechat.accounts.main]
bot_token = "test-token"
api_base = "{NOWHERE}"
cdn_base = "{NOWHERE}"

[channels.whatsapp.accounts.main]
access_token = "test-token"
phone_number_id = "123456789"
app_secret = "test-secret"
verify_token = "test-verify"
api_base = "{NOWHERE}"
"""


def is_test_kit(name: str) -> bool:
    parts = name.split(".")
    return (name == "chatkernel.testing" or name.startswith("chatkernel.testing.")
            or (parts[0].startswith("chatkernel") and any(
                part in ("fake", "devserver", "contract", "testing") or "devserver" in part
                for part in parts[1:])))


def test_a_running_gateway_with_every_channel_imports_no_test_kit(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(CONFIG)
    listing = tmp_path / "modules.txt"
    with gateway_process(home, env={"CHATKERNEL_MODULES_AT_EXIT": str(listing)}) as gateway:
        # Its log, after the address: once it is ready, every account's loop has started
        # and a SIGTERM stops it in order.
        assert any("chatkernel ready on" in line for line in gateway.process.stderr)
        assert gateway.stop() == 0
    modules = listing.read_text().split()
    # Every channel's run-time modules were loaded: its account was built and started.
    for channel in ("slack", "telegram", "wechat", "whatsapp"):
        assert f"chatkernel_{channel}.channel" in modules
        assert f"chatkernel_{channel}.receiving" in modules
    assert [name for name in modules if is_test_kit(name)] == []


@pytest.mark.parametrize("name", ["chatkernel.testing", "chatkernel.testing.memory",
                                  "chatkernel_slack.fake", "chatkernel_wechat.devserver",
                                  "chatkernel_wechat.contract", "chatkernel_whatsapp.testing"])
def test_the_test_kit_is_recognised(name):
    assert is_test_kit(name)


@pytest.mark.parametrize("name", ["chatkernel.core.kernel", "chatkernel_slack.channel",
                                  "anyio._core._testing", "chatkernel.sdk.receiving"])
def test_run_time_modules_are_not_taken_for_test_kit(name):
    assert not is_test_kit(name)
