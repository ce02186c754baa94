"""The channel kit: what a channel plugin builds on.

Plugins import it through :mod:`chatkernel.channels`; this package imports nothing of the kernel,
the gateway or a store (a test checks).
"""
