"""WeChat specifics: login states, cursor durability, context tokens, ret=-2 and -14,
AES media both ways, redelivery, redaction. All against the fake iLink gateway."""

from __future__ import annotations

import os
import stat
import tomllib

import anyio
import pytest
from click.testing import CliRunner

from chatkernel.channels import LoginFailed, LoginRequest
from chatkernel.testing import ChannelContract
from chatkernel_wechat import crypto
from chatkernel_wechat.login import WeChatLogin
from chatkernel_wechat.contract import TOKEN, WeChatAdapter

pytestmark = pytest.mark.anyio
USER = "user1@im.wechat"


# -- crypto ---------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 15, 16, 17, 1000])
def test_ciphertext_size_and_round_trip(size):
    key = crypto.new_key()
    data = os.urandom(size)
    ciphertext = crypto.encrypt(data, key)
    assert len(ciphertext) == crypto.ciphertext_size(size) == (size // 16 + 1) * 16
    assert crypto.decrypt(ciphertext, key) == data


def test_every_key_format_parses():
    import base64

    key = crypto.new_key()
    assert crypto.parse_key(hex_key=key.hex()) == key
    assert crypto.parse_key(b64_key=base64.b64encode(key).decode()) == key
    assert crypto.parse_key(b64_key=base64.b64encode(key.hex().encode()).decode()) == key
    with pytest.raises(ValueError, match="no usable AES key"):
        crypto.parse_key(b64_key="bm90IGEga2V5")


# -- login ----------------------------------------------------------------------------------


async def login_against(ilink, steps, **kwargs):
    """Run the login flow while ``steps`` drive the fake's QR states."""
    lines: list[str] = []
    flow = WeChatLogin(poll_interval=0.01, **kwargs)
    request = LoginRequest(channel="wechat", account="main", api_base=ilink.base_url,
                           echo=lines.append)
    result = None

    async def drive():
        for status, fields in steps:
            await ilink.wait_until(lambda: ilink.qr_code is not None)
            await ilink.wait_until(lambda: ilink.qr_codes[ilink.qr_code]["served"] is not None)
            codes = len(ilink.qr_codes)
            ilink.set_qr_state(status, **fields)
            if status == "expired":  # the next step is about the new code
                await ilink.wait_until(lambda: len(ilink.qr_codes) > codes)

    failure: BaseException | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(drive)
        try:
            result = await flow.run(request)
        except LoginFailed as exc:
            failure = exc
        tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return result, lines


async def test_login_wait_scaned_confirmed():
    from chatkernel_wechat.fake import FakeILink

    async with FakeILink() as ilink:
        result, lines = await login_against(ilink, [("scaned", {}), ("confirmed", {})])
    assert result.config["bot_id"] == ilink.bot_id
    assert result.config["owner_user_id"] == ilink.owner
    assert result.config["api_base"] == ilink.base_url
    assert result.config["bot_token"] in ilink.tokens
    assert "bot_token" in result.secret_keys
    assert any("scanned" in line for line in lines)
    assert not any(result.config["bot_token"] in line for line in lines)
    assert any(ilink.qr_codes[ilink.qr_code] and "liteapp" in line for line in lines)
    assert ilink.violations == []


async def test_login_follows_a_redirect():
    from chatkernel_wechat.fake import FakeILink

    async with FakeILink() as other, FakeILink() as ilink:
        ilink.redirect_to = f"127.0.0.1:{other.port}"
        other.qr_hold = 0.2

        # the other host knows the code (it is the same gateway behind another name)
        other.qr_codes["qr-1"] = {"status": "confirmed", "served": None,
                                  "bot_token": "t@im.bot:abcdefghij",
                                  "ilink_bot_id": "b@im.bot", "baseurl": "",
                                  "ilink_user_id": "o@im.wechat"}
        result, _ = await login_against(ilink, [("scaned_but_redirect", {})])
        assert other.qr_requests and other.violations == []
    assert result.config["bot_token"] == "t@im.bot:abcdefghij"
    assert result.config["api_base"] == other.base_url


async def test_login_asks_for_the_verification_code_and_sends_it():
    from chatkernel_wechat.fake import FakeILink

    asked: list[int] = []

    def read_code():
        asked.append(1)
        return "482913"

    async with FakeILink() as ilink:
        async def drive():
            await ilink.wait_until(lambda: ilink.qr_code is not None)
            ilink.set_qr_state("need_verifycode")
            # Confirm only once a status poll carries the digits the user typed.
            await ilink.wait_until(lambda: any(c.params.get("verify_code") == "482913"
                                               for c in ilink.qr_requests))
            ilink.set_qr_state("confirmed")

        flow = WeChatLogin(poll_interval=0.01, read_code=read_code)
        request = LoginRequest(channel="wechat", account="main", api_base=ilink.base_url,
                               echo=lambda line: None)
        async with anyio.create_task_group() as tg:
            tg.start_soon(drive)
            with anyio.fail_after(10):
                result = await flow.run(request)
        assert ilink.violations == []
    assert asked == [1]
    assert result.config["bot_token"] in ilink.tokens


async def test_login_refreshes_an_expired_code_then_gives_up():
    from chatkernel_wechat.fake import FakeILink

    async with FakeILink() as ilink:
        with pytest.raises(LoginFailed, match="expired 4 times"):
            await login_against(ilink, [("expired", {})] * 4)
        assert len(ilink.qr_codes) == 4  # the first and three new ones


async def test_login_already_bound_keeps_the_credentials():
    from chatkernel_wechat.fake import FakeILink

    async with FakeILink() as ilink:
        with pytest.raises(LoginFailed, match="bound to a bot already"):
            await login_against(ilink, [("binded_redirect", {})])


def test_chatkernel_login_stores_the_token_0600_never_echoed(chatkernel_home, monkeypatch):
    from chatkernel import cli
    from chatkernel_wechat import login as login_module
    from chatkernel_wechat.fake import FakeILink

    monkeypatch.setattr(login_module, "POLL_INTERVAL", 0.01)
    outcome = {}

    async def main():
        async with FakeILink() as ilink:
            async def drive():
                await ilink.wait_until(lambda: ilink.qr_code is not None)
                ilink.set_qr_state("confirmed", bot_token="aa11@im.bot:first-token-xyz")

            async with anyio.create_task_group() as tg:
                tg.start_soon(drive)
                outcome["first"] = await anyio.to_thread.run_sync(lambda: CliRunner().invoke(
                    cli.cli, ["login", "wechat", "--api-base", ilink.base_url]))
            async with anyio.create_task_group() as tg:  # a re-login replaces the token
                async def again():
                    await ilink.wait_until(lambda: len(ilink.qr_codes) == 2)
                    ilink.set_qr_state("confirmed", bot_token="bb22@im.bot:second-token-xyz")
                tg.start_soon(again)
                outcome["second"] = await anyio.to_thread.run_sync(lambda: CliRunner().invoke(
                    cli.cli, ["login", "wechat", "--api-base", ilink.base_url]))
            outcome["base"] = ilink.base_url

    anyio.run(main)
    for run in (outcome["first"], outcome["second"]):
        assert run.exit_code == 0, run.output
        assert "token-xyz" not in run.output
    path = chatkernel_home / "config.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    account = tomllib.loads(path.read_text())["channels"]["wechat"]["accounts"]["main"]
    assert account["bot_token"] == "bb22@im.bot:second-token-xyz"
    assert account["api_base"] == outcome["base"]
    assert account["bot_id"] and account["owner_user_id"]


# -- the channel in a kernel ------------------------------------------------------------------


class TestWeChat(ChannelContract):
    adapter_class = WeChatAdapter

    async def test_token_echoed_and_persisted(self, platform_adapter, tmp_path):
        ilink = platform_adapter.ilink
        async with self.contract_run(platform_adapter, tmp_path) as run:
            await platform_adapter.inject(USER, "hi tk01z", sender_id=USER)
            await run.wait_for_tokens(USER, ["tk01z"])
            first = ilink.peers[USER].tokens[-1]
            assert ilink.sent(USER)[-1].context_token == first
            await platform_adapter.inject(USER, "again tk02z", sender_id=USER)
            await run.wait_for_tokens(USER, ["tk02z"])
            assert ilink.sent(USER)[-1].context_token == ilink.peers[USER].tokens[-1] != first
        # after a restart, a proactive send still has the user's latest token
        async with self.contract_run(platform_adapter, tmp_path) as run:
            peer = await run.channel.peer(USER)
            assert peer.token == ilink.peers[USER].tokens[-1] and peer.token_at
            from chatkernel.channels import OutboundPayload, Route

            await run.channel.send(Route("wechat", "main", USER),
                                   OutboundPayload(text="proactive"))
        assert ilink.sent(USER)[-1].context_token == ilink.peers[USER].tokens[-1]
        assert ilink.dropped == [] and ilink.violations == []

    async def test_send_without_a_token_is_refused(self, contract_kernel):
        from chatkernel.channels import OutboundPayload, Route, SendError

        with pytest.raises(SendError, match="no context_token for nobody@im.wechat"):
            await contract_kernel.channel.send(Route("wechat", "main", "nobody@im.wechat"),
                                               OutboundPayload(text="hello"))
        assert contract_kernel.adapter.ilink.calls_to("sendmessage") == []

    @pytest.mark.parametrize("cause", ["quota", "window", "stale", "large"])
    async def test_ret_minus_2_names_its_cause_and_backs_off(self, contract_kernel, cause):
        from chatkernel.channels import OutboundPayload, Route, SendError

        run = contract_kernel
        ilink, channel = run.adapter.ilink, run.channel
        await run.adapter.inject(USER, "hello rt01z", sender_id=USER)
        await run.wait_for_tokens(USER, ["rt01z"])
        route, text = Route("wechat", "main", USER), "x"
        expected = {"quota": "not written since the bot's last 10 messages",
                    "window": "more than 24 hours", "large": "payload is too large",
                    "stale": "context_token is stale"}[cause]
        if cause == "quota":
            for n in range(9):
                await channel.send(route, OutboundPayload(text=f"n{n}"))
        elif cause == "window":
            ilink.clock_offset = 25 * 3600
            (await channel.peer(USER)).token_at -= 25 * 3600
        elif cause == "stale":
            ilink.peers[USER].tokens.clear()
        else:
            text = "字" * 6000  # 18 KB of UTF-8 in one item
        with pytest.raises(SendError, match="ret=-2") as refused:
            await channel.send(route, OutboundPayload(text=text))
        assert expected in str(refused.value)
        assert "context_token age" in str(refused.value)
        calls = len(ilink.calls_to("sendmessage"))
        with pytest.raises(SendError, match="held back"):  # no hammering
            await channel.send(route, OutboundPayload(text="more"))
        assert len(ilink.calls_to("sendmessage")) == calls

    async def test_ret_minus_2_in_a_reply_is_reported_in_the_session_log(self, contract_kernel):
        run = contract_kernel
        ilink = run.adapter.ilink
        ilink.faults.fail("sendmessage", __import__("chatkernel_wechat.fake", fromlist=["x"])
                          .ilink_error(-2))
        await run.adapter.inject(USER, "hello rl01z", sender_id=USER)
        async def notes():
            found = []
            for key in await run.harness.session_keys():
                for entry in await run.harness.session_log(key, limit=50):
                    if entry.role == "notification":
                        found.append(entry.text)
            return found

        await run.wait(lambda: ilink.calls_to("sendmessage"), what="the reply's send")
        await run.settle()  # the send failed, and what it wrote is committed
        found = await notes()
        assert found, "no notification in the session log"
        assert "chunk 1/1" in found[0] and "ret=-2" in found[0] and "likely" in found[0]

    @pytest.mark.slow
    async def test_session_expired_pauses_and_turns_health_red(self, contract_kernel):
        run = contract_kernel
        ilink = run.adapter.ilink
        await run.adapter.inject(USER, "hello se01z", sender_id=USER)
        await run.wait_for_tokens(USER, ["se01z"])
        await run.settle()
        configs = len(ilink.calls_to("getconfig"))  # the typing indicator's, before
        ilink.expire_session(TOKEN)
        await run.wait(lambda: run.account.runtime.problem is not None, what="the -14")
        assert "chatkernel login wechat" in run.account.runtime.problem
        polls = len(ilink.calls_to("getupdates"))
        probe = await run.channel.probe()
        assert not probe.ok and not probe.restartable and "login" in probe.detail
        from chatkernel.channels import OutboundPayload, Route, SendError

        with pytest.raises(SendError, match="session expired"):
            await run.channel.send(Route("wechat", "main", USER), OutboundPayload(text="x"))
        trouble = run.channel.receive_trouble(
            __import__("chatkernel_wechat.api", fromlist=["x"]).ILinkError("x", code=-14))
        assert trouble.wait > 3000 and not trouble.restartable
        assert len(ilink.calls_to("getupdates")) == polls
        assert len(ilink.calls_to("getconfig")) == configs
        assert len(ilink.calls_to("sendmessage")) == 1

    @pytest.mark.parametrize("key_format", ["hex", "b64raw", "b64hex"])
    async def test_inbound_media_decrypted(self, contract_kernel, key_format):
        run = contract_kernel
        data = os.urandom(5000)
        run.adapter.ilink.inject_media(USER, "file", data, filename="notes.bin",
                                       key_format=key_format)
        await run.wait(lambda: run.agent.requests != [], what="the file reaches the agent")
        media = run.agent.requests[0].media
        assert media[0].path.read_bytes() == data and media[0].filename == "notes.bin"

    async def test_voice_transcript_is_the_text(self, contract_kernel):
        run = contract_kernel
        run.adapter.ilink.inject_media(USER, "voice", b"#!SILK_V3" + os.urandom(100),
                                       text="what time is it")
        await run.wait(lambda: run.agent.requests != [], what="the voice message")
        assert "what time is it" in run.agent.requests[0].text
        assert run.agent.requests[0].media[0].kind == "voice"

    async def test_media_out_is_encrypted_and_checked(self, contract_kernel, tmp_path):
        from chatkernel.channels import OutboundPayload, Route

        run = contract_kernel
        ilink = run.adapter.ilink
        await run.adapter.inject(USER, "hello md01z", sender_id=USER)
        await run.wait_for_tokens(USER, ["md01z"])
        picture = tmp_path / "p.png"
        picture.write_bytes(os.urandom(3000))
        await run.channel.send(Route("wechat", "main", USER),
                               OutboundPayload(media_path=picture, media_kind="image",
                                               caption="look"))
        sent = ilink.sent(USER)
        assert [m.kind for m in sent[-2:]] == ["text", "image"]
        assert sent[-1].data == picture.read_bytes() and ilink.violations == []

    async def test_cursor_saved_after_the_journal_survives_a_crash(self, platform_adapter,
                                                                 tmp_path):
        ilink = platform_adapter.ilink
        async with self.contract_run(platform_adapter, tmp_path) as run:
            await platform_adapter.inject(USER, "one cu01z", sender_id=USER)
            await run.wait_for_tokens(USER, ["cu01z"])
            saved = await run.channel.context.load_cursor()
            assert saved == ilink.cursor(1)
        async with self.contract_run(platform_adapter, tmp_path) as run:
            await platform_adapter.inject(USER, "two cu02z", sender_id=USER)
            await run.wait_for_tokens(USER, ["cu02z"])
            first = [c for c in ilink.calls_to("getupdates")]
        # the restarted loop asked from the saved cursor, not from the start
        assert any(c.params["get_updates_buf"] == saved for c in first[1:])
        assert run.tokens_sent(USER, ["cu01z", "cu02z"]) == ["cu01z", "cu02z"]

    async def test_headers_fresh_uin_and_no_busy_hint(self, contract_kernel):
        run = contract_kernel
        run.agent.gate = anyio.Event()
        await run.adapter.inject(USER, "first bh01z", sender_id=USER)
        await run.wait(lambda: run.agent.requests != [], what="the first turn")
        await run.adapter.inject(USER, "second bh02z", sender_id=USER)
        await run.wait(lambda: len(run.deliveries) >= 2, what="the second message journaled")
        run.agent.gate.set()
        await run.wait_for_tokens(USER, ["bh01z", "bh02z"])
        assert not any("still working" in text for text in run.texts(USER))
        assert run.adapter.ilink.violations == []
        assert len(run.adapter.ilink.uins) >= len(run.adapter.ilink.calls) - 1

    async def test_token_never_in_errors_or_status(self, contract_kernel):
        run = contract_kernel
        run.adapter.ilink.faults.fail("getconfig", __import__(
            "chatkernel_wechat.fake", fromlist=["x"]).ilink_error(-5, f"bad token {TOKEN}"))
        probe = await run.channel.probe()
        assert not probe.ok and TOKEN not in probe.detail


# -- a refused session ------------------------------------------------------------------------


@pytest.mark.slow
async def test_an_expired_session_fails_the_account_with_what_to_do(tmp_path):
    from chatkernel.testing import ManualClock, open_contract_run

    expected = ("session expired (iLink ret=-14): run `chatkernel login wechat` to log in "
                "again, then restart the gateway; calls to iLink are paused meanwhile")
    clock = ManualClock()
    hour = 3600.0
    async with WeChatAdapter() as adapter:
        ilink = adapter.ilink
        ilink.expire_session(TOKEN)  # every call of the token answers -14
        async with open_contract_run(adapter, tmp_path, channel_clock=clock) as run:
            runtime = run.account.runtime
            await run.wait(lambda: runtime.state == "failed", what="the account failed")
            assert runtime.detail == expected == run.channel.session_expired
            snapshot = await run.health.snapshot()
            assert any(expected in problem for problem in snapshot.problems)
            assert TOKEN not in repr(snapshot)
            # Paused an hour: the loop sleeps until the pause ends, no call at all meanwhile.
            expired_at = clock.now()
            assert await clock.sleeper() == expired_at + hour
            assert [call.method for call in ilink.calls] == ["msg/notifystart"]
            # The hour is over: one poll, refused again, and another hour's pause (the
            # poll's own deadline, a minute at most, is on the clock while it is out).
            clock.advance(hour)
            assert await clock.sleeper(after=clock.now() + 60) == expired_at + 2 * hour
            assert [call.method for call in ilink.calls] == ["msg/notifystart",
                                                             "getupdates"]
            assert runtime.state == "failed" and runtime.detail == expected
        # Restarted during the pause: failed again at once, without a call to iLink, and
        # asleep until the pause it remembered ends.
        calls = [call.method for call in ilink.calls]
        async with open_contract_run(adapter, tmp_path, channel_clock=clock) as run:
            runtime = run.account.runtime
            await run.wait(lambda: runtime.state == "failed", what="failed after a restart")
            assert runtime.detail == expected
            assert await clock.sleeper() == expired_at + 2 * hour
            assert [call.method for call in ilink.calls] == calls


def test_the_advice_names_an_account_other_than_main():
    from chatkernel.channels import Account
    from chatkernel_wechat.channel import WeChatChannel

    account = Account("wechat", "work", WeChatChannel.account_model.model_validate(
        {"bot_token": TOKEN}))
    channel = WeChatChannel(account)
    assert "`chatkernel login wechat --account work`" in channel.session_expired
