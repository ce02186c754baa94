"""Built-in ``outbound_send``: hand the payload to the account's channel."""

from chatkernel.hookspecs import hookimpl


@hookimpl(trylast=True)
def outbound_send(account, route, payload):
    channel = account.channel
    if channel is None:
        raise RuntimeError(f"account {account.key} is not running: nothing can send for it")
    if payload.replaces is not None:
        # The final text of a live reply, in place of its preview (chatkernel.sdk.live).
        from chatkernel.sdk.live import LiveReplies

        if isinstance(channel, LiveReplies):
            return channel.replace_preview(route, payload)
    return channel.send(route, payload)
