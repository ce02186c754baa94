"""chatkernel-whatsapp: the WhatsApp channel (the WhatsApp Business Cloud API).

Importing this module is cheap: the channel and its HTTP client load only when the
kernel asks for channels (or reads a WhatsApp message).
"""

from chatkernel import Verdict, hookimpl

__version__ = "0.1.0"


@hookimpl
def register_channels(register):
    from chatkernel_whatsapp.channel import WhatsAppChannel

    register(WhatsAppChannel)


@hookimpl
def register_markups(register):
    from chatkernel_whatsapp.markup import WhatsAppText

    register(WhatsAppText)


@hookimpl
def inbound_accept(message, account):
    """A WhatsApp message older than the account's ``max_message_age_minutes`` is
    recorded (the journal has it, so a redelivery is still a duplicate) but not
    answered: Meta redelivers for days after an outage, and a week-old question
    answered as if it were new helps nobody. Anything else is for the next policy."""
    if message.channel != "whatsapp":
        return None
    from chatkernel_whatsapp.channel import log, stale_reason

    reason = stale_reason(message, account)
    if reason is None:
        return None
    log.warning("%s: message %s from %s not answered: %s", account.key, message.message_id,
                message.sender_id, reason)
    return Verdict.deny(reason)
