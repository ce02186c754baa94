"""chatkernel-wechat: the WeChat channel (Tencent's iLink personal-bot gateway).

Importing this module is cheap: the channel, its HTTP client and the login flow
load only when the kernel asks for them.
"""

from chatkernel import hookimpl

__version__ = "0.1.0"


@hookimpl
def register_channels(register):
    from chatkernel_wechat.channel import WeChatChannel

    register(WeChatChannel)


@hookimpl
def register_logins(register):
    from chatkernel_wechat.login import WeChatLogin

    register(WeChatLogin())
