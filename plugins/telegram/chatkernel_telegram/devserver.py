"""The fake Bot API as a server, to try a bot offline: ``python -m chatkernel_telegram.devserver``.

Its routes are :meth:`FakeBotAPI.developer_routes`; they, its options and its config
snippet are in docs/channels/telegram.md, "Developing offline".
"""

from __future__ import annotations

from chatkernel.testing.devserver import DevServer
from chatkernel_telegram.fake import FakeBotAPI

SNIPPET = """# the fake Bot API is up; point an account at it:
#   export TELEGRAM_BOT_TOKEN={api.token}
[channels.telegram.accounts.main]
bot_token = "${{TELEGRAM_BOT_TOKEN}}"
api_base = "{api.base_url}"
allow_from = ["*"]
# then write as a user:
#   curl -d '{{"chat_id": 42, "text": "hello"}}' {api.base_url}/_fake/messages
#   curl '{api.base_url}/_fake/sent?chat_id=42&wait=10'"""

server = DevServer(
    prog="python -m chatkernel_telegram.devserver", port=8081,
    description="Run the fake Bot API as a server, to develop and try a bot offline.",
    platform=lambda args: FakeBotAPI(token=args.token, username=args.username,
                                     strict_chats=not args.any_chat),
    announce=lambda api, args: {"base_url": api.base_url, "token": api.token},
    snippet=lambda api, args: SNIPPET.format(api=api),
    options={"--token": {"default": "123456:DEVSERVER-offline-token"},
             "--username": {"default": "chatkernel_dev_bot"},
             "--any-chat": {"action": "store_true",
                            "help": "take sends to any chat id (the Bot API answers 400 chat "
                                    "not found for a chat nobody wrote from)"}})
main = server.main

if __name__ == "__main__":
    main()
