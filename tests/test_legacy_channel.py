"""A channel written against the earlier contract still works, with warnings naming
each replacement (chatkernel.sdk.legacy; the upgrade table in docs/writing-a-channel.md).

The loopback channel as it was — receive methods on the channel, ``self.poll_forever``,
a capability set per instance — kept as it was written but for the wire (the loopback
platform speaks the sample protocol now: a bearer token, ``event_id``, errors with
``error`` and ``retry_after``), runs the whole contract suite against the loopback
platform, as a plugin nobody has upgraded would."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from pydantic import Field

from chatkernel.channels import (
    AccountConfig,
    Channel,
    ChannelLimits,
    Deliver,
    HttpClient,
    InboundMessage,
    OutboundPayload,
    PlatformError,
    Polled,
    Polling,
    ProbeResult,
    RateLimit,
    Route,
    SendResult,
    hookimpl,
)
from chatkernel.sdk.models import Account
from chatkernel.testing.contract import ChannelContract
from chatkernel.testing.loopback import LoopbackChannel
from chatkernel.testing.loopback.contract import LoopbackAdapter


def define_old_channel() -> type[Channel]:
    """The class statement of the channel as it was (it warns as it runs)."""

    class OldLoopbackAccount(AccountConfig):
        base_url: str
        token: str = "test-token"
        allow_from: list[str] = Field(default_factory=lambda: ["*"])
        poll_timeout: float = 1.0
        #: Declare the sends idempotent (``Channel.idempotent_sends``): the platform
        #: dedupes them by ``idempotency_key`` either way; this tells the kernel it may
        #: repeat a send whose answer was lost.
        idempotent_sends: bool = False


    class OldLoopbackChannel(Channel):
        """The loopback channel as it was written against the earlier contract."""

        name = "old_loopback"
        account_model = OldLoopbackAccount
        limits = ChannelLimits(text_limit=1000, rates={"chat": RateLimit(100, 1.0)},
                               media_kinds={".png": "image", ".jpg": "image", ".ogg": "voice"},
                               retry_base_delay=0.05)
        receive_backoff = (0.05, 1.0)

        def __init__(self, account, settings=None) -> None:
            super().__init__(account, settings)
            self.http = HttpClient(self.config.base_url, timeout=self.config.poll_timeout + 10,
                                   headers={"Authorization": f"Bearer {self.config.token}"},
                                   platform="the loopback platform")
            # Per account, so one test kit channel serves both kinds of platform.
            self.idempotent_sends = self.config.idempotent_sends  # type: ignore[misc]

        async def run(self, deliver: Deliver) -> None:
            await self.poll_forever(deliver)

        async def identify(self) -> None:
            self.self_id = str((await self._call("GET", "/me"))["id"])

        async def poll(self, cursor: str | None) -> Polled:
            updates = await self._call("GET", "/updates", long_poll=True, params={
                "offset": cursor or "0", "timeout": str(self.config.poll_timeout)})
            last = max((update["event_id"] for update in updates), default=None)
            return Polled(updates, None if last is None else str(last + 1))

        def event_chat(self, update: dict[str, Any]) -> str:
            return update["chat_id"]

        async def normalize(self, update: dict[str, Any]) -> InboundMessage:
            return InboundMessage(
                channel=self.name, account=self.account.name,
                chat_id=update["chat_id"], message_id=update["message_id"],
                sender_id=update["sender_id"], text=update["text"],
                sender_name=update.get("sender_name", ""), is_group=update.get("is_group", False),
                mentions_bot=update.get("mentions_bot", False), thread_id=update.get("thread_id"))

        async def send(self, route: Route, payload: OutboundPayload) -> SendResult:
            fields = {"chat_id": route.chat_id, "thread_id": route.thread_id,
                      "idempotency_key": payload.key}
            try:
                if payload.is_media:
                    result = await self._call("POST", "/send_media", files={
                        "file": payload.media_path}, data={
                        **fields, "kind": payload.media_kind or "document",
                        "caption": payload.caption})
                else:
                    result = await self._call("POST", "/send", json={
                        **{k: v for k, v in fields.items() if v}, "text": payload.text})
            except PlatformError as exc:
                raise exc.send_error() from None
            return SendResult(message_id=str(result["message_id"]))

        async def indicate(self, route: Route) -> None:
            await self._call("POST", "/typing", json={"chat_id": route.chat_id})

        async def probe(self) -> ProbeResult:
            try:
                await self._call("GET", "/me")
            except PlatformError as exc:
                return ProbeResult(ok=False, detail=f"credentials rejected ({exc.status})"
                                   if exc.status == 401 else str(exc))
            return ProbeResult(ok=True, detail="loopback platform")

        async def _call(self, method: str, path: str, **options: Any) -> Any:
            """The platform's answer ``{"ok": true, "result": ...}``, or a PlatformError."""
            answer = await self.http.request(method, path, **options)
            body = answer.json()
            if not isinstance(body, dict) or not body.get("ok"):
                body = body if isinstance(body, dict) else {}
                raise PlatformError.from_answer(
                    answer, str(body.get("description", "error")), code=body.get("error"),
                    retry_after=body.get("retry_after"))
            return body["result"]

        async def aclose(self) -> None:
            await self.http.close()

    return OldLoopbackChannel


with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    OldLoopbackChannel = define_old_channel()


class OldLoopbackPlugin:
    @staticmethod
    @hookimpl
    def register_channels(register):
        register(OldLoopbackChannel)


class OldLoopbackAdapter(LoopbackAdapter):
    channel_plugin = OldLoopbackPlugin
    channel_name = "old_loopback"
    # What the channel as it was never read: events of other kinds, a chat's refusal.
    supports_non_message_events = False
    supports_chat_refusal = False


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
class TestOldLoopbackContract(ChannelContract):
    adapter_class = OldLoopbackAdapter


def test_defining_an_old_channel_warns_with_each_replacement():
    with pytest.warns(DeprecationWarning) as caught:
        define_old_channel()
    said = " | ".join(str(w.message) for w in caught)
    assert "receive_backoff is deprecated: set Transport.backoff" in said
    assert "event_chat, poll, run on the channel are deprecated: return a transport" in said


def test_the_old_members_answer_from_their_new_places():
    account = Account("old_loopback", "main",
                      OldLoopbackChannel.account_model(base_url="http://127.0.0.1:9"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        channel: Any = OldLoopbackChannel(account)
        transport = channel.transport()
        assert isinstance(transport, Polling)  # the adapter: its loops are the kit's
        assert transport is channel.transport()  # one per channel: webhooks reach the loop
        assert transport.backoff == (0.05, 1.0)
        assert channel.capabilities.idempotent_sends is False  # set in __init__, translated
        assert channel.settings is None and channel.shares_store is False
        assert channel.config_key("base_url") == "channels.old_loopback.accounts.main.base_url"
        assert channel.is_quiet() is False
    said = " | ".join(str(w.message) for w in caught)
    for replacement in ("self.capabilities = dataclasses.replace", "self.context.settings",
                        "self.context.shares_store", "self.account.config_key",
                        "the channel's transport() has it"):
        assert replacement in said, replacement
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        channel.nonsense  # noqa: B018 - an unknown name is still an AttributeError


def test_the_current_contract_is_small():
    public = sorted(name for name in dir(Channel) if not name.startswith("_"))
    assert len(public) + len(("name", "account", "context", "self_id")) <= 21, public


def test_a_current_channel_warns_nothing(recwarn):
    account = Account("loopback", "main",
                      LoopbackChannel.account_model(base_url="http://127.0.0.1:9"))
    LoopbackChannel(account).transport()
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]
