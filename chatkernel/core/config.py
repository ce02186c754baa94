"""Configuration: TOML on disk, pydantic models in memory, ``${ENV}`` secrets.

The file lives at ``$CHATKERNEL_HOME/config.toml`` (``~/.chatkernel`` by
default) unless ``CHATKERNEL_CONFIG`` or ``--config`` names another. It is read
with tomllib; ``config set``/``unset`` edit it through tomlkit, which keeps the
person's comments and layout, and every write has mode 0600 because it may
hold secrets. Every error a user can meet names the file, the dotted key and
what was expected.
"""

from __future__ import annotations

import difflib
import os
import re
import tempfile
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticUndefined

from chatkernel.sdk.errors import ConfigError
from chatkernel.sdk.accounts import AccountConfig, HealthMonitorConfig, HeartbeatVisibility
from chatkernel.sdk.models import AccessLevel

# -- locations -------------------------------------------------------------------


def home_dir() -> Path:
    """``$CHATKERNEL_HOME``, or ``~/.chatkernel``."""
    value = os.environ.get("CHATKERNEL_HOME")
    return Path(value).expanduser() if value else Path.home() / ".chatkernel"


def config_path(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The config file: ``explicit``, else ``$CHATKERNEL_CONFIG``, else in the home."""
    if explicit:
        return Path(explicit).expanduser()
    value = os.environ.get("CHATKERNEL_CONFIG")
    return Path(value).expanduser() if value else home_dir() / "config.toml"


# -- errors ---------------------------------------------------------------------------


__all__ = ["ConfigError"]  # defined in errors.py so the CLI can catch it cheaply


# -- models ---------------------------------------------------------------------------


class Section(BaseModel):
    """Base of the kernel's sections: unknown keys are typos, and typos are errors."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class GatewayConfig(Section):
    listen: str = "127.0.0.1:8787"
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    workspace: Path | None = None  # default: $CHATKERNEL_HOME/workspace
    control_token: str | None = None  # required when listening beyond loopback
    # This gateway's presence id; default: gateway-<hostname>-<hash of CHATKERNEL_HOME>.
    instance_id: str | None = None
    #: Host names the gateway answers for besides its listen address, IP addresses and
    #: localhost (a name that reaches it through DNS or a reverse proxy). Browsers'
    #: requests for any other name are refused: that is how DNS rebinding is stopped.
    public_hosts: list[str] = Field(default_factory=list)
    #: Seconds a client has to send a request's head, from connecting or from the
    #: head's first byte (chatkernel.core.gateway.http_server).
    header_timeout: float = Field(15.0, gt=0, le=3600)
    #: Seconds a kept-alive connection may wait for its next request.
    idle_timeout: float = Field(60.0, gt=0, le=86400)
    #: Client connections open at once; default (and at most): what the descriptor
    #: limit leaves after a reserve for the store, the platforms and the agent.
    max_connections: int | None = Field(None, ge=1)

    @field_validator("public_hosts")
    @classmethod
    def _host_names(cls, value: list[str]) -> list[str]:
        names = []
        for item in value:
            name = item.strip().lower().rstrip(".")
            if not re.fullmatch(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*"
                                r"[a-z0-9_])?)*", name):
                raise ValueError(f"expected host names such as chat.example.com (no scheme, "
                                 f"port or path), got {item!r}")
            names.append(name)
        return names

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError("expected HOST:PORT, such as 127.0.0.1:8787 (port 0 picks one)")
        return value


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class AgentConfig(Section):
    kind: str = "echo"
    command: list[str] = Field(default_factory=list)
    #: The command agent's environment besides the safe few it always gets
    #: (``chatkernel.core.turns.agents.SAFE_ENV``): values, ``${ENV}`` references allowed...
    env: dict[str, str] = Field(default_factory=dict)
    #: ...and names passed through from the gateway's environment as they are.
    pass_env: list[str] = Field(default_factory=list)
    timeout: float = Field(120.0, gt=0)
    base_url: str = "http://127.0.0.1:11434/v1"
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    system_prompt: str = ""
    history_limit: int = Field(40, ge=0)
    #: The agent's heartbeat settings, merged over ``[heartbeat]``.
    heartbeat: "HeartbeatConfig | None" = None

    @field_validator("env")
    @classmethod
    def _env_table(cls, value: dict[str, str]) -> dict[str, str]:
        for name, item in value.items():
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name")
            if "\x00" in item:
                raise ValueError(f"the value of {name} holds a NUL character")
        return value

    @field_validator("pass_env")
    @classmethod
    def _env_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return value


QueueMode = Literal["collect", "followup", "interrupt", "steer"]
DropPolicy = Literal["old", "new", "summarize"]


class QueueConfig(Section):
    mode: QueueMode = "collect"
    debounce_ms: int = Field(1000, ge=0)
    cap: int = Field(20, ge=1)
    drop: DropPolicy = "old"
    max_concurrent: int = Field(4, ge=1)


class ChannelQueueConfig(Section):
    """``[channels.<name>.queue]``: the keys of ``[queue]`` it overrides for the channel's
    sessions (``max_concurrent`` is gateway-wide, so not here)."""

    mode: QueueMode | None = None
    debounce_ms: int | None = Field(None, ge=0)
    cap: int | None = Field(None, ge=1)
    drop: DropPolicy | None = None

    def overrides(self) -> dict[str, Any]:
        """The keys it sets, as ``QueueSettings.merged`` takes them."""
        return self.model_dump(exclude_none=True)


class SessionsConfig(Section):
    """``[sessions]``: what the kernel keeps of them in memory (the store has them all)."""

    #: Sessions, with their reply routes, kept in memory; the least recently used
    #: beyond it are read from the store when next needed.
    cache_size: int = Field(10_000, ge=100)


class StoreConfig(Section):
    #: An installed store backend (the ``chatkernel.stores`` entry points).
    backend: str = "sqlite"
    path: Path | None = None  # sqlite: default $CHATKERNEL_HOME/state.db
    url: str | None = None  # redis: default redis://127.0.0.1:6379/0
    #: redis: every key starts with it, so several gateways (or tests) can share a server.
    prefix: str = Field("chatkernel:", min_length=1)
    # How long finished journal entries (the dedupe keys) are kept: a platform
    # redelivering a message older than this would have it answered again.
    journal_retention_days: float = Field(7, gt=0)
    # A shared store (redis): how long an instance's lease on an account lasts
    # unrenewed; another instance takes the account over within about this long
    # after its owner dies (docs/scale-out.md).
    lease_seconds: float = Field(10, ge=1, le=600)

    @field_validator("backend")
    @classmethod
    def _installed(cls, value: str) -> str:
        from importlib.metadata import entry_points

        # Names only: no backend is imported to check one is there.
        installed = sorted({ep.name for ep in entry_points(group="chatkernel.stores")})
        if value not in installed:
            raise ValueError(f"not an installed store backend (installed: "
                             f"{', '.join(installed) or 'none'}){did_you_mean(value, installed)}")
        return value


class ActiveHours(Section):
    """When heartbeats may run: ``start`` ≤ time of day < ``end`` in ``timezone``.

    ``end`` may be ``24:00``; ``start`` after ``end`` spans midnight
    (``22:00``–``06:00``); ``start == end`` is an empty window (never).
    ``timezone``: an IANA name (``Europe/Berlin``), ``local`` (the gateway's
    zone) or ``user`` (the session's ``/heartbeat tz`` setting, else local).
    """

    start: str = "00:00"
    end: str = "24:00"
    timezone: str = "local"

    @field_validator("start", "end")
    @classmethod
    def _clock(cls, value: str, info: Any) -> str:
        match = re.fullmatch(r"(\d{1,2}):(\d{2})", value)
        if not match or int(match[2]) > 59 or int(match[1]) > 24 or (
            int(match[1]) == 24 and int(match[2]) != 0
        ):
            raise ValueError("expected a time of day HH:MM (24:00 allowed as an end)")
        if info.field_name == "start" and int(match[1]) == 24:
            raise ValueError("24:00 is allowed as an end only; a window starts at 00:00")
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        if value in ("local", "user"):
            return value
        check_timezone(value)
        return value


def check_timezone(name: str) -> str:
    """An IANA time zone name the system knows; ValueError says what is expected."""
    import zoneinfo

    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r}: expected an IANA name such as "
                         "Europe/Berlin or America/New_York, 'local' or 'user'") from None
    return name


class HeartbeatConfig(Section):
    """``[heartbeat]`` (and the overrides merged over it: ``[agent.heartbeat]``, a
    session's own). See docs/heartbeats.md."""

    # 0 disables the timer. The config heartbeat runs only when the config has a
    # [heartbeat] or [agent.heartbeat] table (config_heartbeat_wanted): with a paid
    # model every run is a paid turn, which nobody should get without asking.
    every: str = "30m"
    prompt: str | None = None  # None: the built-in prompt (heartbeat.DEFAULT_PROMPT)
    target: str = "none"  # none | last | a channel name
    to: str | None = None  # with a channel target: the chat id (default: its last chat)
    account: str | None = None  # the account to send from, where a channel has several
    direct_policy: Literal["allow", "block"] = "allow"
    active_hours: ActiveHours | None = None
    ack_max_chars: int = Field(300, ge=0)

    @field_validator("every", mode="before")
    @classmethod
    def _interval(cls, value: Any) -> str:
        from chatkernel.core.durations import parse_interval

        parse_interval(value)  # ValueError names what is wrong
        return str(value).strip()

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("expected none, last or a channel name")
        return value

    def interval(self) -> float:
        """``every`` in seconds (0: disabled)."""
        from chatkernel.core.durations import parse_interval

        return parse_interval(self.every)


AgentConfig.model_rebuild()  # its heartbeat table is defined above


class HealthConfig(Section):
    """``[health]``: probes and the cached snapshot."""

    probe_timeout_ms: int = Field(10_000, gt=0)
    refresh_seconds: float = Field(60, gt=0)  # background probes for the cached snapshot
    #: Each read of the store a snapshot makes (a hung store makes the snapshot red,
    #: it does not hold it up).
    store_timeout_ms: int = Field(1_000, gt=0)


class PresenceConfig(Section):
    """``[presence]``: the gateway's list of running instances and clients."""

    ttl_minutes: float = Field(5, gt=0)
    max_entries: int = Field(200, ge=1)


class ChannelConfig(BaseModel):
    """``[channels.<name>]``: channel-wide settings plus its accounts.

    Accounts stay raw here; each is validated by its channel's account model.
    """

    model_config = ConfigDict(extra="allow")

    enabled: bool = True
    accounts: dict[str, dict[str, Any]] = Field(default_factory=dict)
    queue: ChannelQueueConfig = Field(default_factory=ChannelQueueConfig)
    # attempts, base_delay_ms, max_delay_ms, jitter, unreachable_max_age (see RetryPolicy)
    retry: dict[str, Any] | None = None
    rate_limits: dict[str, Any] | None = None  # {"chat": "1/s", "account": "30/s", ...}
    heartbeat: HeartbeatVisibility | None = None
    health_monitor: HealthMonitorConfig | None = None

    # The outbox builds its retry policy and rate limiter from these tables when an
    # account starts; checking them here with the same code refuses a bad one wherever
    # the config is read (config set, validate, reload), not at the first send.
    @field_validator("retry")
    @classmethod
    def _retry(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        from chatkernel.core.outbound.retry import RetryPolicy

        RetryPolicy.from_config(value)  # ValueError names the key
        return value

    @field_validator("rate_limits")
    @classmethod
    def _rate_limits(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        from chatkernel.core.outbound.ratelimit import RateLimiter

        RateLimiter.from_limits({}, value)  # ValueError names the scope
        return value


class SendRule(Section):
    action: Literal["allow", "deny"]
    channel: str = "*"
    chat_type: Literal["direct", "group", "any"] = "any"


class SendPolicyConfig(Section):
    default: Literal["allow", "deny"] = "allow"
    rules: list[SendRule] = Field(default_factory=list)


class KernelConfig(Section):
    """The whole config file."""

    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    queue: QueueConfig = Field(default_factory=QueueConfig)
    sessions: SessionsConfig = Field(default_factory=SessionsConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    heartbeat: HeartbeatConfig = Field(default_factory=HeartbeatConfig)
    health_monitor: HealthMonitorConfig = Field(default_factory=HealthMonitorConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    presence: PresenceConfig = Field(default_factory=PresenceConfig)
    send_policy: SendPolicyConfig = Field(default_factory=SendPolicyConfig)
    channels: dict[str, ChannelConfig] = Field(default_factory=dict)

    @field_validator("channels")
    @classmethod
    def _defaults_table(cls, value: dict[str, ChannelConfig]) -> dict[str, ChannelConfig]:
        # [channels.defaults] is no channel: only its heartbeat table is read (the
        # visibility every channel inherits), anything else there would be ignored.
        defaults = value.get("defaults")
        if defaults is not None:
            other = sorted((defaults.model_fields_set | set(defaults.model_extra or {}))
                           - {"heartbeat"})
            if other:
                raise ValueError(f"[channels.defaults] takes heartbeat only, not "
                                 f"{', '.join(other)}: a channel's settings go in "
                                 "[channels.<name>]")
        return value

    def workspace(self) -> Path:
        return (self.gateway.workspace or home_dir() / "workspace").expanduser()

    def config_heartbeat_wanted(self) -> bool:
        """Whether the config asks for the config heartbeat: a ``[heartbeat]`` or an
        ``[agent.heartbeat]`` table, even an empty one. Without either it is off (a
        manual wake still runs it): its defaults (every 30m) apply once it is asked for."""
        return ("heartbeat" in self.model_fields_set or bool(self.heartbeat.model_fields_set)
                or self.agent.heartbeat is not None)

    def store_path(self) -> Path:
        return (self.store.path or home_dir() / "state.db").expanduser()


# -- the channels a gateway runs ---------------------------------------------------------

#: The built-in web chat: the channel a gateway serves unless told otherwise.
WEBCHAT = "webchat"
#: The web chat's account that the page at ``/`` talks to.
WEBCHAT_ACCOUNT = "default"


def listens_locally(config: KernelConfig) -> bool:
    """Whether ``gateway.listen`` is reachable from this machine only."""
    from chatkernel.core.health.presence import is_loopback

    host = config.gateway.listen.rpartition(":")[0].strip("[]")
    return is_loopback(host)


def effective_channels(config: KernelConfig) -> dict[str, ChannelConfig]:
    """``[channels.*]`` as the gateway runs them (``defaults`` left out).

    The web chat keeps its ``default`` account unless the config gives it accounts of
    its own: configuring Telegram, or a web chat setting such as ``text_limit``, does
    not switch it off; ``[channels.webchat] enabled = false`` does. It admits everyone
    who reaches it, so a gateway listening beyond this machine serves it only when the
    config has a ``[channels.webchat]`` table.
    """
    channels = {name: section for name, section in config.channels.items()
                if name != "defaults"}
    webchat = channels.get(WEBCHAT)
    if webchat is None:
        if listens_locally(config):
            channels[WEBCHAT] = ChannelConfig(accounts={WEBCHAT_ACCOUNT: {}})
    elif not webchat.accounts:
        channels[WEBCHAT] = webchat.model_copy(update={"accounts": {WEBCHAT_ACCOUNT: {}}})
    return channels


def effective_accounts(config: KernelConfig) -> list[tuple[str, str, bool, dict[str, Any]]]:
    """``(channel, account, enabled, raw table)`` for every account of
    :func:`effective_channels` (the web chat's implied one included)."""
    return [(name, account, bool(section.enabled and raw.get("enabled", True) is not False),
             raw)
            for name, section in effective_channels(config).items()
            for account, raw in section.accounts.items()]


# -- ${ENV} references ------------------------------------------------------------------

_ENV_REF = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def resolve_env(value: Any, *, key: str = "", path: Path | None = None,
                environ: dict[str, str] | None = None, strict: bool = True) -> Any:
    """Replace ``${NAME}`` with the environment's value, recursively.

    ``$$`` is a literal ``$``. A missing variable is an error when ``strict``;
    otherwise the reference is left as written.
    """
    env = os.environ if environ is None else environ
    if isinstance(value, str):
        if "$" not in value:
            return value

        def substitute(match: re.Match[str]) -> str:
            name = match[1]
            if name is None:
                return "$"
            if name in env:
                return env[name]
            if strict:
                raise ConfigError(
                    f"environment variable {name} is not set (referenced as ${{{name}}})",
                    path=path, key=key or None)
            return match[0]

        return _ENV_REF.sub(substitute, value)
    if isinstance(value, dict):
        return {k: resolve_env(v, key=f"{key}.{k}" if key else k, path=path,
                               environ=environ, strict=strict) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_env(v, key=f"{key}[{i}]", path=path, environ=environ, strict=strict)
                for i, v in enumerate(value)]
    return value


# -- secrets ---------------------------------------------------------------------------

_SECRET_KEY = re.compile(r"(token|secret|password|passwd|api_key|apikey|private_key|aes_key)",
                         re.IGNORECASE)
REDACTED = "***"


def is_secret_key(key: str) -> bool:
    """Whether a key's value is a secret, by its name (``bot_token``, ``app_secret``...)."""
    return bool(_SECRET_KEY.search(key)) and not key.endswith("_env")


def redact(value: Any, key: str = "") -> Any:
    """A copy with secret values replaced; ``${ENV}`` references are kept, they hide nothing."""
    if isinstance(value, dict):
        return {k: redact(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    if is_secret_key(key) and isinstance(value, str) and value and not _ENV_REF.fullmatch(value):
        return REDACTED
    return value


def env_values(value: Any, environ: dict[str, str] | None = None) -> list[str]:
    """Every value a ``${NAME}`` reference in ``value`` (raw config) resolves to.

    Whatever comes from the environment is treated as a secret when a
    diagnosis is printed, whatever its key is called.
    """
    env = os.environ if environ is None else environ
    if isinstance(value, str):
        return [env[m[1]] for m in _ENV_REF.finditer(value) if m[1] and env.get(m[1])]
    if isinstance(value, dict):
        return [s for v in value.values() for s in env_values(v, environ)]
    if isinstance(value, list):
        return [s for v in value for s in env_values(v, environ)]
    return []


def secret_values(value: Any, key: str = "") -> list[str]:
    """Every secret string in a (resolved) config, for the log redactor."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in secret_values(v, k)]
    if isinstance(value, list):
        return [s for v in value for s in secret_values(v, key)]
    return [value] if is_secret_key(key) and isinstance(value, str) and value else []


def kernel_secrets(config: KernelConfig, environ: dict[str, str] | None = None) -> list[str]:
    """The secrets a running kernel knows, to keep them out of what agents send and log:
    every secret-named value of the (resolved) config, as the log redactor learns them,
    the agent's API key, and every secret-named variable of the gateway's environment
    (``TELEGRAM_BOT_TOKEN``: a token a ``${ENV}`` reference or an agent may carry)."""
    env = os.environ if environ is None else environ
    found = secret_values(config.model_dump(mode="json"))
    names = [config.agent.api_key_env] if config.agent.api_key_env else []
    names += [name for name in env if is_secret_key(name)]
    found += [env[name] for name in names if env.get(name)]
    return found


# -- reading and writing -----------------------------------------------------------------


def os_reason(error: OSError, path: Path) -> str:
    """Why ``path`` could not be read or written, in words: the system's reason, and
    which file is in the way where a directory on the path is a file."""
    import errno

    reason = error.strerror or str(error)
    if error.errno in (errno.ENOTDIR, errno.EEXIST):
        blocker = next((parent for parent in (path, *path.parents)
                        if parent.exists() and not parent.is_dir()), None)
        if blocker is not None:
            return f"{blocker} is a file, not a directory"
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        where = next((parent for parent in path.parents if parent.exists()), path.parent)
        return f"{reason} ({where} cannot be written by this user)"
    return reason


def read_raw(path: Path) -> dict[str, Any]:
    """The file's TOML as a dict; a missing file is an empty config."""
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", path=path) from None
    except OSError as exc:
        raise ConfigError(f"cannot be read: {os_reason(exc, path)}", path=path) from None


def read_document(path: Path) -> Any:
    """The file as a tomlkit document: a dict that keeps its comments and layout when
    edited and written back (``write_raw``). A missing file is an empty document."""
    import tomlkit

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return tomlkit.document()
    except (OSError, UnicodeDecodeError) as exc:
        reason = os_reason(exc, path) if isinstance(exc, OSError) else "not UTF-8"
        raise ConfigError(f"cannot be read: {reason}", path=path) from None
    try:
        tomllib.loads(text)  # the same errors, worded the same way, as read_raw
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", path=path) from None
    return tomlkit.parse(text)


def write_raw(path: Path, data: dict[str, Any]) -> None:
    """Write the TOML atomically, with mode 0600 from the first byte.

    A tomlkit document (``read_document``) is written as edited, comments and all."""
    import tomli_w
    import tomlkit

    text = (data.as_string() if isinstance(data, tomlkit.TOMLDocument)
            else tomli_w.dumps(data))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".config-", suffix=".toml", dir=path.parent)
    except OSError as exc:
        raise ConfigError(f"cannot be written: {os_reason(exc, path)}", path=path) from None
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise ConfigError(f"cannot be written: {os_reason(exc, path)}", path=path) \
                from None
        raise


def _dotted(loc: tuple[Any, ...]) -> str:
    key = ""
    for part in loc:
        if isinstance(part, int):
            key += f"[{part}]"
        else:
            key += f".{part}" if key else str(part)
    return key


#: The channels this project publishes, by name: their distributions are
#: ``chatkernel-<name>``. Only these are ever suggested for installing: naming a
#: package from whatever was typed would send a typo to whoever registered it.
FIRST_PARTY_CHANNELS = frozenset({"slack", "telegram", "whatsapp", "wechat"})


def did_you_mean(name: str, known: Any) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known``, or an empty string."""
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_channel_keys(name: str, section: ChannelConfig, channel_keys: Iterable[str],
                       account_model: type[BaseModel], *, path: Path | None = None) -> None:
    """Refuse a key of ``[channels.<name>]`` that neither the kernel nor the channel
    reads (``channel_keys``: its ``Channel.settings_keys``). An account's setting put
    there (``allow_from``, a token) says where it belongs: each account has its own."""
    known = set(ChannelConfig.model_fields) | set(channel_keys)
    for key in sorted(section.model_extra or {}):
        if key in known:
            continue
        where = f"channels.{name}.{key}"
        if key in account_model.model_fields:
            raise ConfigError(
                f"{key} is a setting of each account, not of the channel: put it in "
                f"[channels.{name}.accounts.<name>] (every account that needs it)",
                path=path, key=where)
        raise ConfigError(f"the {name} channel has no setting {key!r}"
                          f"{did_you_mean(key, known - {'accounts'})}", path=path, key=where)


def unknown_channel(name: str, installed: Any, *, path: Path | None = None,
                    left_out: str | None = None, key: str | None = None) -> ConfigError:
    """The error for ``[channels.<name>]`` (or another ``key`` naming a channel) that no
    installed plugin provides. ``left_out``: why the plugin that does was not loaded
    (``PluginManager.channel_left_out``)."""
    if left_out is not None:
        return ConfigError(left_out, path=path, key=key or f"channels.{name}")
    known = ", ".join(sorted(installed)) or "none"
    message = f"no installed plugin provides a channel named {name!r} (installed: {known})"
    if name in FIRST_PARTY_CHANNELS:
        message += f": pip install chatkernel-{name} provides it"
    else:
        message += did_you_mean(name, set(installed) | FIRST_PARTY_CHANNELS)
    return ConfigError(message, path=path, key=key or f"channels.{name}")


def _model_in(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model an annotation holds (``M``, ``M | None``, ``list[M]``, ``dict[str, M]``),
    and whether a table key comes before it in an error's location."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    for arg in get_args(annotation):
        found, keyed = _model_in(arg)
        if found is not None:
            return found, keyed or get_origin(annotation) is dict
    return None, False


def _keys_beside(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """The keys ``model`` accepts in the table holding ``loc``'s last part."""
    parts = [part for part in loc[:-1] if not isinstance(part, int)]
    node, i = model, 0
    while node is not None and i < len(parts):
        field = node.model_fields.get(parts[i])
        if field is None:
            return []
        node, keyed = _model_in(field.annotation)
        i += 2 if keyed else 1
    return list(node.model_fields) if node is not None else []


def _expected(error: dict[str, Any], model: type[BaseModel] | None = None) -> str:
    if error["type"] == "extra_forbidden":
        loc = tuple(error["loc"])
        hint = did_you_mean(str(loc[-1]), _keys_beside(model, loc)) if loc else ""
        return f"unknown key{hint or ' (check its spelling)'}"
    message = error["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, "):]
    given = error.get("input")
    key = next((str(part) for part in reversed(error.get("loc", ())) if isinstance(part, str)),
               "")
    if error["type"] != "missing" and not isinstance(given, dict):
        # A malformed secret is still a secret: the error names the key, not the value.
        message += " (the value is not shown: it is a secret)" if is_secret_key(key) \
            else f" (got {given!r})"
    if error["type"] == "literal_error" and isinstance(given, str) and not is_secret_key(key):
        message += did_you_mean(given, re.findall(r"'([^']*)'", error["ctx"]["expected"]))
    return message


def validation_error(exc: ValidationError, *, path: Path | None,
                     prefix: tuple[Any, ...] = (),
                     model: type[BaseModel] | None = None) -> ConfigError:
    """One ConfigError naming every key pydantic rejected, with what was expected
    (``model``: the one validated, whose keys an unknown key is matched against)."""
    problems = [(_dotted(prefix + tuple(err["loc"])), _expected(err, model))
                for err in exc.errors()]
    if len(problems) == 1:
        key, message = problems[0]
        return ConfigError(message, path=path, key=key)
    lines = "\n".join(f"  {key}: {message}" for key, message in problems)
    return ConfigError(f"{len(problems)} problems:\n{lines}", path=path)


def parse(data: dict[str, Any], *, path: Path | None = None,
          environ: dict[str, str] | None = None, strict_env: bool = True) -> KernelConfig:
    """Resolve ``${ENV}`` references and validate the kernel's sections."""
    resolved = resolve_env(data, path=path, environ=environ, strict=strict_env)
    try:
        return KernelConfig.model_validate(resolved)
    except ValidationError as exc:
        raise validation_error(exc, path=path, model=KernelConfig) from None


def load(path: str | os.PathLike[str] | None = None, *,
         environ: dict[str, str] | None = None) -> KernelConfig:
    """Read and validate the config file (a missing file gives the defaults)."""
    file = config_path(path)
    return parse(read_raw(file), path=file, environ=environ)


def validate_account(model: type[BaseModel], data: dict[str, Any], *, channel: str,
                     account: str, path: Path | None = None) -> BaseModel:
    """Validate one ``[channels.<channel>.accounts.<account>]`` table with its model."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, path=path, prefix=("channels", channel, "accounts", account),
                               model=model) from None


# -- dotted keys ---------------------------------------------------------------------------


def split_key(key: str, *, path: Path | None = None) -> list[str]:
    parts = key.split(".")
    if not key or any(not part for part in parts):
        raise ConfigError(f"not a dotted key: {key!r} (expected e.g. agent.kind)", path=path)
    return parts


def get_key(data: dict[str, Any], key: str, *, path: Path | None = None) -> Any:
    """The value at a dotted key; KeyError when it is not there."""
    node: Any = data
    for part in split_key(key, path=path):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(key)
        node = node[part]
    return node


def set_key(data: dict[str, Any], key: str, value: Any, *, path: Path | None = None) -> None:
    """Set a dotted key, creating the tables on the way. In a tomlkit document the
    comments above a table header stay above it (:func:`_keep_notes_in_place`)."""
    parts = split_key(key, path=path)
    node = data
    parent: Any = None
    for i, part in enumerate(parts[:-1]):
        if part not in node:
            node[part] = {}
        child = node[part]  # not setdefault's answer: a document stores a table it made
        if not isinstance(child, dict):
            raise ConfigError(f"{'.'.join(parts[:i + 1])} is a value, not a table", key=key,
                              path=path)
        parent, node = node, child
    if parts[-1] not in node and type(node).__module__.startswith("tomlkit"):
        _keep_notes_in_place(parent, node, parts[-1], value)
    else:
        node[parts[-1]] = value


def _keep_notes_in_place(parent: Any, table: Any, key: str, value: Any) -> None:
    """Add ``key`` to a tomlkit ``table`` with the comments above the next table header
    kept above that header. tomlkit stores such comments at the end of the body before
    the header, so a key added there would land between them and the header they
    describe, and a table given its first key of its own (``[send_policy]`` above
    ``[[send_policy.rules]]``) would have its new header put under them."""
    from tomlkit.items import Table

    if isinstance(table, Table) and table.is_super_table() and parent is not None:
        found = _notes_above(parent, table)
        table[key] = value
        if found:
            container, indices = found
            items = [container.body[i] for i in indices]
            if _prefix_first_header(table.value,
                                    "\n" + "".join(item.as_string() for _, item in items)):
                for i in indices:
                    container.body[i] = (None, _null())
        return
    container = table.value if isinstance(table, Table) else table
    run = _trailing_notes(container.body, whole=True)
    items = [container.body[i][1] for i in run]
    for i in run:
        container.body[i] = (None, _null())
    table[key] = value
    if items and not _prefix_first_header(container,
                                          "".join(item.as_string() for item in items)):
        for item in items:  # no header follows in the table: they end it again
            container.append(None, item)


def _null() -> Any:
    from tomlkit.items import Null

    return Null()  # what tomlkit itself leaves where an item was removed


def _trailing_notes(body: list[tuple[Any, Any]], *, whole: bool) -> list[int]:
    """The indices of the comment lines that end a tomlkit body's own keys (before its
    first sub-table, or at its end): all of them with the blank lines among them
    (``whole``), or the block just above what follows (after the last blank line)."""
    from tomlkit.items import AoT, Comment, Null, Table, Whitespace

    end = next((i for i, (_, item) in enumerate(body) if isinstance(item, (Table, AoT))),
               len(body))
    run: list[int] = []
    for i in range(end - 1, -1, -1):
        k, item = body[i]
        if isinstance(item, Null):
            continue
        if k is not None or not isinstance(item, (Comment, Whitespace)):
            break
        if isinstance(item, Whitespace) and not whole:
            break
        run.insert(0, i)
    if not any(isinstance(body[i][1], Comment) for i in run):
        return []
    return run


def _notes_above(parent: Any, table: Any) -> tuple[Any, list[int]] | None:
    """Where the comments just above ``table``'s first header are kept: the container
    rendered before it (and their indices), or None."""
    from tomlkit.items import AoT, Null, Table

    container = parent.value if isinstance(parent, Table) else parent
    body = container.body
    at = next((i for i, (_, item) in enumerate(body) if item is table), None)
    if at is None:
        return None
    before = [i for i in range(at) if not isinstance(body[i][1], Null)]
    if not before:
        return None
    previous = body[before[-1]][1]
    if not isinstance(previous, (Table, AoT)):  # comments of this container itself
        indices = _trailing_notes(body[:at], whole=False)
        return (container, indices) if indices else None
    while isinstance(previous, (Table, AoT)):  # down to the last body rendered
        last = previous.body[-1] if isinstance(previous, AoT) else previous
        inner = last.value.body
        if inner and isinstance(inner[-1][1], (Table, AoT)):
            previous = inner[-1][1]
            continue
        indices = _trailing_notes(inner, whole=False)
        return (last.value, indices) if indices else None
    return None


def _prefix_first_header(container: Any, text: str) -> bool:
    """Put ``text`` (comment lines) just above the first table header rendered in
    ``container`` (a super-table renders none: its first child's); False: none is."""
    from tomlkit.items import AoT, Table

    for _, item in container.body:
        if isinstance(item, Table) and item.is_super_table():
            if _prefix_first_header(item.value, text):
                return True
        elif isinstance(item, (Table, AoT)):
            first = item.body[0] if isinstance(item, AoT) else item
            first.trivia.indent = text + first.trivia.indent
            return True
    return False


def unset_key(data: dict[str, Any], key: str, *, path: Path | None = None) -> bool:
    """Remove a dotted key; False when it was not set."""
    parts = split_key(key, path=path)
    node: Any = data
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return False
    if isinstance(node, dict) and parts[-1] in node:
        del node[parts[-1]]
        return True
    return False


@dataclass(frozen=True, slots=True)
class Effective:
    """What one key is worth to the gateway (``chatkernel config get``): ``source`` is
    ``file`` when the file sets it, ``default`` when it does not; ``note`` says what the
    value does where the value alone does not say it (an allowlist of ``"*"``)."""

    key: str
    value: Any
    source: Literal["file", "default"]
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "source": self.source,
                "note": self.note}


def effective_values(raw: dict[str, Any], key: str, *,
                     account_models: dict[str, type[BaseModel]] | None = None,
                     path: Path | None = None) -> list[Effective]:
    """The effective value of a dotted key: the file's, else its default. One value,
    except for an account setting asked of a channel (``channels.webchat.allow_from``),
    which is set per account: then one per account the gateway runs. ``account_models``:
    the installed channels' account models, by channel name. ConfigError when the key
    has no value and no default."""
    parts = split_key(key, path=path)
    config: KernelConfig | None = None

    def parsed() -> KernelConfig:
        nonlocal config
        if config is None:
            config = parse(raw, path=path, strict_env=False)
        return config

    found: list[Effective] | None = None
    if parts[0] == "channels" and len(parts) >= 3 and parts[1] != "defaults":
        found = _channel_values(raw, parsed(), parts, account_models or {}, path)
    if found is None:
        try:
            found = [Effective(key, get_key(raw, key, path=path), "file")]
        except KeyError:
            try:
                value = get_key(parsed().model_dump(mode="json"), key, path=path)
            except KeyError:
                value = None
            if value is None:
                beside = _keys_beside(KernelConfig, tuple(parts))
                if beside and parts[-1] not in beside:  # worded as `config set` words it
                    raise ConfigError(
                        f"unknown key{did_you_mean(parts[-1], beside) or ' (check its spelling)'}",
                        path=path, key=key) from None
                raise ConfigError("not set, and it has no default", path=path,
                                  key=key) from None
            found = [Effective(key, value, "default")]
    try:
        heartbeat_off = not parsed().config_heartbeat_wanted()
    except ConfigError:  # a file that does not validate: the values are still shown
        heartbeat_off = False
    return [_noted(item, heartbeat_off) for item in found]


def _channel_values(raw: dict[str, Any], config: KernelConfig, parts: list[str],
                    account_models: dict[str, type[BaseModel]],
                    path: Path | None) -> list[Effective] | None:
    """``channels.<name>....`` with the channel's defaults, its accounts' defaults and
    the web chat's implied account; None: not a key of a channel the gateway runs."""
    name = parts[1]
    section = effective_channels(config).get(name)
    if section is None:
        return None
    model = account_models.get(name, AccountConfig)
    table = raw.get("channels", {}).get(name, {})

    def account_value(account: str, field: str) -> Effective | None:
        written = table.get("accounts", {}).get(account, {})
        key = f"channels.{name}.accounts.{account}.{field}"
        if field in written:
            return Effective(key, written[field], "file")
        default = model.model_fields[field].get_default(call_default_factory=True)
        if default is None or default is PydanticUndefined:
            return None
        if isinstance(default, BaseModel):
            default = default.model_dump(mode="json")
        return Effective(key, default, "default")

    field = parts[-1]
    if len(parts) == 3 and field in model.model_fields and \
            field not in ChannelConfig.model_fields:
        if not section.accounts:
            raise ConfigError(f"{field} is an account setting, and channel {name!r} has no "
                              f"account (set channels.{name}.accounts.<name>.{field})",
                              path=path, key=".".join(parts))
        values = [account_value(account, field) for account in section.accounts]
        if not any(values):
            raise ConfigError(f"not set on any account of channel {name!r}, and it has no "
                              "default", path=path, key=".".join(parts))
        return [value for value in values if value is not None]
    if len(parts) == 5 and parts[2] == "accounts" and parts[3] in section.accounts and \
            field in model.model_fields:
        value = account_value(parts[3], field)
        if value is None:
            raise ConfigError("not set, and it has no default", path=path,
                              key=".".join(parts))
        return [value]
    if len(parts) == 3 and field in ChannelConfig.model_fields and field not in table:
        value = section.model_dump(mode="json", exclude_none=True).get(field)
        return None if value is None else [Effective(".".join(parts), value, "default")]
    return None


def _noted(item: Effective, heartbeat_off: bool) -> Effective:
    """``item`` with what it effectively does, where its value does not say it."""
    notes = []
    last = item.key.rsplit(".", 1)[-1]
    if last == "allow_from" and isinstance(item.value, list):
        if "*" in item.value:
            notes.append('"*" admits every sender who reaches the account')
        elif not item.value:
            notes.append("an empty allowlist admits nobody")
        else:
            notes.append(f"admits only these {len(item.value)} sender(s)")
    if heartbeat_off and (item.key == "heartbeat" or item.key.startswith(
            ("heartbeat.", "agent.heartbeat"))):
        notes.append("the config heartbeat is off: the config has no [heartbeat] table "
                     "(this applies once it has one)")
    return Effective(item.key, item.value, item.source, "; ".join(notes)) if notes else item


def parse_value(text: str, *, text_field: bool = False) -> Any:
    """A command-line value: a TOML value when it parses as one, else the string. For a
    field that holds text (``text_field``, see :func:`takes_text`) a number stays the
    text as written: ids and phone numbers are digits, and ``007`` keeps its zeros."""
    try:
        value = tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text
    if text_field and isinstance(value, (int, float)) and not isinstance(value, bool):
        return text
    return value


def key_field(key: str, account_models: dict[str, type[BaseModel]] | None = None) -> Any:
    """The pydantic field a dotted key names (a kernel section's, a channel's, an
    account's with ``account_models`` by channel name), or None."""
    parts = key.split(".")
    if parts[0] == "channels" and len(parts) >= 3:
        if len(parts) >= 5 and parts[2] == "accounts":
            model = (account_models or {}).get(parts[1])
            return None if model is None else _field_in(model, parts[4:])
        return _field_in(ChannelConfig, parts[2:])
    return _field_in(KernelConfig, parts)


def _field_in(model: type[BaseModel] | None, parts: list[str]) -> Any:
    i = 0
    while model is not None and i < len(parts):
        field = model.model_fields.get(parts[i])
        if field is None:
            return None
        if i == len(parts) - 1:
            return field
        model, keyed = _model_in(field.annotation)
        i += 2 if keyed else 1
    return None


def takes_text(field: Any) -> bool:
    """Whether a field holds text only (``str``, ``str | None``, a path)."""
    if field is None:
        return False
    kinds = {arg for arg in (get_args(field.annotation) or (field.annotation,))
             if arg is not type(None)}
    return bool(kinds) and kinds <= {str, Path}


def is_secret_field(key: str, field: Any = None) -> bool:
    """Whether a key holds a secret: its name says so (``bot_token``), or its model
    field is kept out of reprs (``Field(repr=False)``: how a channel marks one)."""
    return is_secret_key(key.rsplit(".", 1)[-1]) or (field is not None and
                                                      field.repr is False)


def env_name_for(key: str) -> str:
    """A variable name to hold a key's secret: ``TELEGRAM_BOT_TOKEN`` for
    ``channels.telegram.accounts.main.bot_token`` (the account's name is kept unless it
    is ``main`` or ``default``), ``CHATKERNEL_CONTROL_TOKEN`` for ``gateway.control_token``."""
    parts = key.split(".")
    if parts[0] == "channels" and len(parts) == 5 and parts[2] == "accounts":
        parts = [parts[1]] + ([] if parts[3] in ("main", "default") else [parts[3]]) \
            + [parts[4]]
    else:
        parts = ["chatkernel", parts[-1]]
    return re.sub(r"[^A-Za-z0-9_]", "_", "_".join(parts)).upper()


def holds_env_reference(value: Any) -> bool:
    """Whether a (raw) value is or contains a ``${NAME}`` reference."""
    return isinstance(value, str) and any(m[1] for m in _ENV_REF.finditer(value))


def format_value(value: Any) -> str:
    """Show a value the way it would be written: strings bare, tables as TOML, the rest
    as one inline TOML value (``["llm", "-m", "x"]``)."""
    import tomli_w

    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return tomli_w.dumps(value).rstrip("\n")
    return inline_value(value)


def inline_value(value: Any) -> str:
    """One TOML value on one line: ``["a", 1]``, ``{ a = 1 }``, ``"text"``."""
    import tomli_w

    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(inline_value(item) for item in value) + "]"
    if isinstance(value, dict):
        pairs = (f"{tomli_w.dumps({key: 0}).split('=', 1)[0].strip()} = {inline_value(item)}"
                 for key, item in value.items())
        return "{ " + ", ".join(pairs) + " }"
    return tomli_w.dumps({"value": value}).split("=", 1)[1].strip()


STARTER_HEADER = """\
# chatkernel's configuration, written by `chatkernel config init`.
#
# Everything is optional: with this file as it is, `chatkernel run` serves the web chat
# at http://127.0.0.1:8787/, answered by the echo agent. A line starting with "# " is an
# example: remove the "# " to use it. Secrets are ${ENV_VAR} references, read from the
# gateway's environment when it starts (never written here). Check the file with
# `chatkernel config validate`; `chatkernel config get KEY` shows any key's effective
# value, defaults included.

[gateway]
listen = "127.0.0.1:8787"             # HOST:PORT; port 0 picks a free one
# control_token = "${CHATKERNEL_CONTROL_TOKEN}"   # required to listen beyond this machine

[agent]
kind = "echo"                         # echo (repeats the message) | command | openai
# command = ["llm", "-m", "gpt-4o-mini"]          # kind = "command": one run per turn
# model = "gpt-4o-mini"                           # kind = "openai": any compatible API
# base_url = "http://127.0.0.1:11434/v1"
# api_key_env = "OPENAI_API_KEY"                  # the variable that holds its key

[queue]
mode = "collect"                      # collect | followup | interrupt | steer
debounce_ms = 1000
cap = 20
drop = "old"                          # old | new | summarize
max_concurrent = 4

# Heartbeats: a periodic agent turn, off until this table is here. Each run is an agent
# turn: with a paid model, every = "30m" is 48 paid turns a day (docs/heartbeats.md).
# [heartbeat]
# every = "30m"
# target = "last"                     # none | last | a channel name
"""


def starter_config(channels: list[tuple[str, str, str]] = ()) -> Any:
    """What ``chatkernel config init`` writes, as a tomlkit document (comments kept):
    the kernel's main settings, then an example for each installed channel
    (``(name, where it comes from, Channel.config_example)``, the web chat first), the
    web chat's on and every other commented out."""
    import tomlkit

    parts = [STARTER_HEADER]
    for name, source, example in sorted(channels, key=lambda c: (c[0] != WEBCHAT, c[0])):
        example = example.strip("\n")
        title = f"# -- {name} ({source}) "
        parts.append("\n" + title + "-" * max(3, 88 - len(title)) + "\n")
        if not example:
            parts.append(f"# No example: its documentation says what "
                         f"[channels.{name}.accounts.<name>] takes.\n")
            continue
        if name == WEBCHAT:
            parts.append("# On: these tables show its defaults. Without them it runs when the "
                         "gateway listens\n# on 127.0.0.1 only; with them, wherever it "
                         "listens. It admits everyone who reaches it.\n")
            parts.append(example + "\n")
            continue
        parts.append('# Off: to turn it on, remove the "# " before each line below.\n')
        names = list(dict.fromkeys(m[1] for m in _ENV_REF.finditer(example) if m[1]))
        if names:
            parts.append(f"# It reads {', '.join(names)} from the gateway's environment.\n")
        parts.append("".join(f"# {line}\n" for line in example.splitlines()))
    return tomlkit.parse("".join(parts))
