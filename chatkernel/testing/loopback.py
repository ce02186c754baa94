"""The kit's loopback channel and platform, for end-to-end and crash tests.

They are the sample channel (:mod:`chatkernel.testing.sample`: the plugin template's
polling channel and its fake platform, the same files) plus only what the kernel's
tests need. :class:`LoopbackPlatform` is a real HTTP server on 127.0.0.1 speaking the
sample protocol (documented in :mod:`chatkernel.testing.sample.fake`): updates are
kept until a later poll confirms them with ``offset``, so a client that crashes before
confirming gets them again; sends are recorded in order, with injectable failures (429
with ``retry_after``, 5xx, dropped connections, an answer held back) and deduped by
their idempotency key, as Matrix dedupes by ``txnId``. :class:`LoopbackChannel` is the
sample channel named ``loopback``, with tighter limits and backoff; an account with
``idempotent_sends = true`` declares its sends idempotent.

``python -m chatkernel.testing.loopback --platform URL [--idempotent-sends]``
runs the real gateway with the loopback channel (``CHATKERNEL_HOME`` as usual):
the crash tests kill that process.
"""

from __future__ import annotations

import argparse
import dataclasses

import anyio
from pydantic import Field

from chatkernel.channels import ChannelLimits, RateLimit, hookimpl
from chatkernel.testing.sample.channel import SampleAccount, SampleChannel, SamplePolling
from chatkernel.testing.sample.fake import SENDS, SamplePlatform, SentMessage

__all__ = ["SENDS", "LoopbackAccount", "LoopbackChannel", "LoopbackPlatform",
           "LoopbackPlugin", "LoopbackPolling", "SentMessage"]

#: The token both sides use unless a test says otherwise.
TOKEN = "test-token"


class LoopbackPlatform(SamplePlatform):
    """The sample platform for the kernel's tests:
    ``async with LoopbackPlatform() as platform: platform.url``.

    Its chats take any pace the kernel sends at, its 429s ask for :attr:`retry_after`
    (fractions of a second, for fast tests), and :meth:`hold_next_answer` lets a crash
    test kill the gateway while a send is unanswered.
    """

    bot_id = "loopback-bot"
    sends_per_chat_second = 10_000  # the kernel's own pacing is what the tests watch

    def __init__(self, *, token: str = TOKEN, seed: int = 0) -> None:
        super().__init__(token=token, seed=seed)
        #: The ``retry_after`` a 429 from :meth:`fail_next` carries.
        self.retry_after: float = 1

    @property
    def url(self) -> str:
        """The platform's base URL (the account's ``base_url``)."""
        return self.base_url

    @property
    def sent(self) -> list[SentMessage]:
        """Every message the bot sent, in order."""
        return self.sent_messages

    @property
    def send_latency(self) -> float:
        """Seconds each call takes (a network round trip), so a crash can hit a send
        mid-way."""
        return self.latency

    @send_latency.setter
    def send_latency(self, seconds: float) -> None:
        self.latency = seconds

    def fail_next(self, *failures: int | str, retry_after: float | None = None) -> None:
        """As the sample's, a 429 asking for :attr:`retry_after` unless told otherwise."""
        super().fail_next(*failures, retry_after=self.retry_after if retry_after is None
                          else retry_after)

    def hold_next_answer(self) -> None:
        """The next send takes effect (it is in :attr:`sent`) and its answer is held
        back until :meth:`release` or the platform closes: a crash test kills the
        gateway exactly while a send it made is unanswered."""
        self.faults.stall(SENDS)


class LoopbackAccount(SampleAccount):
    token: str = Field(default=TOKEN, min_length=1)
    allow_from: list[str] = Field(default_factory=lambda: ["*"])
    poll_timeout: float = Field(default=1.0, gt=0)
    #: Declare the sends idempotent (``Capabilities.idempotent_sends``): the platform
    #: dedupes them by ``idempotency_key`` either way; this tells the kernel it may
    #: repeat a send whose answer was lost.
    idempotent_sends: bool = False


class LoopbackChannel(SampleChannel):
    """The sample channel as ``loopback``, for :class:`LoopbackPlatform`: limits and a
    backoff short enough for tests, and idempotent sends an account's choice."""

    name = "loopback"
    account_model = LoopbackAccount
    limits = ChannelLimits(text_limit=1000, rates={"chat": RateLimit(100, 1.0)},
                           media_kinds={".png": "image", ".jpg": "image", ".ogg": "voice"},
                           retry_base_delay=0.05)
    config_example = ""  # a test kit channel: not in the starter file

    def __init__(self, account, context=None) -> None:
        super().__init__(account, context)
        # Per account, so one test kit channel serves both kinds of platform.
        self.capabilities = dataclasses.replace(
            SampleChannel.capabilities, idempotent_sends=self.config.idempotent_sends)

    def transport(self) -> "LoopbackPolling":
        return LoopbackPolling(self)


class LoopbackPolling(SamplePolling):
    """The sample's long poll, retried soon after a failure."""

    channel: LoopbackChannel
    backoff = (0.05, 1.0)


class LoopbackPlugin:
    """Registers :class:`LoopbackChannel`."""

    @staticmethod
    @hookimpl
    def register_channels(register):
        register(LoopbackChannel)


def main() -> None:
    """Run the real gateway with the loopback channel (for crash tests)."""
    from chatkernel.core import config as cfg
    from chatkernel.core import logs
    from chatkernel.core.gateway.process import run_gateway
    from chatkernel.core.plugins import PluginManager

    parser = argparse.ArgumentParser()
    parser.add_argument("--platform", required=True, help="the LoopbackPlatform's URL")
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("--idempotent-sends", action="store_true",
                        help="declare the loopback account's sends idempotent")
    args = parser.parse_args()
    config = cfg.parse({
        "gateway": {"listen": args.listen},
        "queue": {"debounce_ms": 0, "mode": "followup"},
        "channels": {"loopback": {"accounts": {"main": {
            "base_url": args.platform, "poll_timeout": 0.5,
            "idempotent_sends": args.idempotent_sends}}}},
    })
    logs.configure("text", "info")
    pm = PluginManager()
    pm.load(only=[])
    pm.register(LoopbackPlugin, name="chatkernel.testing.loopback")
    anyio.run(lambda: run_gateway(config, pm=pm))


if __name__ == "__main__":
    main()
