"""The kernel's channel contract suite, run unchanged against the fake Bot API: once
long polling (the default), once with a webhook on the gateway."""

from __future__ import annotations

from typing import Any

from chatkernel.testing import ChannelContract
from telegram_adapters import TelegramAdapter


class TelegramWebhookAdapter(TelegramAdapter):
    """The same, in webhook mode: the channel registers the gateway's URL with setWebhook
    as it starts, and the fake POSTs each update there with the secret token."""

    SECRET = "contract_Secret-token"

    def __init__(self) -> None:
        super().__init__()
        self.gateway = ""
        # Telegram keeps retrying for hours; a restart here takes well under the ~10 s
        # these add up to, so an update sent while no gateway listens arrives after it.
        self.api.webhook_retry_delays = (0.05, 0.1, 0.2) + (0.25,) * 40

    async def attach_gateway(self, url: str) -> None:
        self.gateway = url  # a new address for every kernel start

    def account_config(self) -> dict[str, Any]:
        return {**super().account_config(), "mode": "webhook",
                "webhook_url": f"{self.gateway}/telegram/main/webhook",
                "secret_token": self.SECRET}


class TestTelegramContract(ChannelContract):
    adapter_class = TelegramAdapter


class TestTelegramWebhookContract(ChannelContract):
    adapter_class = TelegramWebhookAdapter

    async def test_updates_arrive_through_the_webhook_with_the_secret(self, contract_kernel):
        run = contract_kernel
        api = run.adapter.api
        await run.adapter.inject("1001", "hello wh01z", sender_id="1001")
        await run.wait_for_tokens("1001", ["wh01z"])
        assert api.webhook_info()["url"].endswith("/telegram/main/webhook")
        assert api.calls_to("getUpdates") == []
        delivered = [d for d in api.webhook_deliveries if d.ok]
        assert delivered and all(d.secret_token == self.adapter_class.SECRET
                                 for d in delivered)
