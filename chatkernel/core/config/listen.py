"""The gateway's listen address: its host and port, whether it is reachable from this
machine only, and whether the gateway may serve there with the config's control token."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from chatkernel.sdk.errors import ConfigError

if TYPE_CHECKING:
    from chatkernel.core.config.schema import KernelConfig


def is_loopback(address: str | None) -> bool:
    """Whether ``address`` is a loopback address (127.0.0.0/8, ::1, ::ffff:127.x)."""
    if not address:
        return False
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address.lower() == "localhost"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def parse_listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host.strip("[]"), int(port)


def is_loopback_host(host: str) -> bool:
    """Whether a listen host is reachable from this machine only."""
    return host.lower() == "localhost" or is_loopback(host)


def check_listen(config: KernelConfig, host: str, *, config_path=None) -> None:
    """Refuse to serve the control API beyond loopback without a token from the config."""
    if not is_loopback_host(host) and not config.gateway.control_token:
        raise ConfigError(
            f"the gateway would listen on {host or 'every address'}, beyond this machine, "
            "with a random control token: set gateway.control_token (a long random secret, "
            "e.g. \"${CHATKERNEL_CONTROL_TOKEN}\") so the control API, /metrics and /status "
            "need it, or listen on 127.0.0.1",
            path=config_path, key="gateway.control_token")
