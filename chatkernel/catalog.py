"""What this project ships, as data: the built-in plugins, the channels they provide and
the channel distributions published beside the kernel.

The kernel reads these tables and knows no channel by name: a config error that names
an unknown channel suggests one of :data:`CHANNEL_DISTRIBUTIONS`, and a channel left out
by ``CHATKERNEL_DISABLE_PLUGINS`` is traced to its plugin through
:data:`BUILTIN_CHANNELS`. This module imports nothing.
"""

from __future__ import annotations

#: The kernel's default hook implementations, registered under these names, in this
#: order.
BUILTIN_PLUGINS: tuple[str, ...] = (
    "chatkernel.builtin.inbound",
    "chatkernel.builtin.outbound",
    "chatkernel.builtin.policy",
    "chatkernel.builtin.heartbeat",
    "chatkernel.builtin.health",
    "chatkernel.builtin.agents",
    "chatkernel.builtin.commands",
    "chatkernel.builtin.webchat",
    "chatkernel.builtin.landing",
)

#: The channels built-in plugins provide, and the plugin that provides each.
BUILTIN_CHANNELS: dict[str, str] = {"webchat": "chatkernel.builtin.webchat"}

#: The channels this project publishes as distributions of their own, and the
#: distribution of each. Only these are ever suggested for installing: naming a
#: package from whatever was typed would send a typo to whoever registered it.
CHANNEL_DISTRIBUTIONS: dict[str, str] = {
    "discord": "chatkernel-discord",
    "slack": "chatkernel-slack",
    "telegram": "chatkernel-telegram",
    "whatsapp": "chatkernel-whatsapp",
    "wechat": "chatkernel-wechat",
}
