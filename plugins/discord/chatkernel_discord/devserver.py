"""The fake Discord as a server, to try the channel offline::

    python -m chatkernel_discord.devserver --port 8900

Its first line on stdout is JSON (``base_url``, ``api_base``, ``token``, ``bot_id``),
printed once it listens; the config snippet goes to stderr. Its developer routes
(``/_fake/*``), its first line and its snippet are the fake's
(:meth:`FakeDiscord.developer_routes`, ``developer_info``, ``config_snippet``); the runner
(``chatkernel.testing.devserver``) does the rest: ``--port``, ``--latency``,
``GET /_fake/ready``, signals.
"""

from __future__ import annotations

from chatkernel.testing.devserver import DevServer
from chatkernel_discord.fake import FakeDiscord

#: The dev server's bot token: fixed, so a guide can export it.
DEV_TOKEN = "MTAwMDAwMDAwMDAwMDAwMDAx.GfAkE1.DEVSERVER-offline-bot-token-000000000"

server = DevServer(
    prog="python -m chatkernel_discord.devserver", port=8900,
    description="Run the fake Discord (REST and gateway) as a server.",
    platform=lambda args: FakeDiscord(token=args.token),
    options={"--token": {"default": DEV_TOKEN, "help": "the bot's token"}})
main = server.main

if __name__ == "__main__":
    main()
