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
