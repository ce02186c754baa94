"""Built-in ``outbound_send``: hand the payload to the account's channel.

Whatever transport failure the channel's ``send`` lets escape (a refused
connection, a reset, a timeout: aiohttp's or the socket's own) reaches the outbox
as the classified ``SendError`` it is (``chatkernel.sdk.http_client.classified``),
so an outage is waited out and a lost answer is "delivery unknown", whichever
errors the plugin itself catches.
"""

import inspect

from chatkernel.hookspecs import hookimpl


@hookimpl(trylast=True)
def outbound_send(account, route, payload):
    from chatkernel.sdk.http_client import classified

    channel = account.channel
    if channel is None:
        raise RuntimeError(f"account {account.key} is not running: nothing can send for it")
    platform = f"the {account.channel_name} platform"
    if payload.replaces is not None:
        # The final text of a live reply, in place of its preview (chatkernel.sdk.live).
        from chatkernel.sdk.live import LiveReplies

        if isinstance(channel, LiveReplies):
            return classified(channel.replace_preview(route, payload), platform=platform)
    sent = channel.send(route, payload)
    return classified(sent, platform=platform) if inspect.isawaitable(sent) else sent
