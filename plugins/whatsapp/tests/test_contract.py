"""The kernel's channel contract suite, run unchanged against the fake Graph API, with
Meta's webhook posting (signed) to the gateway's route."""

from __future__ import annotations

from chatkernel.testing import ChannelContract
from chatkernel_whatsapp.testing import WhatsAppAdapter


class TestWhatsAppContract(ChannelContract):
    adapter_class = WhatsAppAdapter
