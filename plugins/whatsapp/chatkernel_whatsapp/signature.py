"""Meta's webhook signature (the WhatsApp Cloud API): how the channel verifies what Meta
posts, and answers its subscription handshake.

Every POST carries ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256(app_secret, raw
body)>``, over the bytes exactly as sent (a re-serialised body no longer matches);
the GET handshake sends ``hub.mode=subscribe`` and the ``hub.verify_token`` set in the
app's dashboard, and expects ``hub.challenge`` back.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from chatkernel.channels import HmacSignature, WebhookRejected

__all__ = ["SIGNATURE_HEADER", "MetaSignature"]

SIGNATURE_HEADER = "X-Hub-Signature-256"


class MetaSignature(HmacSignature):
    """The verifier of an app's secret and its webhook's verify token."""

    def __init__(self, app_secret: str, verify_token: str) -> None:
        if not app_secret or not verify_token:
            raise ValueError("an app secret and a verify token are both needed")
        super().__init__(app_secret, header=SIGNATURE_HEADER, prefix="sha256=",
                         wrong_status=403)
        self._verify_token = verify_token

    def handshake(self, query: Mapping[str, str]) -> str:
        if query.get("hub.mode") != "subscribe":
            raise WebhookRejected(403, "hub.mode must be subscribe")
        # Constant time, as the signature: the token is a shared secret too.
        given = query.get("hub.verify_token", "").encode("utf-8", "surrogatepass")
        if not hmac.compare_digest(given, self._verify_token.encode("utf-8", "surrogatepass")):
            raise WebhookRejected(403, "wrong hub.verify_token")
        return query.get("hub.challenge", "")
