"""The fake Graph API as a server, to try a WhatsApp bot offline: ``python -m
chatkernel_whatsapp.devserver`` (docs/channels/whatsapp.md, "Developing offline"; its
routes: FakeGraph.developer_routes, its first line and config snippet:
FakeGraph.developer_info and config_snippet)."""

from __future__ import annotations

from chatkernel.testing.devserver import DevServer
from chatkernel_whatsapp.fake import DEFAULT_TOKEN, FakeGraph

server = DevServer(
    prog="python -m chatkernel_whatsapp.devserver", port=8083,
    description="Run the fake Graph API as a server, to develop and try a WhatsApp bot offline.",
    platform=lambda args: FakeGraph(
        token=args.token, app_secret=args.app_secret, verify_token=args.verify_token,
        webhook_workers=args.workers, statuses=not args.no_statuses),
    options={"--token": {"default": DEFAULT_TOKEN}, "--app-secret": {"default": "fake-app-secret"},
             "--verify-token": {"default": "fake-verify-token"},
             "--workers": {"type": int, "default": 1,
                           "help": "notifications posted at a time (in order per user)"},
             "--no-statuses": {"action": "store_true",
                               "help": "post no sent/delivered statuses after sends"}})
main = server.main

if __name__ == "__main__":
    main()
