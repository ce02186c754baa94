"""An account's config: the base model every channel's account model extends.

The kernel's own per-account settings (the allowlist, access level, media cap,
heartbeat visibility, health-monitor overrides) live here so that a channel's
model, and the kit, need nothing of the kernel's config module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from chatkernel.sdk.models import AccessLevel

__all__ = ["AccountConfig", "Deprecated", "DmPolicy", "GroupPolicy", "HealthMonitorConfig",
           "HeartbeatVisibility"]

#: Who may write to the bot in private (docs/access.md): strangers offered a pairing code
#: the owner approves, only the listed and approved, anyone, or nobody.
DmPolicy = Literal["pairing", "allowlist", "open", "disabled"]
#: Which groups the bot answers in: those listed (``chat:<id>`` in ``allow_from``), any,
#: or none.
GroupPolicy = Literal["allowlist", "open", "disabled"]


@dataclass(frozen=True, slots=True)
class Deprecated:
    """A config key still read but on its way out: loading the config takes it with one
    warning, and ``chatkernel doctor`` reports it with the change that fixes it.

    ``since``: the version that deprecated it (``"chatkernel 0.9"``, ``"chatkernel-slack
    1.2"``). ``replacement``: the key that takes its value now, written as the old key
    is (from the same table); None when the key is dropped, ``reason`` then saying why
    and what to do instead.
    """

    since: str
    replacement: str | None = None
    reason: str = ""


class _Strict(BaseModel):
    """Unknown keys are typos, and typos are errors."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class HeartbeatVisibility(_Strict):
    show_ok: bool | None = None
    show_alerts: bool | None = None
    use_indicator: bool | None = None


class HealthMonitorConfig(_Strict):
    """``[health_monitor]``, and per channel / per account overrides of it.

    An override changes only the keys it sets; the rest come from the level above.
    """

    enabled: bool = True
    health_check_minutes: float = Field(5, ge=0)  # 0 disables the monitor
    stale_event_threshold_minutes: float = Field(30, ge=0)  # never below the check interval
    max_restarts_per_hour: int = Field(10, ge=0)  # rolling, crash restarts included
    startup_grace_minutes: float = Field(5, ge=0)  # no restart this soon after start
    restart_cooldown_minutes: float = Field(10, ge=0)  # between two restarts of an account
    stop_timeout_seconds: float = Field(30, gt=0)  # how long a restart waits for the old loop


class AccountConfig(BaseModel):
    """The settings every channel account has; channel plugins subclass it.

    Who may talk to the bot (docs/access.md): ``allow_from`` is the static list under
    every policy (sender ids, ``chat:<id>`` for a group; ``"*"`` lets anyone in);
    ``dm_policy`` says what becomes of a private message from anyone else (by default
    they are offered a pairing code the owner approves), ``group_policy`` which groups
    are answered, ``group_allow_from`` who in them may trigger the bot.
    """

    model_config = ConfigDict(extra="forbid")

    #: The settings that together name one account on the platform (a bot token and
    #: the API it belongs to): two enabled accounts with the same values are one
    #: platform account configured twice, which would receive every message twice or
    #: fight over it, so the config is refused.
    identity: ClassVar[tuple[str, ...]] = ()
    #: Keys of the account's table that are deprecated, dotted from the table (``old_key``,
    #: ``table.old_key``), each with what replaces it: loading moves the value to the
    #: replacement (the replacement wins when both are set) or drops a key that has none,
    #: with one warning each, and ``chatkernel doctor`` reports them. A subclass's table
    #: adds to its bases'.
    deprecated_keys: ClassVar[Mapping[str, Deprecated]] = {}

    enabled: bool = True
    allow_from: list[str] = Field(default_factory=list)
    dm_policy: DmPolicy = "pairing"
    group_policy: GroupPolicy = "allowlist"
    #: Who in an admitted group may trigger the bot (empty: anyone in the group).
    group_allow_from: list[str] = Field(default_factory=list)
    access_level: AccessLevel = "standard"
    require_mention: bool = True  # in groups: answer only when mentioned or replied to
    max_inbound_media_mb: float = Field(20, gt=0)
    direct_only_commands: bool = False
    heartbeat: HeartbeatVisibility | None = None
    health_monitor: HealthMonitorConfig | None = None
    #: Live replies for this account ("on" or "off"); unset: the channel's setting.
    streaming: Literal["off", "on"] | None = None
    #: The least time between two updates of a live reply; unset: the channel's.
    streaming_interval_ms: int | None = Field(None, ge=100, le=60_000)

    def webhook_secrets(self) -> tuple[str, ...]:
        """The keys of this account that authenticate the platform's webhook requests
        (a signing secret, a secret token) in the mode it is set to receive in. Without
        one, anyone who finds the webhook's URL can post messages as any user, so
        ``chatkernel security audit`` reports each one left unset. Empty (the default):
        the account receives no webhook, or its platform signs nothing."""
        return ()

    @field_validator("allow_from", "group_allow_from", mode="before")
    @classmethod
    def _ids_as_strings(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [str(item) for item in value]
        return value
