"""{{ cookiecutter.description }}.

The kernel finds this module through the ``chatkernel`` entry point and calls its
hooks. It stays light: the channel's module (aiohttp, pydantic) is imported only
when the kernel asks for channels, so ``chatkernel plugins`` stays fast.
"""

from chatkernel import hookimpl


@hookimpl
def register_channels(register):
    """Register the {{ cookiecutter.channel_name }} channel."""
    from {{ cookiecutter.__package_name }}.channel import {{ cookiecutter.__class_prefix }}Channel

    register({{ cookiecutter.__class_prefix }}Channel)
