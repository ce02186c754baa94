"""Which agent answers a chat: ``[[bindings]]`` matched against a chat's channel,
account, chat id, chat type and thread (docs/agents.md).

Every match key a rule gives must match. Of the rules that match, the one giving
the most keys wins, ties by list order; the agent ``default`` answers the chats no
rule matches, and when the config has none, they go unanswered.

:func:`check_binding_targets` is the start-up check that each rule's channel
and account exist; :func:`unanswered` names the accounts whose chats no agent would
answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from chatkernel.core.config.hints import did_you_mean
from chatkernel.core.config.schema import DEFAULT_AGENT, Binding
from chatkernel.sdk.errors import ConfigError

if TYPE_CHECKING:
    from chatkernel.core.config.schema import KernelConfig
    from chatkernel.sdk.models import Account, InboundMessage


@dataclass(frozen=True, slots=True)
class Chat:
    """What a binding is matched against."""

    channel: str
    account: str
    chat_id: str
    is_group: bool = False
    thread_id: str | None = None

    @classmethod
    def of(cls, message: "InboundMessage") -> "Chat":
        return cls(message.channel, message.account, message.chat_id, message.is_group,
                   message.thread_id)


@dataclass(frozen=True, slots=True)
class Match:
    """The agent answering a chat (None: no agent does) and the rule that chose it
    (None: the ``default`` agent caught it, or nothing did)."""

    agent: str | None
    rule: int | None = None

    def why(self, bindings: list[Binding]) -> str:
        """``bindings[1] (channel=slack account=main)``, or why no rule decided."""
        if self.rule is not None:
            return f"bindings[{self.rule}] ({bindings[self.rule].describe()})"
        if self.agent is not None:
            return "no binding matches: the default agent answers"
        return "no binding matches and the config has no default agent"


def matches(rule: Binding, chat: Chat) -> bool:
    """Whether every match key of ``rule`` matches ``chat``."""
    return ((rule.channel is None or rule.channel == chat.channel)
            and (rule.account is None or rule.account == chat.account)
            and (rule.chat is None or rule.chat == chat.chat_id)
            and (rule.chat_type is None
                 or rule.chat_type == ("group" if chat.is_group else "direct"))
            and (rule.thread is None or rule.thread == chat.thread_id))


class Bindings:
    """The config's bindings and agents: :meth:`match` says who answers a chat."""

    def __init__(self, rules: list[Binding], agents: Iterable[str]) -> None:
        self.rules = list(rules)
        self.has_default = DEFAULT_AGENT in set(agents)
        # Most keys first, list order among equals: the first that matches wins.
        self._ranked = sorted(range(len(self.rules)),
                              key=lambda i: (-len(self.rules[i].match_keys()), i))

    @classmethod
    def from_config(cls, config: "KernelConfig") -> "Bindings":
        return cls(config.bindings, config.named_agents())

    def match(self, chat: Chat) -> Match:
        """Who answers ``chat``, and by which rule."""
        for index in self._ranked:
            if matches(self.rules[index], chat):
                return Match(self.rules[index].agent, index)
        return Match(DEFAULT_AGENT if self.has_default else None)

    def agent_for(self, chat: Chat) -> str | None:
        """The name of the agent answering ``chat`` (None: no agent does)."""
        return self.match(chat).agent

    def rules_of(self, agent: str) -> list[int]:
        """The indexes of the rules naming ``agent``."""
        return [i for i, rule in enumerate(self.rules) if rule.agent == agent]


# -- checks ------------------------------------------------------------------------------


def check_binding_targets(config: "KernelConfig", accounts: Iterable[tuple[str, str]], *,
                          path: Path | None = None) -> None:
    """Each rule's channel is one of ``accounts``' (``(channel, account)`` pairs: those the
    gateway runs, and those the config has switched off, which a rule may wait for) and
    its account one of that channel (of any channel, when the rule names none);
    ConfigError names the rule."""
    by_channel: dict[str, set[str]] = {}
    for channel, account in accounts:
        by_channel.setdefault(channel, set()).add(account)
    for i, rule in enumerate(config.bindings):
        if rule.channel is not None and rule.channel not in by_channel:
            raise ConfigError(f"no channel {rule.channel!r} runs on this gateway, so the rule "
                              f"can never match (channels: {', '.join(sorted(by_channel))})"
                              f"{did_you_mean(rule.channel, by_channel)}", path=path,
                              key=f"bindings[{i}].channel")
        if rule.account is None:
            continue
        names = by_channel[rule.channel] if rule.channel is not None else \
            set().union(*by_channel.values())
        if rule.account not in names:
            where = f"channel {rule.channel!r}" if rule.channel else "any channel"
            raise ConfigError(f"no account {rule.account!r} in {where}, so the rule can never "
                              f"match (accounts: {', '.join(sorted(names)) or 'none'})"
                              f"{did_you_mean(rule.account, names)}", path=path,
                              key=f"bindings[{i}].account")


def unanswered(config: "KernelConfig", accounts: Iterable["Account"]) -> list[str]:
    """With no default agent: the accounts (``channel:account``) some of whose chats no
    binding matches, so no agent answers them. Empty with a default agent."""
    if config.default_agent() is not None:
        return []
    found = []
    for account in accounts:
        wide = [rule for rule in config.bindings
                if rule.chat is None and rule.thread is None
                and rule.channel in (None, account.channel_name)
                and rule.account in (None, account.name)]
        types = {rule.chat_type for rule in wide}
        if None not in types and not {"direct", "group"} <= types:
            found.append(account.key)
    return sorted(found)
