"""Built-in ``outbound_send``: hand the payload to the account's channel."""

from chatkernel.hookspecs import hookimpl


@hookimpl(trylast=True)
def outbound_send(account, route, payload):
    if account.channel is None:
        raise RuntimeError(f"account {account.key} is not running: nothing can send for it")
    return account.channel.send(route, payload)
