"""Built-in ``media_path_allowed``: the default policy of SPEC §5."""

from chatkernel.core.policy import default_media_policy
from chatkernel.hookspecs import hookimpl


@hookimpl(trylast=True)
def media_path_allowed(path, workspace, access_level):
    return default_media_policy(path, workspace, access_level)
