"""A heartbeat's effective settings and what it may show.

Settings: ``[heartbeat]``, then the agent's heartbeat table (``[agent.heartbeat]``,
``[agents.<name>.heartbeat]``), then a session heartbeat's own, each merged over the one
before. Visibility (``show_ok``, ``show_alerts``,
``use_indicator``): per account → per channel → ``channels.defaults`` → the plugins'
``heartbeat_visibility`` answers → :data:`DEFAULT_VISIBILITY`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chatkernel.core.config import HeartbeatConfig, KernelConfig
    from chatkernel.core.store.base import HeartbeatState
    from chatkernel.sdk.models import Account

VISIBILITY_KEYS = ("show_ok", "show_alerts", "use_indicator")
#: An agent's config heartbeat is ``agent:<name>`` (the default agent's is ``main``).
AGENT_PREFIX = "agent:"

#: What a heartbeat shows when neither a plugin nor the config says otherwise: alerts
#: and the indicator, not the acknowledgements. The built-in ``heartbeat_visibility``
#: (:mod:`chatkernel.builtin.heartbeat`) answers it too, called last.
DEFAULT_VISIBILITY = {"show_ok": False, "show_alerts": True, "use_indicator": True}


# -- settings --------------------------------------------------------------------------------


def merged_settings(config: "KernelConfig", override: Mapping[str, Any] | None = None,
                    agent: str = "default") -> HeartbeatConfig:
    """``[heartbeat]``, then ``agent``'s heartbeat table (``[agent.heartbeat]`` for the
    default agent, ``[agents.<name>.heartbeat]``), then a session's own settings, each
    merged over the one before (``active_hours`` key by key)."""
    values: dict[str, Any] = {}
    layers: list[Mapping[str, Any]] = [config.heartbeat.model_dump(exclude_unset=True)]
    table = config.named_agents().get(agent)
    if table is not None and table.heartbeat is not None:
        layers.append(table.heartbeat.model_dump(exclude_unset=True))
    if override:
        layers.append(override)
    for layer in layers:
        for key, value in layer.items():
            if key == "active_hours" and isinstance(value, Mapping) and isinstance(
                    values.get(key), Mapping):
                values[key] = {**values[key], **value}
            else:
                values[key] = value
    # Here, not at the top: the built-in heartbeat plugin imports this module, and the
    # config schema (pydantic) is the heaviest import of a CLI start.
    from chatkernel.core.config import HeartbeatConfig

    return HeartbeatConfig.model_validate(values)


def job_agent(heartbeat_id: str) -> str | None:
    """The agent a config heartbeat runs on: ``main`` is the default agent's,
    ``agent:<name>`` agent ``name``'s; None for a session heartbeat (its session's)."""
    if heartbeat_id == "main":
        return "default"
    if heartbeat_id.startswith(AGENT_PREFIX):
        return heartbeat_id[len(AGENT_PREFIX):]
    return None


def heartbeat_settings(config: "KernelConfig", state: HeartbeatState) -> HeartbeatConfig:
    """A heartbeat's effective settings: :func:`merged_settings` with its own, and for a
    config heartbeat, ``every = "0"`` while the config does not ask for it
    (:meth:`KernelConfig.config_heartbeat_wanted`, an agent's ``heartbeat`` table)."""
    agent = job_agent(state.id)
    settings = merged_settings(config, state.settings, agent or "default")
    if state.session_key is None and not heartbeat_wanted(config, agent or "default"):
        settings = settings.model_copy(update={"every": "0"})
    return settings


def heartbeat_wanted(config: "KernelConfig", agent: str) -> bool:
    """Whether the config asks for ``agent``'s config heartbeat (see
    :meth:`KernelConfig.config_heartbeat_wanted`, :meth:`KernelConfig.agent_heartbeats`)."""
    if agent == "default":
        return config.config_heartbeat_wanted()
    return agent in config.agent_heartbeats()


# -- visibility ------------------------------------------------------------------------------


def plugin_visibility_defaults(pm: Any, channel: str, account: str) -> dict[str, bool]:
    """Merge every plugin's ``heartbeat_visibility`` answer.

    pluggy returns results newest plugin first and the built-in (trylast)
    last; merging them in reverse lets a later-registered plugin win.
    """
    merged: dict[str, bool] = {}
    for result in reversed(pm.hook.heartbeat_visibility(channel=channel, account=account)):
        if result:
            merged.update({k: bool(v) for k, v in result.items() if k in VISIBILITY_KEYS})
    return merged


def resolve_visibility(plugin_defaults: Mapping[str, bool],
                       *layers: Mapping[str, Any] | None) -> dict[str, bool]:
    """Apply config layers over the plugin defaults, most specific layer first.

    ``layers`` are e.g. the account's, the channel's and ``channels.defaults``
    heartbeat settings; a key left unset (None) falls through to the next.
    """
    resolved = dict(plugin_defaults)
    for key in VISIBILITY_KEYS:
        for layer in layers:
            value = None if layer is None else layer.get(key)
            if value is not None:
                resolved[key] = bool(value)
                break
    return resolved


def visibility_for(pm: Any, config: "KernelConfig", account: Account | None) -> dict[str, bool]:
    """What a heartbeat may show: per account → per channel → ``channels.defaults`` →
    plugin defaults → built-in. With no destination account only the last three."""
    defaults = config.channels.get("defaults")
    defaults_layer = _layer(getattr(defaults, "heartbeat", None))
    if account is None:
        return resolve_visibility(DEFAULT_VISIBILITY, defaults_layer)
    section = config.channels.get(account.channel_name)
    plugin_defaults = {**DEFAULT_VISIBILITY,
                       **plugin_visibility_defaults(pm, account.channel_name, account.name)}
    return resolve_visibility(plugin_defaults,
                              _layer(getattr(account.config, "heartbeat", None)),
                              _layer(getattr(section, "heartbeat", None)), defaults_layer)


def _layer(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    return value.model_dump() if hasattr(value, "model_dump") else dict(value)
