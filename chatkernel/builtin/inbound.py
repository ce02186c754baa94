"""Built-in ``inbound_accept``: the account's access policy (docs/access.md), decided in
chatkernel.core.inbound.access from its config: ``allow_from``, ``dm_policy`` (pairing
by default), ``group_policy``, ``require_mention`` and ``group_allow_from``."""

from chatkernel.core.inbound.access import decide
from chatkernel.hookspecs import hookimpl


@hookimpl(trylast=True)
def inbound_accept(message, account):
    return decide(account.config, message)
