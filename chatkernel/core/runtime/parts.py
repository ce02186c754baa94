"""What the gateway process adds around its kernel, and owns.

A kernel runs in a gateway (``chatkernel run``) or in-process (a CLI command, the test
kit). Two things exist only in a gateway, and only some time after the kernel is built:
the URL its HTTP server listens at (once bound) and the config reloader (once the receive
loops run). The gateway makes a :class:`GatewayParts` before the kernel, hands it to the
kernel at construction and fills it as its parts come up; the components that care read
it when they need it (the cluster's registration and the control API are given it, the
health snapshot asks its port). An in-process kernel gets an empty one: no URL, no reloader.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chatkernel.core.runtime.reload import ConfigReloader


@dataclass(slots=True)
class GatewayParts:
    """The gateway's own parts a kernel's components read (None: not there, or not yet)."""

    #: The gateway's base URL once its HTTP server listens.
    url: str | None = None
    #: What ``chatkernel reload`` and SIGHUP run, once the receive loops run.
    reloader: "ConfigReloader | None" = None
