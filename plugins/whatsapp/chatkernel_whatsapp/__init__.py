"""chatkernel-whatsapp: the WhatsApp channel (the WhatsApp Business Cloud API).

Importing this module is cheap: the channel and its HTTP client load only when the
kernel asks for channels (or reads a WhatsApp message).
"""

from chatkernel import hookimpl

__version__ = "0.1.0"


@hookimpl
def register_channels(register):
    from chatkernel_whatsapp.channel import WhatsAppChannel

    register(WhatsAppChannel)


@hookimpl
def register_markups(register):
    from chatkernel_whatsapp.markup import WhatsAppText

    register(WhatsAppText)


#: The reason the kernel's built-in allowlist refuses a sender with (chatkernel.builtin).
NOT_LISTED = "sender not on the allowlist"


@hookimpl(wrapper=True)
def inbound_accept(message, account):
    """An allowlist may name any of a WhatsApp user's ids: their phone number or a BSUID,
    the current or an earlier one. The sender id is the chat's stable id; where the
    built-in allowlist refuses it while the list names another id of the same user, they
    are admitted. Every other policy's answer stands."""
    verdict = yield
    if verdict is None or verdict or verdict.reason != NOT_LISTED \
            or message.channel != "whatsapp" or message.is_group:
        return verdict
    channel = account.channel
    allowed = set(getattr(account.config, "allow_from", ()) or ())
    if hasattr(channel, "user_ids") and allowed & channel.user_ids(message):
        from chatkernel import Verdict

        return Verdict.allow()
    return verdict
