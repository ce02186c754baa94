"""``chatkernel console``: the running gateway's console, its link with the token."""

from __future__ import annotations

import sys

import click

from chatkernel.cli import cli
from chatkernel.cli.options import _require_named_file, config_option
from chatkernel.cli.status import EXIT_UNREACHABLE


def console_url(url: str, token: str) -> str:
    """The console's address with the token in the fragment, which a browser never sends
    to a server (so no log or proxy sees it); an unspecified listen address (0.0.0.0)
    becomes this machine's loopback one."""
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1" if host == "0.0.0.0" else "::1"
    shown = f"[{host}]" if ":" in host else host
    netloc = f"{shown}:{parts.port}" if parts.port else shown
    fragment = urllib.parse.urlencode({"token": token})
    return urllib.parse.urlunsplit((parts.scheme or "http", netloc, "/ui/", "", fragment))


@cli.command()
@click.option("--print-url", is_flag=True, help="Only print the link; open no browser.")
@config_option
def console(print_url: bool, config_file: str | None) -> None:
    """Open the running gateway's console in a browser (and print its link).

    The link carries the gateway's control token after `#`: keep it to yourself. Exit
    status 3 when no gateway runs.
    """
    from chatkernel.cli.client import running_gateway

    _require_named_file(config_file)  # a typo'd --config is an error, as everywhere
    info = running_gateway()
    if info is None:
        click.echo("no gateway is running: start one with `chatkernel run`, then run "
                   "`chatkernel console` again", err=True)
        sys.exit(EXIT_UNREACHABLE)
    url = console_url(info.url, info.token)
    click.echo(url)
    if print_url:
        return
    import webbrowser

    try:
        webbrowser.get()  # is there one at all? (none on a server: the link is printed)
    except webbrowser.Error:
        click.echo("no browser here: open the link above where you have one", err=True)
        return
    if not webbrowser.open(url):
        click.echo("the browser did not start: open the link above", err=True)
