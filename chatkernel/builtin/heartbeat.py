"""Built-in ``heartbeat_visibility``: the defaults every channel starts from."""

from chatkernel.core.heartbeat.settings import DEFAULT_VISIBILITY
from chatkernel.hookspecs import hookimpl

__all__ = ["DEFAULT_VISIBILITY", "heartbeat_visibility"]


@hookimpl(trylast=True)
def heartbeat_visibility():
    # trylast: the built-in defaults are merged first, so every plugin's
    # defaults override them (see chatkernel.core.heartbeat.settings).
    return dict(DEFAULT_VISIBILITY)
