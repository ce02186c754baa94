"""Live replies against the Telegram and Slack fakes: how soon the chat shows the answer
being written, and how many calls an answer costs.

A real kernel runs the openai agent against :class:`chatkernel.testing.fakes.openai.FakeOpenAI`,
which streams an answer of ``--words`` words at ``--rate`` tokens a second (one word a
token). Each scenario answers ``--answers`` messages, one after another, in one chat, with
the channel's default limits and live-reply pacing (nothing lifted) and the fake
enforcing the platform's own rate limits, and ``--pause`` seconds (1.5) between an answer
and the next message, as a person reads before writing again:

    telegram private   drafts (sendMessageDraft), then sendMessage
    telegram group     the first text sent, then editMessageText in place
    slack dm thread    chat.startStream / appendStream / stopStream, then chat.update
    slack channel      the first text posted, then chat.update in place

Per answer, from the fakes' own records and one monotonic clock (every server is in
this process): the time from the model's first token (the fake writing its first
content chunk) to the first visible text in the chat (the platform taking the first
preview call), the preview calls (everything the answer cost beyond the final
delivery) and the 429s the platform answered. The table shows medians and maxima over
the answers.

    .venv/bin/python bench/live_replies.py                 # 5 answers a scenario
    .venv/bin/python bench/live_replies.py --answers 10 --words 200 --rate 40
    .venv/bin/python bench/live_replies.py --only telegram --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from chatkernel.testing.contract import PlatformAdapter, open_contract_run
from chatkernel.testing.fakes.openai import FakeOpenAI

#: Calls that show a live reply's preview, by platform.
TELEGRAM_PREVIEW = ("sendMessageDraft", "editMessageText", "deleteMessage")
SLACK_PREVIEW = ("chat.startStream", "chat.appendStream", "chat.stopStream", "chat.update",
                 "chat.delete")


@dataclass
class Scenario:
    name: str
    platform: str  # "telegram" | "slack"
    chat: str
    group: bool = False
    thread: str | None = None


SCENARIOS = [
    Scenario("telegram private", "telegram", "1001"),
    Scenario("telegram group", "telegram", "-1001000000001", group=True),
    Scenario("slack dm thread", "slack", "D0DIRECT01", thread="1600000000.000001"),
    Scenario("slack channel", "slack", "C0GROUP001", group=True),
]


class TelegramBench(PlatformAdapter):
    channel_name = "telegram"

    def __init__(self) -> None:
        import chatkernel_telegram
        from chatkernel_telegram.fake import FakeBotAPI

        type(self).channel_plugin = chatkernel_telegram
        self.fake = FakeBotAPI(token="123456:AALiveBenchTokenForLoopbackOnly_abcdefgh")

    async def start(self) -> None:
        await self.fake.__aenter__()
        self.fake.enforce_limits()  # Telegram's: 1 a second per chat, 20 a minute a group

    async def stop(self) -> None:
        await self.fake.__aexit__(None, None, None)

    def account_config(self) -> dict[str, Any]:
        return {"bot_token": self.fake.token, "api_base": self.fake.base_url,
                "poll_timeout": 1}

    async def inject(self, chat_id: str, text: str, *, group: bool = False,
                     **options: Any) -> None:
        self.fake.inject_message(int(chat_id), f"@{self.fake.username} {text}" if group
                                 else text, from_id=1001,
                                 chat_type="supergroup" if group else "private")

    def sent_texts(self, chat_id: str, *, thread_id: str | None = None) -> list[str]:
        return [m.plain_text or "" for m in self.fake.sent(chat_id=int(chat_id))
                if m.method == "sendMessage" and not m.deleted]

    def preview_calls(self) -> list[Any]:
        return [c for c in self.fake.calls if c.method in TELEGRAM_PREVIEW]

    def first_shown(self, after: float) -> float | None:
        calls = [c for c in self.fake.calls
                 if c.method in ("sendMessageDraft", "sendMessage") and c.when >= after
                 and c.status == 200]
        return calls[0].when if calls else None


class SlackBench(PlatformAdapter):
    channel_name = "slack"

    def __init__(self) -> None:
        import chatkernel_slack
        from chatkernel_slack.fake import FakeSlack

        type(self).channel_plugin = chatkernel_slack
        self.fake = FakeSlack()

    async def start(self) -> None:
        await self.fake.__aenter__()
        self.fake.enforce_limits()  # a message a second per channel, method tiers

    async def stop(self) -> None:
        await self.fake.__aexit__(None, None, None)

    def account_config(self) -> dict[str, Any]:
        return {"bot_token": self.fake.bot_token, "app_token": self.fake.app_token,
                "api_base": f"{self.fake.base_url}/api/"}

    async def inject(self, chat_id: str, text: str, *, group: bool = False,
                     thread_id: str | None = None, **options: Any) -> None:
        self.fake.inject_message(chat_id, text, thread_ts=thread_id, mention=group)

    def sent_texts(self, chat_id: str, *, thread_id: str | None = None) -> list[str]:
        return self.fake.texts(chat_id)

    def preview_calls(self) -> list[Any]:
        return [c for c in self.fake.calls if c.method in SLACK_PREVIEW]

    def first_shown(self, after: float) -> float | None:
        calls = [c for c in self.fake.calls
                 if c.method in ("chat.startStream", "chat.postMessage") and c.when >= after
                 and c.status == 200]
        return calls[0].when if calls else None


def wall_to_monotonic(when: float) -> float:
    """A fake call's ``when`` (wall clock) on the monotonic clock of this process."""
    return when - time.time() + time.monotonic()


async def run_scenario(scenario: Scenario, *, answers: int, words: int, rate: float,
                       home: Path, pause: float = 1.5) -> dict[str, Any]:
    adapter: Any = TelegramBench() if scenario.platform == "telegram" else SlackBench()
    text = " ".join(f"w{n:04d}" for n in range(words))
    rows = []
    async with FakeOpenAI(reply=lambda messages: text, chunk_delay=1 / rate) as model, \
            adapter:
        adapter.timeout = 120.0
        agent = {"kind": "openai", "base_url": model.base_url, "model": "fake-model",
                 "history_limit": 0}
        async with open_contract_run(adapter, home, extra_config={"agent": agent},
                                     channel_settings={"streaming": "on"}) as run:
            for n in range(answers):
                before_calls = len(adapter.preview_calls())
                throttled = adapter.fake.throttled
                started = time.time()
                await adapter.inject(scenario.chat, f"answer {n}", group=scenario.group,
                                     thread_id=scenario.thread)
                await run.wait(lambda: sum(text in t for t in adapter.sent_texts(
                    scenario.chat)) >= n + 1, what=f"answer {n}")
                await run.settle()
                await anyio.sleep(pause)  # a person reads before writing again
                first = adapter.first_shown(started)
                token = model.first_token_at[-1]
                rows.append({
                    "first_text_s": (wall_to_monotonic(first) - token) if first else None,
                    "preview_calls": len(adapter.preview_calls()) - before_calls,
                    "429s": adapter.fake.throttled - throttled})
    lag = [r["first_text_s"] for r in rows if r["first_text_s"] is not None]
    calls = [r["preview_calls"] for r in rows]
    return {"scenario": scenario.name, "answers": answers, "words": words, "rate": rate,
            "first_text_median_s": statistics.median(lag) if lag else None,
            "first_text_max_s": max(lag) if lag else None,
            "preview_calls_median": statistics.median(calls),
            "preview_calls_max": max(calls),
            "429s": sum(r["429s"] for r in rows)}


async def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    chosen = [s for s in SCENARIOS if not args.only or s.platform in args.only.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        for index, scenario in enumerate(chosen):
            results.append(await run_scenario(scenario, answers=args.answers,
                                              words=args.words, rate=args.rate,
                                              pause=args.pause,
                                              home=Path(tmp) / f"home-{index}"))
    return results


def table(results: list[dict[str, Any]]) -> str:
    head = ("scenario", "first text, median", "max", "preview calls, median", "max", "429s")
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in results:
        lag = r["first_text_median_s"]
        top = r["first_text_max_s"]
        lines.append(" | ".join([
            r["scenario"], f"{lag * 1000:.0f} ms" if lag is not None else "-",
            f"{top * 1000:.0f} ms" if top is not None else "-",
            f"{r['preview_calls_median']:g}", f"{r['preview_calls_max']:g}", str(r["429s"])]))
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=int, default=5, help="answers per scenario")
    parser.add_argument("--words", type=int, default=120, help="words (tokens) an answer")
    parser.add_argument("--rate", type=float, default=30.0, help="tokens a second")
    parser.add_argument("--pause", type=float, default=1.5,
                        help="seconds between an answer and the next message")
    parser.add_argument("--only", default="", help="telegram, slack, or both (a,b)")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    out = anyio.run(main, options)
    print(json.dumps(out, indent=2) if options.json else table(out))
    with contextlib.suppress(Exception):
        sys.stdout.flush()
