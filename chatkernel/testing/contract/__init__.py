"""The channel contract: one test suite every channel plugin runs against its own fake.

A channel plugin proves it behaves like every other channel by running this
suite, unchanged, against its protocol-faithful fake platform server. The
plugin's tests implement a :class:`PlatformAdapter` (how to start the fake,
make a user write to the bot, and read what the bot sent) and subclass
:class:`ChannelContract`::

    from chatkernel.testing.contract import ChannelContract, PlatformAdapter

    class MyAdapter(PlatformAdapter):
        channel_plugin = chatkernel_mychat      # the plugin object (often the module)
        channel_name = "mychat"
        supports_threads = False                # declare what the platform lacks
        ...

    class TestMyChatContract(ChannelContract):
        adapter_class = MyAdapter

Each contract test runs a real in-process kernel
(:class:`chatkernel.testing.memory.KernelHarness`) with the plugin's channel
configured from :meth:`PlatformAdapter.account_config`, a scripted agent, the
queue in ``followup`` mode without debounce, and the channel's receive loop
(``transport.run(deliver)``, ``deliver`` being the kernel's receiver, as a gateway
hands it) running against the fake, the gateway's HTTP server serving the
channel's webhook routes. Optional platform features are capabilities: a test
about a feature is skipped only when the adapter declares the capability absent
(``supports_<feature> = False``). See ``docs/testing.md``.
"""

from chatkernel.testing.contract.adapter import ACCOUNT, PlatformAdapter, fast_pacing
from chatkernel.testing.contract.run import (
    ContractReceiver,
    ContractRun,
    open_contract_run,
    wait_until,
)
from chatkernel.testing.contract.suite import ChannelContract, long_text, needs, png_bytes

__all__ = ["ACCOUNT", "ChannelContract", "ContractReceiver", "ContractRun", "PlatformAdapter",
           "fast_pacing", "long_text", "needs", "open_contract_run", "png_bytes", "wait_until"]
