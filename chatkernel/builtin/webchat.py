"""Built-in channel: the web chat served by the gateway (the embedded default)."""

from chatkernel.hookspecs import hookimpl


@hookimpl(trylast=True)
def register_channels(register):
    from chatkernel.webchat.channel import WebChatChannel  # aiohttp: only when needed

    register(WebChatChannel)
