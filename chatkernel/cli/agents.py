"""``chatkernel agents``: the agents, and which one answers a chat."""

from __future__ import annotations

import json
import sys

import click

from chatkernel.cli import cli
from chatkernel.cli.local import STORE, load_config, with_store
from chatkernel.cli.options import config_option


#: Where an agent's workspace comes from: what `agents list` shows of each.
WORKSPACES = ("gateway.workspace", "agent.workspace", "agents.*.workspace")


@cli.group()
@config_option
def agents() -> None:
    """The gateway's agents, and which one answers a chat (docs/agents.md)."""


@agents.command("list")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def agents_list(config_file: str | None, as_json: bool) -> None:
    """Every agent: its kind, workspace, the bindings naming it and its sessions."""
    import collections

    from chatkernel.core.turns.bindings import Bindings

    config, _ = load_config(config_file, uses=(*STORE, *WORKSPACES))
    records = with_store(config_file, lambda store: store.list_sessions())
    sessions = collections.Counter(record.agent for record in records)
    bindings = Bindings.from_config(config)
    rows = [{"name": name, "kind": agent.kind, "workspace": str(config.agent_workspace(name)),
             "bindings": [f"bindings[{i}] ({config.bindings[i].describe()})"
                          for i in bindings.rules_of(name)]
             + (["the chats no binding matches"] if name == "default" else []),
             "sessions": sessions.get(name, 0)}
            for name, agent in config.named_agents().items()]
    rows.sort(key=lambda row: (row["name"] != "default", row["name"]))
    if as_json:
        click.echo(json.dumps({"agents": rows, "default": config.default_agent() is not None},
                              indent=2))
        return
    for row in rows:
        click.echo(f"{row['name']}  kind {row['kind']}  workspace {row['workspace']}  "
                   f"sessions {row['sessions']}")
        for binding in row["bindings"] or ["(no binding names it: it answers no chat)"]:
            click.echo(f"  {binding}")
    if config.default_agent() is None:
        click.echo("no default agent: the chats no binding matches go unanswered")


@agents.command("which")
@click.option("--channel", required=True, help="The chat's channel.")
@click.option("--account", required=True, help="The channel's account.")
@click.option("--chat", required=True, help="The chat (or peer) id.")
@click.option("--group", "is_group", is_flag=True, help="The chat is a group.")
@click.option("--thread", default=None, help="The thread id, if any.")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def agents_which(config_file: str | None, channel: str, account: str, chat: str,
                 is_group: bool, thread: str | None, as_json: bool) -> None:
    """Which agent answers a chat, and by which binding."""
    from chatkernel.core.turns.bindings import Bindings, Chat

    config, _ = load_config(config_file, uses=("bindings",))
    match = Bindings.from_config(config).match(Chat(channel, account, chat, is_group, thread))
    why = match.why(config.bindings)
    if as_json:
        click.echo(json.dumps({"agent": match.agent, "rule": match.rule, "why": why}))
    else:
        click.echo(f"{match.agent or 'no agent'}: {why}")
    if match.agent is None:
        sys.exit(1)
