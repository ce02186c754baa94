"""A channel's accounts, as the kernel runs them, built from its config table."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from chatkernel.core import config as cfg
from chatkernel.sdk.context import ChannelContext
from chatkernel.sdk.models import Account

if TYPE_CHECKING:
    from chatkernel.sdk.channel import Channel

#: Makes an account's context from the account and its channel's config table.
ContextFactory = Callable[[Account, Any], ChannelContext]


def make_channel(channel_type: type[Channel], account: Account, section: Any,
                 context: ContextFactory = ChannelContext) -> None:
    """Give ``account`` a new instance of its channel, built with its context, and that
    channel's transport (asked once: its webhook requests reach its loop)."""
    channel = channel_type(account, context(account, section))
    account.channel, account.transport = channel, channel.transport()


#: streaming = "on" where the channel cannot show a reply in progress.
_NO_LIVE = ('the {name} channel cannot show a reply while it is written (it declares no '
            'live replies): remove streaming = "on"; answers are sent whole')


def build_accounts(name: str, section: Any, channel_type: type[Channel], *,
                   config_path: Any = None, workspace: Any = None,
                   context: ContextFactory = ChannelContext) -> list[Account]:
    """The enabled accounts of ``[channels.<name>]`` (``section``, a ChannelConfig),
    each validated by the channel's account model and given its channel instance, as
    the kernel runs them. ConfigError: a key the channel does not read, an invalid
    account, a channel's own check (its constructor's), or two accounts that are one
    (:attr:`AccountConfig.identity`). Opens nothing: ``config set`` checks the
    tables of the channel it edits with it, ``validate`` and ``run`` every channel."""
    cfg.check_channel_keys(name, section, channel_type.settings_keys,
                           channel_type.account_model, path=config_path)
    from chatkernel.sdk.live import LiveReplies

    live = issubclass(channel_type, LiveReplies)
    if not live and getattr(section, "streaming", None) == "on":
        raise cfg.ConfigError(_NO_LIVE.format(name=name), path=config_path,
                              key=f"channels.{name}.streaming")
    accounts: list[Account] = []
    seen: dict[tuple[Any, ...], str] = {}
    keys = tuple(channel_type.account_model.identity)  # the settings naming one account
    for account_name, raw in section.accounts.items():
        settings = cfg.validate_account(channel_type.account_model, raw, channel=name,
                                        account=account_name, path=config_path)
        if not getattr(settings, "enabled", True):
            continue
        if not live and getattr(settings, "streaming", None) == "on":
            raise cfg.ConfigError(_NO_LIVE.format(name=name), path=config_path,
                                  key=f"channels.{name}.accounts.{account_name}.streaming")
        if keys:
            identity = tuple(getattr(settings, key, None) for key in keys)
            if identity in seen:  # the values are secrets: the error names keys only
                raise cfg.ConfigError(
                    f"the same {' and '.join(keys)} as account "
                    f"{seen[identity]!r}: one {name} account configured twice would get "
                    "each message twice; remove one, or give each its own",
                    path=config_path, key=f"channels.{name}.accounts.{account_name}")
            seen[identity] = account_name
        account = Account(name, account_name, settings,
                          access_level=getattr(settings, "access_level", "standard"),
                          **({} if workspace is None else {"workspace": workspace}))
        make_channel(channel_type, account, section, context)
        accounts.append(account)
    return accounts
