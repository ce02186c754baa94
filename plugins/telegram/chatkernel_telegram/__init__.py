"""chatkernel-telegram: the Telegram channel (Bot API).

Importing this module is cheap: the channel and its HTTP client load only when
the kernel asks for channels.
"""

from chatkernel import hookimpl

__version__ = "0.1.0"


@hookimpl
def register_channels(register):
    from chatkernel_telegram.channel import TelegramChannel

    register(TelegramChannel)


@hookimpl
def register_markups(register):
    from chatkernel_telegram.markup import TelegramHTML

    register(TelegramHTML)
