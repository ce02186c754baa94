"""The fake iLink gateway (API and CDN) as a server: ``python -m chatkernel_wechat.devserver``.

Its routes are :meth:`FakeILink.developer_routes`, its first line and config snippet
:meth:`FakeILink.developer_info` and :meth:`FakeILink.config_snippet`; they and the way to
log in against it are in docs/channels/wechat.md, "Developing offline".
"""

from __future__ import annotations

from chatkernel.testing.devserver import DevServer
from chatkernel_wechat.fake import FakeILink

server = DevServer(
    prog="python -m chatkernel_wechat.devserver", port=8084,
    description="Run the fake iLink gateway (API and CDN) as a server, to try the channel "
                "offline.",
    platform=lambda args: FakeILink(poll_timeout_ms=30_000))
main = server.main

if __name__ == "__main__":
    main()
