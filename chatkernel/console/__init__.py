"""The operator's console: a page at ``/ui/`` and its JSON API under ``/api/``, served by
the gateway behind its control token (docs/console.md).

``api`` builds the routes from the kernel's parts; ``auth`` checks the token (constant
time, wrong ones slowed down per client); ``events`` is the live stream (Server-Sent
Events); ``logbuffer`` keeps the gateway's recent log lines, redacted; ``logins`` runs a
channel's login flow (a QR code) for the page; ``static/`` is the page itself, plain
ES modules with no build step. The console stands on the core as the CLI does and
names no channel.
"""
