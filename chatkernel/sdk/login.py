"""Logins a channel contributes to ``chatkernel login CHANNEL`` (a QR code to scan...).

A plugin registers a :class:`Login` through the ``register_logins`` hook; the
kernel's command runs it and keeps what it returns: the account's config keys,
written to the config file (mode 0600), secrets never echoed, and the login time
in the store (``chatkernel status`` shows the credentials' age).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class LoginStep:
    """Where a login is, for a screen that draws it (the console's Logins page): its
    ``state`` (``waiting``, ``scanned``, ``confirmed``, ``expired``, or the flow's own
    word), a line for the person, and with a new QR code what it encodes and its
    modules: rows of booleans, dark ``True``, quiet zone included."""

    state: str
    message: str = ""
    qr_text: str | None = None
    qr_modules: tuple[tuple[bool, ...], ...] | None = None


@dataclass(frozen=True)
class LoginRequest:
    """What the person asked for: ``chatkernel login <channel> --account <account>``."""

    channel: str
    account: str
    #: ``--api-base``: the platform's API host, when not the default.
    api_base: str | None = None
    #: The account's current table in the config file (``${ENV}`` unresolved), or {}.
    current: dict[str, Any] = field(default_factory=dict)
    #: Print a line on the person's terminal (never pass it a secret).
    echo: Callable[[str], None] = print
    #: Told each step (a new QR code, a state change) when a screen draws the login
    #: rather than a terminal (never pass it a secret); None: the terminal only.
    progress: Callable[[LoginStep], None] | None = None

    def step(self, step: LoginStep) -> None:
        """Tell ``progress`` of a step, when there is one."""
        if self.progress is not None:
            self.progress(step)


@dataclass(frozen=True)
class LoginResult:
    """A login that worked: the keys to set under ``channels.<channel>.accounts.<account>``
    (replacing earlier values), which of them are secrets, and one line saying who is
    logged in."""

    config: dict[str, Any]
    secret_keys: frozenset[str] = frozenset()
    detail: str = ""


class LoginFailed(Exception):
    """A login that did not work, with what to do (shown as the command's error)."""


class Login:
    """A channel's login flow. ``name`` is the channel's name; :meth:`run` talks to the
    person through ``request.echo`` and returns a :class:`LoginResult`, or raises
    :class:`LoginFailed`."""

    name: str = ""
    #: One line for ``chatkernel login --help``.
    description: str = ""

    async def run(self, request: LoginRequest) -> LoginResult:
        raise NotImplementedError
