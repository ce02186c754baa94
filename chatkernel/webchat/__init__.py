"""The built-in web chat channel (see :mod:`chatkernel.webchat.channel`)."""
