"""The kernel's channel contract suite, run unchanged against the fake iLink gateway."""

from chatkernel.testing import ChannelContract
from chatkernel_wechat.contract import WeChatAdapter


class TestWeChatContract(ChannelContract):
    adapter_class = WeChatAdapter
