"""The fake Graph API as a server, to try a WhatsApp bot offline: ``python -m
chatkernel_whatsapp.devserver`` (docs/channels/whatsapp.md, "Developing offline"; its
routes: FakeGraph.developer_routes)."""

from __future__ import annotations

from chatkernel.testing.devserver import DevServer
from chatkernel_whatsapp.fake import DEFAULT_TOKEN, FakeGraph

SNIPPET = """# the fake Graph API is up; point an account at it:
#   export WHATSAPP_TOKEN={g.token}
#   export WHATSAPP_APP_SECRET={g.app_secret}
#   export WHATSAPP_VERIFY_TOKEN={g.verify_token}
[channels.whatsapp.accounts.main]
access_token = "${{WHATSAPP_TOKEN}}"
phone_number_id = "{g.phone_number_id}"
app_secret = "${{WHATSAPP_APP_SECRET}}"
verify_token = "${{WHATSAPP_VERIFY_TOKEN}}"
api_base = "{g.base_url}"
allow_from = ["*"]
# start chatkernel run, then subscribe its webhook and write as a user:
#   curl -d '{{"url": "http://127.0.0.1:8787/whatsapp/main/webhook"}}' {g.base_url}/_fake/subscribe
#   curl -d '{{"from": "15551234567", "text": "hello"}}' {g.base_url}/_fake/messages
#   curl '{g.base_url}/_fake/sent?to=15551234567&wait=10'"""



server = DevServer(
    prog="python -m chatkernel_whatsapp.devserver", port=8082,
    description="Run the fake Graph API as a server, to develop and try a WhatsApp bot offline.",
    platform=lambda args: FakeGraph(
        token=args.token, app_secret=args.app_secret, verify_token=args.verify_token,
        webhook_workers=args.workers, statuses=not args.no_statuses),
    announce=lambda g, args: {"base_url": g.base_url, "token": g.token,
                              "phone_number_id": g.phone_number_id,
                              "app_secret": g.app_secret, "verify_token": g.verify_token},
    snippet=lambda g, args: SNIPPET.format(g=g),
    options={"--token": {"default": DEFAULT_TOKEN}, "--app-secret": {"default": "fake-app-secret"},
             "--verify-token": {"default": "fake-verify-token"},
             "--workers": {"type": int, "default": 1,
                           "help": "notifications posted at a time (in order per user)"},
             "--no-statuses": {"action": "store_true",
                               "help": "post no sent/delivered statuses after sends"}})
main = server.main

if __name__ == "__main__":
    main()
