"""The fake discord platform as a server, to try the channel offline::

    python -m chatkernel_discord.devserver --port 8900

Its first line on stdout is JSON (``base_url``, ``token``), printed once it
listens; the config snippet goes to stderr. Its developer routes (``/_fake/*``), its
first line and its snippet are the fake's (:meth:`DiscordPlatform.developer_routes`,
``developer_info``, ``config_snippet``); the runner (``chatkernel.testing.devserver``)
does the rest: ``--port``, ``--latency``, ``GET /_fake/ready``, signals.
"""

from __future__ import annotations

from chatkernel.testing.devserver import DevServer
from chatkernel_discord.fake import DiscordPlatform

server = DevServer(
    prog="python -m chatkernel_discord.devserver", port=8900,
    description="Run the fake discord platform as a server.",
    platform=lambda args: DiscordPlatform(token=args.token),
    options={"--token": {"default": "dev-token"}})
main = server.main

if __name__ == "__main__":
    main()
