"""Built-in channel: the web chat served by the gateway (the embedded default), and its
``default`` account, which runs though the config names no channel."""

from chatkernel.hookspecs import hookimpl


@hookimpl(trylast=True)
def register_channels(register):
    from chatkernel.webchat.channel import WebChatChannel  # aiohttp: only when needed

    register(WebChatChannel)


@hookimpl(trylast=True)
def implied_accounts(config):
    from chatkernel.webchat.accounts import implied_accounts

    return implied_accounts(config)
