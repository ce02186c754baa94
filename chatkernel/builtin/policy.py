"""Built-in ``media_path_allowed``: the default media-path policy (docs/hooks.md,
``media_path_allowed``)."""

from chatkernel.core.outbound.policy import default_media_policy
from chatkernel.hookspecs import hookimpl


@hookimpl(trylast=True)
def media_path_allowed(path, workspace, access_level):
    return default_media_policy(path, workspace, access_level)
