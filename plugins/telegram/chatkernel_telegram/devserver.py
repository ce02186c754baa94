"""The fake Bot API as a server, to try a bot offline: ``python -m chatkernel_telegram.devserver``.

Its routes are :meth:`FakeBotAPI.developer_routes`, its first line and config snippet
:meth:`FakeBotAPI.developer_info` and :meth:`FakeBotAPI.config_snippet`; they and its
options are in docs/channels/telegram.md, "Developing offline".
"""

from __future__ import annotations

from chatkernel.testing.devserver import DevServer
from chatkernel_telegram.fake import FakeBotAPI

server = DevServer(
    prog="python -m chatkernel_telegram.devserver", port=8081,
    description="Run the fake Bot API as a server, to develop and try a bot offline.",
    platform=lambda args: FakeBotAPI(token=args.token, username=args.username,
                                     strict_chats=not args.any_chat),
    options={"--token": {"default": "123456:DEVSERVER-offline-token"},
             "--username": {"default": "chatkernel_dev_bot"},
             "--any-chat": {"action": "store_true",
                            "help": "take sends to any chat id (the Bot API answers 400 chat "
                                    "not found for a chat nobody wrote from)"}})
main = server.main

if __name__ == "__main__":
    main()
