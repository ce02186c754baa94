"""The control requests of ``chatkernel pairing``: what the gateway's
``/control/pairing/*`` routes answer (chatkernel.core.gateway.control), and a CLI
command asks directly of a kernel of its own when no gateway runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chatkernel.core.inbound.access import PairingError, approved_dict, request_dict
from chatkernel.core.runtime.control import ControlError, strings

if TYPE_CHECKING:
    from chatkernel.core.inbound.access import Pairing

#: How long an approval waits, at most, for its notice to the sender to go out.
NOTICE_WAIT_SECONDS = 15.0


class PairingControl:
    """Each request's fields checked, then done by the kernel's
    :class:`~chatkernel.core.inbound.access.Pairing`; a wrong or expired code, or an
    unknown sender, is a 404 naming it."""

    def __init__(self, pairing: Pairing) -> None:
        self._pairing = pairing

    async def list(self, body: dict[str, Any]) -> dict[str, Any]:
        """``chatkernel pairing list``: the pending requests."""
        channel = strings(body, "channel")["channel"]
        return {"requests": [request_dict(r) for r in await self._pairing.requests(channel)]}

    async def approve(self, body: dict[str, Any]) -> dict[str, Any]:
        """``chatkernel pairing approve``: admit the sender, and tell them in their chat."""
        fields = self._code(body)
        try:
            request, notice = await self._pairing.approve(
                fields["channel"], fields["code"], account=fields["account"],
                wait=NOTICE_WAIT_SECONDS)
        except PairingError as exc:
            raise ControlError(str(exc), 404) from None
        return {"approved": request_dict(request), "notice": notice}

    async def deny(self, body: dict[str, Any]) -> dict[str, Any]:
        """``chatkernel pairing deny``: drop the request."""
        fields = self._code(body)
        try:
            request = await self._pairing.deny(fields["channel"], fields["code"],
                                               account=fields["account"])
        except PairingError as exc:
            raise ControlError(str(exc), 404) from None
        return {"denied": request_dict(request)}

    async def allowed(self, body: dict[str, Any]) -> dict[str, Any]:
        """``chatkernel pairing allowed``: the senders approved by pairing."""
        channel = strings(body, "channel")["channel"]
        return {"allowed": [approved_dict(a) for a in await self._pairing.allowed(channel)]}

    async def revoke(self, body: dict[str, Any]) -> dict[str, Any]:
        """``chatkernel pairing revoke``: withdraw a sender's approval."""
        fields = strings(body, "channel", "sender", "account")
        if not fields["channel"] or not fields["sender"]:
            raise ControlError("'channel' and 'sender' are required")
        try:
            account = await self._pairing.revoke(fields["channel"], fields["sender"],
                                                 account=fields["account"])
        except PairingError as exc:
            raise ControlError(str(exc), 404) from None
        return {"revoked": {"channel": fields["channel"], "account": account,
                            "sender": fields["sender"]}}

    @staticmethod
    def _code(body: dict[str, Any]) -> dict[str, Any]:
        fields = strings(body, "channel", "code", "account")
        if not fields["channel"] or not fields["code"]:
            raise ControlError("'channel' and 'code' are required")
        return fields

    def routes(self) -> list[tuple[str, str, Any]]:
        """``(method, path, action)`` of each request, for the gateway's control routes."""
        return [("POST", f"/control/pairing/{name}", getattr(self, name))
                for name in ("list", "approve", "deny", "allowed", "revoke")]
