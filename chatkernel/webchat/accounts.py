"""The web chat's account when the config lists none: the channel a gateway serves
unless told otherwise. Imports no web framework (the CLI reads it cheaply)."""

from __future__ import annotations

from typing import Any

from chatkernel.core.config import listens_locally
from chatkernel.hookspecs import ConfigView

#: The built-in web chat's channel name.
WEBCHAT = "webchat"
#: The web chat's account that the page at ``/`` talks to.
WEBCHAT_ACCOUNT = "default"


def implied_accounts(config: ConfigView) -> dict[str, dict[str, dict[str, Any]]] | None:
    """The web chat keeps its ``default`` account unless the config gives it accounts of
    its own: configuring Telegram, or a web chat setting such as ``text_limit``, does not
    switch it off; ``[channels.webchat] enabled = false`` does. It admits everyone who
    reaches it, so a gateway listening beyond this machine serves it only when the config
    has a ``[channels.webchat]`` table."""
    if WEBCHAT in config.channels or listens_locally(config):
        return {WEBCHAT: {WEBCHAT_ACCOUNT: {}}}
    return None
