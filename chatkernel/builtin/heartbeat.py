"""Built-in ``heartbeat_visibility``: the defaults every channel starts from."""

from chatkernel.hookspecs import hookimpl

DEFAULT_VISIBILITY = {"show_ok": False, "show_alerts": True, "use_indicator": True}


@hookimpl(trylast=True)
def heartbeat_visibility():
    # trylast: the built-in defaults are merged first, so every plugin's
    # defaults override them (see chatkernel.core.heartbeat.scheduler).
    return dict(DEFAULT_VISIBILITY)
