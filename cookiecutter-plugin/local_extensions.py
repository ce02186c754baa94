"""The template's Jinja extension: the ``channel_name`` filter, which refuses a channel name
the plugin cannot have as soon as it is typed.

cookiecutter renders the private ``__dist_name`` right after the ``channel_name`` answer
(cookiecutter.json keeps them in that order), so a bad name stops the template before the
next question, with one line (``Error: ...``) and nothing written. The error is a
``click.ClickException``, which cookiecutter's command line prints as that one line.
"""

from __future__ import annotations

import keyword

import click
from jinja2.ext import Extension

#: Channels the kernel ships (built in, or its test kit's) and the first-party plugins:
#: a second plugin registering one of these names would clash with it.
TAKEN = {"webchat", "memory", "loopback", "telegram", "slack", "whatsapp", "wechat",
         "discord"}


class BadChannelName(click.ClickException):
    """The channel name typed cannot be a chatkernel channel's."""


def problem(name: str) -> str | None:
    """Why ``name`` cannot be a channel name, or None when it can."""
    if name.lower().startswith(("chatkernel-", "chatkernel_")):
        rest = name[len("chatkernel-"):]
        return (f"the name {name!r} starts with 'chatkernel-': the template adds that "
                f"prefix itself (chatkernel-<name>); type just {rest!r}")
    if not name.isidentifier() or keyword.iskeyword(name):
        return (f"the name {name!r} is not a valid Python identifier: use lowercase letters, "
                "digits and underscores, starting with a letter (it names the module "
                "chatkernel_<name> and the config table [channels.<name>])")
    if name != name.lower():
        return f"the name {name!r} has capitals: channel names are lowercase ({name.lower()!r})"
    if name in TAKEN:
        return (f"the name {name!r} is already a chatkernel channel (taken: "
                f"{', '.join(sorted(TAKEN))}): choose your platform's own name")
    return None


def channel_name(name: str) -> str:
    """``name`` itself, or :class:`BadChannelName` saying why it cannot be one."""
    reason = problem(name)
    if reason is not None:
        raise BadChannelName(f"{reason} (nothing was written)")
    return name


class ChannelName(Extension):
    """Adds the ``channel_name`` filter."""

    def __init__(self, environment):  # type: ignore[no-untyped-def]
        super().__init__(environment)
        environment.filters["channel_name"] = channel_name
