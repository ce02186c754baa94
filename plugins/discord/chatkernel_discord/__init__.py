"""Discord bots over the gateway websocket and the REST API.

The kernel finds this module through the ``chatkernel`` entry point and calls its
hooks. It stays light: the channel's module (aiohttp, pydantic) is imported only
when the kernel asks for channels, so ``chatkernel plugins`` stays fast.
"""

from chatkernel import hookimpl


@hookimpl
def register_channels(register):
    """Register the discord channel."""
    from chatkernel_discord.channel import DiscordChannel

    register(DiscordChannel)
