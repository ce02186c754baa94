"""``chatkernel pairing``: the owner's side of pairing (docs/access.md).

A stranger who writes to a bot under ``dm_policy = "pairing"`` gets a code; these
commands list the codes pending, approve or deny one, and list or revoke the senders
approved. Each asks the running gateway (``/control/pairing/*``), so an approval takes
effect at once and its notice goes out through the gateway's outbox; with none running,
a kernel of the command's own does it, as ``chatkernel send`` does.
"""

from __future__ import annotations

import json
from typing import Any

import click

from chatkernel.cli import cli
from chatkernel.cli.client import control_or_direct
from chatkernel.cli.options import config_option


def _ask(config_file: str | None, action: str, body: dict[str, Any]) -> dict[str, Any]:
    """Do ``action`` of PairingControl through the gateway, or with a kernel of our own."""

    async def direct(kernel, body: dict[str, Any]) -> dict[str, Any]:
        from chatkernel.core.runtime.pairing_control import PairingControl

        return await getattr(PairingControl(kernel.pairing), action)(body)

    # An approval waits up to 15 s for its notice to go out.
    return control_or_direct(config_file, f"/control/pairing/{action}", body, direct,
                              timeout=45.0)


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


def _when(iso: str) -> str:
    return iso.replace("T", " ").replace("Z", " UTC")


@cli.group()
@config_option
def pairing() -> None:
    """Let strangers in: the pairing codes they were given, and who is approved."""


@pairing.command("list")
@click.argument("channel", required=False)
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def pairing_list(channel: str | None, as_json: bool, config_file: str | None) -> None:
    """The pending pairing requests (of CHANNEL, or all)."""
    requests = _ask(config_file, "list", {"channel": channel})["requests"]
    if as_json:
        _echo_json(requests)
        return
    if not requests:
        click.echo("No pending pairing requests.")
        return
    for request in requests:
        who = request["sender"] + (f" ({request['name']})" if request.get("name") else "")
        click.echo(f"{request['code']}  {request['channel']}:{request['account']}  {who}  "
                   f"asked {_when(request['created_at'])}, expires "
                   f"{_when(request['expires_at'])}")
    click.echo("Approve one with: chatkernel pairing approve CHANNEL CODE")


@pairing.command("approve")
@click.argument("channel")
@click.argument("code")
@click.option("--account", help="The account the request came to (a check).")
@config_option
def pairing_approve(channel: str, code: str, account: str | None,
                    config_file: str | None) -> None:
    """Let the sender of pairing request CODE in, and tell them so in their chat."""
    answer = _ask(config_file, "approve", {"channel": channel, "code": code,
                                           "account": account})
    request = answer["approved"]
    click.echo(f"Approved {request['sender']} on {request['channel']}:{request['account']}; "
               f"the notice to them: {answer['notice']}.")


@pairing.command("deny")
@click.argument("channel")
@click.argument("code")
@click.option("--account", help="The account the request came to (a check).")
@config_option
def pairing_deny(channel: str, code: str, account: str | None,
                 config_file: str | None) -> None:
    """Drop pairing request CODE: its sender stays out (and may ask again)."""
    request = _ask(config_file, "deny", {"channel": channel, "code": code,
                                         "account": account})["denied"]
    click.echo(f"Denied {request['sender']} on {request['channel']}:{request['account']}.")


@pairing.command("allowed")
@click.argument("channel", required=False)
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def pairing_allowed(channel: str | None, as_json: bool, config_file: str | None) -> None:
    """The senders approved by pairing (of CHANNEL, or all); allow_from's are in the
    config."""
    allowed = _ask(config_file, "allowed", {"channel": channel})["allowed"]
    if as_json:
        _echo_json(allowed)
        return
    if not allowed:
        click.echo("Nobody approved by pairing.")
        return
    for entry in allowed:
        click.echo(f"{entry['channel']}:{entry['account']}  {entry['sender']}  approved "
                   f"{_when(entry['approved_at'])}")


@pairing.command("revoke")
@click.argument("channel")
@click.argument("sender")
@click.option("--account", help="The account, when SENDER is approved on several.")
@config_option
def pairing_revoke(channel: str, sender: str, account: str | None,
                   config_file: str | None) -> None:
    """Withdraw SENDER's approval: their next message is a stranger's again."""
    revoked = _ask(config_file, "revoke", {"channel": channel, "sender": sender,
                                           "account": account})["revoked"]
    click.echo(f"Revoked {revoked['sender']} on {revoked['channel']}:{revoked['account']}.")


