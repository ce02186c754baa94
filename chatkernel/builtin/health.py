"""Built-in ``health_probe``: ask the account's channel to probe its platform."""

from chatkernel.hookspecs import hookimpl


@hookimpl(trylast=True)
def health_probe(account):
    if account.channel is None:
        return None
    return account.channel.probe()
