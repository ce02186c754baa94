"""Live replies (core/outbound/live.py) on the loopback channel: the preview's pace, its
markup, its failures, the queue modes, the config, and a kill -9 mid-answer."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from chatkernel.core.outbound import live
from chatkernel.core.outbound.live import close_markup, streaming_setting
from chatkernel.core.turns.agents import AgentEvent
from chatkernel.testing.contract import PlatformAdapter, open_contract_run
from chatkernel.testing.fake_platform import ErrorAnswer
from chatkernel.testing.loopback import LoopbackPlatform, LoopbackPlugin

pytestmark = pytest.mark.anyio

CHAT = "dm-1"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Adapter(PlatformAdapter):
    channel_plugin = LoopbackPlugin
    channel_name = "loopback"

    def __init__(self) -> None:
        self.platform = LoopbackPlatform()

    async def start(self) -> None:
        await self.platform.__aenter__()

    async def stop(self) -> None:
        await self.platform.__aexit__(None, None, None)

    def account_config(self) -> dict[str, Any]:
        return {"base_url": self.platform.url, "poll_timeout": 0.25}

    async def inject(self, chat_id: str, text: str, **options: Any) -> None:
        self.platform.inject(chat_id, text)

    def sent_texts(self, chat_id: str, *, thread_id: str | None = None) -> list[str]:
        return self.platform.texts(chat_id)


class GatedSleep:
    """The preview's sleep between updates, released by the test one at a time."""

    def __init__(self) -> None:
        self.asked: list[float] = []
        self._free = 0
        self._changed = anyio.Event()

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        while not self._free:
            self._changed = anyio.Event()
            await self._changed.wait()
        self._free -= 1

    def release(self) -> None:
        self._free += 1
        self._changed.set()


def methods(platform: LoopbackPlatform) -> list[str]:
    return [call.method for call in platform.calls if call.method not in ("typing", "me")]


async def live_run(tmp_path: Path, adapter: Adapter, **settings: Any) -> Any:
    return open_contract_run(adapter, tmp_path / "kernel", channel_settings={
        "streaming": "on", "streaming_interval_ms": 100, **settings})


# -- markup ------------------------------------------------------------------------------


@pytest.mark.parametrize(("partial", "shown"), [
    ("some **bold", "some **bold**"),
    ("a `code", "a `code`"),
    ("```python\nx = 1", "```python\nx = 1\n```"),
    ("```\ndone\n```\nand *more", "```\ndone\n```\nand *more*"),
    ("read [the guide](https://exa", "read "),
    ("~~gone", "~~gone~~"),
    ("snake_case and 2 * 3", "snake_case and 2 * 3"),
    ("**done** and _half", "**done** and _half_"),
    ("first **para\n\nsecond", "first **para\n\nsecond"),
])
def test_a_preview_never_shows_an_open_mark(partial, shown):
    assert close_markup(partial) == shown


# -- the pace ----------------------------------------------------------------------------


async def test_deltas_are_coalesced_into_one_update_per_interval(tmp_path):
    sleep = GatedSleep()
    async with Adapter() as adapter:
        platform = adapter.platform
        async with await live_run(tmp_path, adapter) as run:
            run.kernel.live._sleep = sleep
            first_shown = anyio.Event()

            async def script(request):
                yield AgentEvent("text", "one ", final=False)
                await first_shown.wait()
                for word in ("two ", "three ", "four"):
                    yield AgentEvent("text", word, final=False)
                await run.wait(lambda: "preview_edit" in methods(platform),
                               what="the second update", state=lambda: methods(platform))
                yield AgentEvent.reply("one two three four")

            run.agent.script = script
            await adapter.inject(CHAT, "go")
            await run.wait(lambda: len(sleep.asked) == 1, what="the first update, then a wait")
            assert methods(platform) == ["preview"]  # the first text at once
            first_shown.set()
            # Three deltas arrive while the preview waits: nothing is shown until then.
            await run.wait(lambda: run.agent.running == 1 and platform.calls, what="the turn")
            assert methods(platform) == ["preview"]
            sleep.release()
            await run.wait(lambda: platform.timeline[-1][1] == "final", what="the answer")
            await run.settle()
        assert sleep.asked[0] == pytest.approx(0.1)
        assert methods(platform) == ["preview", "preview_edit", "edit"]
        assert platform.timeline == [(CHAT, "preview", "one"),
                                     (CHAT, "preview", "one two three four"),
                                     (CHAT, "final", "one two three four")]
        assert platform.texts(CHAT) == ["one two three four"]


async def test_a_failing_preview_never_fails_the_turn(tmp_path):
    async with Adapter() as adapter:
        platform = adapter.platform
        # Every preview call fails: the answer is sent as if there were none.
        platform.faults.fail("preview", ErrorAnswer(500, {"ok": False, "error_code": 500,
                                                          "description": "boom"}), times=99)

        async def script(request):
            for word in ("slow ", "answer"):
                yield AgentEvent("text", word, final=False)
                await run.wait(lambda: platform.calls_to("preview"), what="a preview try")
            yield AgentEvent.reply("slow answer")

        async with await live_run(tmp_path, adapter) as run:
            run.agent.script = script
            await adapter.inject(CHAT, "go")
            await run.wait(lambda: platform.texts(CHAT), what="the answer")
            await run.settle()
            metrics = run.kernel.metrics
            assert metrics.tally(metrics.turns, "ok").pending == 1
            assert metrics.tally(metrics.turns, "error").pending == 0
        assert platform.texts(CHAT) == ["slow answer"]
        assert methods(platform)[-1] == "send"


async def test_a_block_that_never_became_an_answer_is_deleted(tmp_path):
    async with Adapter() as adapter:
        platform = adapter.platform

        async def script(request):
            yield AgentEvent("text", "half a tho", final=False)
            await run.wait(lambda: platform.sent, what="the preview")
            raise RuntimeError("the model went away")
            yield  # pragma: no cover

        async with await live_run(tmp_path, adapter) as run:
            run.agent.script = script
            await adapter.inject(CHAT, "go")
            await run.wait(lambda: len(platform.texts(CHAT)) == 1
                           and "failed" in platform.texts(CHAT)[0], what="the error note")
            await run.settle()
        assert platform.sent[0].deleted
        assert platform.texts(CHAT) == ["⚠️ the agent failed: the model went away"]


async def test_a_preview_still_being_started_as_the_turn_fails_is_deleted_too(tmp_path):
    """The turn ends while the platform has made the preview but not yet answered the
    call: the call is let finish, so the preview it made is known and deleted."""
    async with Adapter() as adapter:
        platform = adapter.platform
        platform.faults.stall("preview")  # it takes effect; its answer is held

        async def script(request):
            yield AgentEvent("text", "half a tho", final=False)
            await run.wait(lambda: platform.sent, what="the preview made")
            raise RuntimeError("the model went away")
            yield  # pragma: no cover

        async with await live_run(tmp_path, adapter) as run:
            run.agent.script = script
            await adapter.inject(CHAT, "go")
            await run.wait(lambda: run.agent.requests and not run.agent.running,
                           what="the turn failed")
            platform.release()  # the preview's answer, now the turn is ending
            await run.wait(lambda: any("failed" in t for t in platform.texts(CHAT)),
                           what="the error note", state=lambda: platform.texts(CHAT))
            await run.settle()
        assert platform.sent[0].deleted, platform.timeline
        assert platform.texts(CHAT) == ["⚠️ the agent failed: the model went away"]


async def test_a_preview_call_that_never_answers_is_cut_short_and_said(tmp_path, caplog,
                                                                       monkeypatch):
    monkeypatch.setattr(live, "CLEANUP_SECONDS", 0.2)
    async with Adapter() as adapter:
        platform = adapter.platform
        platform.faults.stall("preview")  # never answered while the turn ends

        async def script(request):
            yield AgentEvent("text", "half a tho", final=False)
            await run.wait(lambda: platform.sent, what="the preview made")
            raise RuntimeError("the model went away")
            yield  # pragma: no cover

        async with await live_run(tmp_path, adapter) as run:
            run.agent.script = script
            await adapter.inject(CHAT, "go")
            await run.wait(lambda: any("failed" in t for t in platform.texts(CHAT)),
                           what="the error note", state=lambda: platform.texts(CHAT))
            await run.settle()
            platform.release()
        assert "a live reply call in session" in caplog.text
        assert "cut short, a preview it started may stay unfinished" in caplog.text


async def test_an_interrupting_message_stops_the_preview_where_it_is(tmp_path):
    async with Adapter() as adapter:
        platform = adapter.platform
        hold = anyio.Event()

        async def script(request):
            if "first" in request.text:
                yield AgentEvent("text", "working on it", final=False)
                await hold.wait()  # until interrupted
            yield AgentEvent.reply(f"re: {request.text}")

        async with open_contract_run(adapter, tmp_path / "kernel", channel_settings={
                "streaming": "on", "streaming_interval_ms": 100},
                extra_config={"queue": {"mode": "interrupt"}}) as run:
            run.agent.script = script
            await adapter.inject(CHAT, "first")
            await run.wait(lambda: platform.sent, what="the first turn's preview")
            await adapter.inject(CHAT, "second")
            await run.wait(lambda: "re: second" in platform.texts(CHAT), what="the answer")
            await run.settle()
        preview = platform.sent[0]
        assert preview.shown == ["working on it"] and not preview.final
        assert not preview.deleted  # it stays as the user last saw it
        assert platform.texts(CHAT) == ["working on it", "re: second"]


# -- a long answer -----------------------------------------------------------------------


async def test_a_preview_outgrowing_the_limit_goes_on_in_a_new_message(tmp_path):
    async with Adapter() as adapter:
        platform = adapter.platform
        line = "word " * 19 + "end\n"  # 100 characters
        lines = [f"{n:03d} {line[4:]}" for n in range(15)]  # 1500: the limit is 1000

        async def script(request):
            for text in lines:
                yield AgentEvent("text", text, final=False)
                marker = text[:3]
                await run.wait(lambda: any(marker in t for _, k, t in platform.timeline
                                           if k == "preview"), what=f"line {marker}")
            yield AgentEvent.reply("".join(lines))

        async with await live_run(tmp_path, adapter) as run:
            run.agent.script = script
            await adapter.inject(CHAT, "go")
            await run.wait(lambda: len(platform.texts(CHAT)) == 2
                           and all(m.final for m in platform.sent), what="the answer")
            await run.settle()
        assert [call.method for call in platform.calls].count("preview") == 2
        assert [call.method for call in platform.calls].count("send") == 0
        assert " ".join(platform.texts(CHAT)).split() == "".join(lines).split()
        assert all(len(text) <= 1000 for text in platform.texts(CHAT))


# -- config ------------------------------------------------------------------------------


async def test_streaming_is_set_per_channel_and_per_account(tmp_path):
    async with Adapter() as adapter:
        async with open_contract_run(adapter, tmp_path / "kernel", channel_settings={
                "streaming": "on", "streaming_interval_ms": 300}) as run:
            account = run.account
            section = run.kernel.config.channels["loopback"]
            assert streaming_setting(account, section) == (True, 0.3)
            account.config.streaming = "off"
            assert streaming_setting(account, section)[0] is False
            account.config.streaming = None
            section.streaming = None  # the channel's default: off for the loopback
            assert streaming_setting(account, section)[0] is False
            account.config.streaming = "on"
            account.config.streaming_interval_ms = 1000
            assert streaming_setting(account, section) == (True, 1.0)


def test_a_bad_streaming_value_is_refused_naming_the_key():
    from chatkernel.core import config as cfg

    with pytest.raises(cfg.ConfigError, match="streaming"):
        cfg.parse({"channels": {"loopback": {"streaming": "yes"}}})


# -- kill -9 mid-answer ------------------------------------------------------------------


async def start_gateway(platform: LoopbackPlatform, home: Path, log: Any) -> Any:
    env = {**os.environ, "CHATKERNEL_HOME": str(home)}
    return await anyio.open_process(
        [sys.executable, "-m", "chatkernel.testing.loopback", "--platform", platform.url,
         "--streaming", "--echo-typing-ms", "150"], env=env, stdout=None, stderr=log)


@pytest.mark.slow
async def test_kill_9_mid_answer_then_the_answer_arrives_whole_once(tmp_path):
    home = tmp_path / "home"
    words = [f"w{n:02d}" for n in range(40)]
    text = " ".join(words)
    async with LoopbackPlatform() as platform:
        platform.inject(CHAT, text)
        with (tmp_path / "first.log").open("wb") as log:
            process = await start_gateway(platform, home, log)
            try:
                # Killed once the preview shows a few words of the answer, and no more.
                await platform.wait_until(lambda: platform.sent and len(
                    platform.sent[0].text.split()) >= 5, timeout=30)
            finally:
                process.send_signal(signal.SIGKILL)
                await process.wait()
        stale = platform.sent[0]
        assert not stale.final and len(stale.text.split()) < len(words)
        with (tmp_path / "second.log").open("wb") as log:
            process = await start_gateway(platform, home, log)
            try:
                await platform.wait_until(lambda: any(m.final for m in platform.sent),
                                          timeout=30)
            finally:
                process.send_signal(signal.SIGTERM)
                await process.wait()
        assert stale.deleted, "the half answer is still in the chat"
        assert platform.texts(CHAT) == [text]
        assert [m.text for m in platform.sent if m.final] == [text]


async def test_a_message_steered_into_a_streaming_turn_keeps_its_preview_going(tmp_path):
    async with Adapter() as adapter:
        platform = adapter.platform

        async def script(request):
            yield AgentEvent("text", "working ", final=False)
            await run.wait(lambda: run.agent.steered, what="the steered message")
            yield AgentEvent("text", f"on {run.agent.steered[0]}", final=False)
            await run.wait(lambda: any("on and this" in t for _, _, t in platform.timeline),
                           what="the preview showing the steered part")
            yield AgentEvent.reply(f"working on {run.agent.steered[0]}")

        async with open_contract_run(adapter, tmp_path / "kernel", channel_settings={
                "streaming": "on", "streaming_interval_ms": 100},
                extra_config={"queue": {"mode": "steer"}}) as run:
            run.agent.supports_steer = True
            run.agent.script = script
            await adapter.inject(CHAT, "first")
            await run.wait(lambda: platform.sent, what="the first preview")
            await adapter.inject(CHAT, "and this")
            await run.wait(lambda: platform.timeline[-1][1] == "final", what="the answer")
            await run.settle()
        assert len(run.agent.requests) == 1  # one turn: the second message joined it
        # (the kernel's busy hint goes out as the message arrives, as without a preview)
        assert [t for t in platform.texts(CHAT) if not t.startswith("⏳")] == [
            "working on and this"]
        assert [t for _, kind, t in platform.timeline if kind == "final"
                and not t.startswith("⏳")] == ["working on and this"]
