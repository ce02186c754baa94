"""The chatkernel hook contract: the two markers, the hook specifications and the
read-only view of the config that hooks are handed (:class:`ConfigView`).

Plugins implement these with ``@chatkernel.hookimpl``. An implementation may
accept any subset of a specification's arguments, by name. Hooks that return
an awaitable are awaited by the kernel, so an implementation may be a plain
function or return a coroutine.

Sections follow the pipeline: registration, the channels a gateway runs, inbound,
outbound, policy, heartbeat, health, the gateway's pages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import pluggy

hookspec = pluggy.HookspecMarker("chatkernel")
hookimpl = pluggy.HookimplMarker("chatkernel")


# -- what hooks are handed of the config ------------------------------------------------


@dataclass(frozen=True, slots=True)
class GatewayView:
    """``[gateway]``, as far as a hook reads it."""

    #: ``host:port`` the gateway's HTTP server listens on (``127.0.0.1:8787``).
    listen: str


@dataclass(frozen=True, slots=True)
class AccountView:
    """``[channels.<name>.accounts.<account>]``, as far as a hook reads it."""

    #: False when the table says ``enabled = false``.
    enabled: bool = True


@dataclass(frozen=True, slots=True)
class ChannelView:
    """``[channels.<name>]``, as far as a hook reads it."""

    #: False when the table says ``enabled = false`` (every account of it is off).
    enabled: bool = True
    #: The accounts the table lists, by name (empty: it lists none).
    accounts: Mapping[str, AccountView] = field(
        default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class ConfigView:
    """The config as a hook sees it: read-only, the same paths as ``config.toml``
    (``config.gateway.listen``, ``config.channels["webchat"].enabled``), and only
    what hooks need. The kernel's own config object is not part of the contract."""

    gateway: GatewayView
    #: Every ``[channels.<name>]`` table the config has (``defaults`` left out), by name.
    channels: Mapping[str, ChannelView]


# -- registration --------------------------------------------------------------


@hookspec
def register_channels(register):
    """Register channel types.

    Called once, when the kernel first builds its registry of channels.

    :param register: call ``register(channel_class)`` for each channel type the
        plugin provides. ``channel_class`` is a subclass of
        :class:`chatkernel.Channel` whose ``name`` (``"telegram"``) is the key
        under ``[channels.<name>]`` in the config.
    :return: nothing.
    """


@hookspec
def register_agents(register):
    """Register agent kinds.

    Called once, when the kernel first builds its registry of agents.

    :param register: call ``register(agent_class)`` for each agent kind; the
        class's ``name`` is what ``[agent] kind = "<name>"`` selects.
    :return: nothing.
    """


@hookspec
def register_markups(register):
    """Register Markdown renderers that a channel's ``markup`` (or ``render``) may name.

    What is registered is nameable in the kernel whose plugin manager loaded the
    plugin (``pm.markups``, each channel's ``context.markups``), never in another
    kernel of the same process; defining a subclass registers nothing.

    :param register: call ``register(renderer_class)`` for each
        :class:`chatkernel.channels.MarkdownRenderer` subclass; its ``name``
        (``"telegram_html"``) is how it is named. A channel may also set its
        ``markup`` to the class itself, which needs no registration.
    :return: nothing.
    """


@hookspec
def register_commands(register):
    """Register slash commands answered before the agent.

    Called once, when the kernel first builds its command table.

    :param register: call ``register(command)`` with a
        :class:`chatkernel.Command` (name, handler, help, aliases,
        direct-only flag) for each command the plugin adds.
    :return: nothing.
    """


@hookspec
def register_logins(register):
    """Register the login flows behind ``chatkernel login <channel>``.

    Called once, when ``chatkernel login`` runs.

    :param register: call ``register(login)`` with a :class:`chatkernel.sdk.login.Login`
        whose ``name`` is the channel's name (``"wechat"``) and whose ``run(request)``
        returns a :class:`chatkernel.sdk.login.LoginResult`: the account's config keys
        to store (secrets in a file of mode 0600, never echoed).
    :return: nothing.
    """


# -- the channels a gateway runs ----------------------------------------------------


@hookspec
def implied_accounts(config):
    """Name the accounts a channel runs though the config lists none of them.

    A channel that needs no setup (the built-in web chat, whose ``default`` account
    the page at ``/`` talks to) runs with no table in the config. Called whenever the
    kernel reads which accounts run: ``chatkernel run`` and a reload, ``status``,
    ``config get``, ``config validate``. The implied accounts count for a channel the
    config does not name, and for one whose ``[channels.<name>]`` table lists no
    account; ``enabled = false`` in that table still turns them off. A config that
    lists accounts of the channel runs exactly those.

    :param config: the config being read, as a read-only :class:`ConfigView`
        (``config.channels``: its ``[channels.<name>]`` tables; ``config.gateway.listen``).
    :return: ``{channel name: {account name: its table}}`` (a table of ``{}`` takes the
        account model's defaults), or ``None``. Every implementation is called; for a
        channel two plugins imply, the one registered last wins.
    """


# -- inbound delivery ------------------------------------------------------------


@hookspec(firstresult=True)
def inbound_accept(message, account):
    """Decide whether an inbound message may reach its session.

    Called for every normalized inbound message after it is deduplicated and
    durably journaled, before slash commands and the agent. The built-in
    implementation (called last) applies the account's allowlist and the group
    mention rule.

    :param message: the :class:`chatkernel.InboundMessage`.
    :param account: the :class:`chatkernel.Account` it arrived on (its
        config, access level and channel).
    :return: a :class:`chatkernel.Verdict` — ``Verdict.allow()`` or
        ``Verdict.deny(reason, reply=...)`` where ``reply`` is a short text
        sent back to the sender — or ``None`` to leave the decision to the
        next implementation. Stops at the first non-None result.
    """


@hookspec
def inbound_delivered(message, session):
    """Observe a message that was accepted and handed to its session's queue.

    Called after the session is resolved and the reply route refreshed, for
    messages that passed ``inbound_accept`` and were not slash commands. Every
    implementation is called; results are ignored. Must not block: an
    implementation that needs I/O may return an awaitable.

    :param message: the :class:`chatkernel.InboundMessage`.
    :param session: the :class:`chatkernel.Session` it was queued to.
    :return: nothing (or an awaitable).
    """


# -- outbound send ----------------------------------------------------------------


@hookspec(firstresult=True)
def outbound_send(account, route, payload):
    """Send one outbound payload (one chunk of text, or one media file).

    Called by the serialized sender of a session for every payload, after
    chunking, media policy and rate limiting, once per attempt of the retry
    policy. The built-in implementation (called last) returns
    ``account.channel.send(route, payload)``. Wrap it (``wrapper=True``) to
    observe or transform sends; return a result to replace the channel.

    :param account: the :class:`chatkernel.Account` to send from.
    :param route: the :class:`chatkernel.Route` (chat, thread, reply-to and
        per-route credentials), as read at send time.
    :param payload: the :class:`chatkernel.OutboundPayload`.
    :return: a :class:`chatkernel.SendResult`, or an awaitable of one; a
        failure is raised as :class:`chatkernel.SendError`. Stops at the first
        non-None result.
    """


# -- media-path policy ---------------------------------------------------------------


@hookspec(firstresult=True)
def media_path_allowed(path, workspace, access_level, account):
    """Decide whether a local file may be sent as media.

    Called for every ``MEDIA:`` path and every ``--media`` file before it is
    read. ``path`` is already resolved (symlinks and ``..`` removed), so a check
    on it cannot be escaped. The built-in implementation (called last) allows
    any file to a ``full`` account and otherwise only files under the workspace
    or the system temporary directory.

    :param path: the resolved, absolute :class:`pathlib.Path`.
    :param workspace: the resolved workspace directory (:class:`pathlib.Path`).
    :param access_level: ``"readonly"``, ``"standard"`` or ``"full"``.
    :param account: the :class:`chatkernel.Account` that would send it.
    :return: a :class:`chatkernel.Verdict` (deny with the reason shown to the
        chat), or ``None`` for no opinion. Stops at the first non-None result.
    """


# -- heartbeat visibility -------------------------------------------------------------


@hookspec
def heartbeat_visibility(channel, account):
    """Contribute default heartbeat visibility for a channel's accounts.

    Called when a heartbeat resolves what it may show. The config's settings
    (per account, then per channel, then ``channels.defaults``) take
    precedence over every plugin default, and plugin defaults over the
    built-in ones (``show_ok`` false, ``show_alerts`` true, ``use_indicator``
    true).

    :param channel: the channel name (``"telegram"``).
    :param account: the account name within that channel.
    :return: a mapping with any of ``show_ok``, ``show_alerts``,
        ``use_indicator``, or ``None``. All results are merged; a plugin
        registered later wins over an earlier one.
    """


# -- health probes ----------------------------------------------------------------------


@hookspec(firstresult=True)
def health_probe(account):
    """Probe the platform behind an account.

    Called by ``chatkernel health``, the health monitor and the snapshot
    refresher, for every account side by side, each with a timeout applied by
    the kernel (``health.probe_timeout_ms``). The built-in implementation
    (called last) returns ``account.channel.probe()``.

    :param account: the :class:`chatkernel.Account` to probe.
    :return: a :class:`chatkernel.ProbeResult` (ok, detail, latency, and
        ``restartable=False`` when restarting the receive loop cannot fix the
        failure), or an awaitable of one. Stops at the first non-None result.
    """


# -- the gateway's pages ----------------------------------------------------------------


@hookspec(firstresult=True)
def gateway_root_page(config, channel_types, loopback):
    """The page the gateway serves at ``GET /`` when no running account's channel
    serves one there (the web chat's default account serves its chat at ``/``).

    Called once, when the gateway builds its HTTP routes. The built-in
    implementation (``chatkernel.builtin.landing``, called last) says that the
    gateway runs, why its web chat is off and how to turn it on.

    :param config: the gateway's config, as a read-only :class:`ConfigView`.
    :param channel_types: the channel types plugins provide, by name.
    :param loopback: whether the gateway listens on this machine only.
    :return: the page's HTML as a ``str`` (not an awaitable: it is asked while the
        routes are built), or ``None`` for no page (``GET /`` is then a 404). Stops at
        the first non-None result.
    """
