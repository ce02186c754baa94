"""The page at ``/`` when the web chat does not serve it: that the gateway runs, why its
web chat is off and how to turn it on, with links to ``/status`` and ``/healthz``. A
browser opening the gateway's address never meets a bare 404.
"""

from __future__ import annotations

import html
from collections.abc import Container

from chatkernel.hookspecs import AccountView, ChannelView, ConfigView
from chatkernel.webchat.accounts import WEBCHAT, WEBCHAT_ACCOUNT, implied_accounts


def webchat_off(config: ConfigView, installed: Container[str]) -> tuple[str, str]:
    """``(why, how to turn it on)``: why the web chat's page is not served, in words, for
    a config the gateway runs (``installed``: the channel types plugins provide)."""
    restart = "and restart the gateway"
    if WEBCHAT not in installed:
        return ("the built-in web chat plugin is not loaded (CHATKERNEL_DISABLE_PLUGINS "
                "names chatkernel.builtin.webchat)",
                f"take chatkernel.builtin.webchat out of CHATKERNEL_DISABLE_PLUGINS {restart}")
    section = config.channels.get(WEBCHAT)
    implied = (implied_accounts(config) or {}).get(WEBCHAT)
    if implied is not None and (section is None or not section.accounts):
        # What the gateway runs: the implied accounts count where the table lists none.
        section = ChannelView(enabled=True if section is None else section.enabled,
                              accounts={name: AccountView(table.get("enabled", True)
                                                          is not False)
                                        for name, table in implied.items()})
    listen = config.gateway.listen
    if section is None:  # not configured, and the gateway listens beyond this machine
        return (f"this gateway listens on {listen}, beyond this machine, and the web chat "
                "admits everyone who reaches it, so there it runs only when the config "
                "asks for it",
                "add a [channels.webchat] table to the config (and an allow_from list in "
                f"[channels.webchat.accounts.{WEBCHAT_ACCOUNT}] to say who may talk) "
                f"{restart}; or listen on 127.0.0.1")
    if not section.enabled:
        return ("the config turns it off: [channels.webchat] has enabled = false",
                f"remove that line (or set enabled = true) {restart}")
    account = section.accounts.get(WEBCHAT_ACCOUNT)
    if account is None:
        others = ", ".join(sorted(section.accounts))
        return (f"the config gives the web chat accounts of its own ({others}), none named "
                f"{WEBCHAT_ACCOUNT!r}, which the page at / talks to",
                f"add a [channels.webchat.accounts.{WEBCHAT_ACCOUNT}] table {restart}")
    if not account.enabled:
        return (f"the config turns it off: [channels.webchat.accounts.{WEBCHAT_ACCOUNT}] has "
                "enabled = false", f"remove that line (or set enabled = true) {restart}")
    return ("its account did not start (chatkernel status says why)",
            f"fix what chatkernel status names {restart}")


def render_landing_page(config: ConfigView, installed: Container[str], *,
                        loopback: bool) -> str:
    """The page itself: small, every value escaped, no script."""
    why, how = webchat_off(config, installed)
    status_note = "" if loopback else (
        " (it asks for the control token: this gateway listens beyond this machine)")
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>chatkernel: the web chat is off</title>
<style>
  body {{ font: 16px/1.5 system-ui, sans-serif; max-width: 40rem; margin: 3rem auto;
         padding: 0 1rem; color: #222; }}
  code {{ background: #f2f2f2; padding: 0 .25em; border-radius: 3px; }}
</style>
</head>
<body>
<h1>chatkernel is running</h1>
<p><strong>The web chat is off</strong>: {html.escape(why)}.</p>
<p>To turn it on, {html.escape(how)}.</p>
<p>The gateway itself is up: see <a href="/status">/status</a>{html.escape(status_note)}
for its channels and accounts, and <a href="/healthz">/healthz</a> for its health.</p>
</body>
</html>
"""
