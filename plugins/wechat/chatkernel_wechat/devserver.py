"""The fake iLink gateway (API and CDN) as a server: ``python -m chatkernel_wechat.devserver``.

Its routes are :meth:`FakeILink.developer_routes`; they and the way to log in against
it are in docs/channels/wechat.md, "Developing offline".
"""

from __future__ import annotations

from chatkernel.testing.devserver import DevServer
from chatkernel_wechat.fake import FakeILink

SNIPPET = """# the fake iLink gateway is up; log in against it:
#   chatkernel login wechat --api-base {i.base_url}
#   curl -d '{{"status": "confirmed"}}' '{i.base_url}/_fake/qr?wait=10'
# or use the bot token {i.token!r} with api_base = "{i.base_url}";
# then set cdn_base = "{i.cdn_base}" and allow_from = ["*"] on the account, and write:
#   curl -d '{{"user": "u1@im.wechat", "text": "hello"}}' {i.base_url}/_fake/messages"""

server = DevServer(
    prog="python -m chatkernel_wechat.devserver", port=8082,
    description="Run the fake iLink gateway (API and CDN) as a server, to try the channel "
                "offline.",
    platform=lambda args: FakeILink(poll_timeout_ms=30_000),
    announce=lambda i, args: {"base_url": i.base_url, "cdn_base": i.cdn_base, "token": i.token},
    snippet=lambda i, args: SNIPPET.format(i=i))
main = server.main

if __name__ == "__main__":
    main()
