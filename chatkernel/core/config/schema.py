"""The config file's sections as pydantic models, and the channels a gateway runs.

Every section forbids unknown keys: a typo is an error, never a silently ignored
setting. A channel's account tables are validated by that channel's own model
(``Channel.account_model``, :func:`~chatkernel.core.config.validate_account`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from chatkernel.core.config.files import home_dir
from chatkernel.core.config.hints import did_you_mean
from chatkernel.sdk.accounts import HealthMonitorConfig, HeartbeatVisibility

if TYPE_CHECKING:
    from chatkernel.core.config.jobs import JobConfig, TriggerConfig
    from chatkernel.core.plugins import PluginManager


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
    """``[agent]`` (the agent named ``default``) or ``[agents.<name>]``: one agent of the
    gateway (docs/agents.md)."""

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
    #: The echo agent types its answer a word every this many milliseconds, as a model
    #: streams (live replies can be tried with no model); 0: it answers at once.
    echo_typing_ms: int = Field(0, ge=0, le=10_000)
    #: The agent's heartbeat settings, merged over ``[heartbeat]``.
    heartbeat: "HeartbeatConfig | None" = None
    #: Where relative ``MEDIA:`` paths and HEARTBEAT.md are; default: the gateway's
    #: workspace for ``default``, ``<gateway workspace>/agents/<name>`` for another.
    workspace: Path | None = None
    #: Overrides the accounts' ``access_level`` in this agent's sessions (what files
    #: its replies may send); unset: each account's own.
    access_level: Literal["readonly", "standard", "full"] | None = None
    #: Replaces ``[send_policy]`` for this agent's sessions; unset: ``[send_policy]``.
    send_policy: "SendPolicyConfig | None" = None

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
    #: A store backend: ``sqlite`` or ``redis`` (``chatkernel.core.store.BACKENDS``).
    backend: str = "sqlite"
    path: Path | None = None  # sqlite: default $CHATKERNEL_HOME/state.db
    url: str | None = None  # redis: default redis://127.0.0.1:6379/0
    #: redis: every key starts with it, so several gateways (or tests) can share a server.
    prefix: str = Field("chatkernel:", min_length=1)
    # How long finished journal entries (the dedupe keys) are kept: a platform
    # redelivering a message older than this would have it answered again.
    journal_retention_days: float = Field(7, gt=0)
    # A shared store (redis): how long an instance's lease on an account lasts
    # unrenewed (renewed every quarter of it); another instance takes the account
    # over within this long and a quarter after its owner dies, and an owner stalled
    # for less than three quarters of it keeps its accounts (docs/scale-out.md).
    lease_seconds: float = Field(3, ge=1, le=600)

    @field_validator("backend")
    @classmethod
    def _installed(cls, value: str) -> str:
        from chatkernel.core.store import BACKENDS

        # Names only: no backend is imported to check one is there.
        installed = sorted(BACKENDS)
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




class HealthConfig(Section):
    """``[health]``: probes and the cached snapshot."""

    probe_timeout_ms: int = Field(10_000, gt=0)
    refresh_seconds: float = Field(60, gt=0)  # background probes for the cached snapshot
    #: Each read of the store a snapshot makes (a hung store makes the snapshot red,
    #: it does not hold it up).
    store_timeout_ms: int = Field(1_000, gt=0)


class LoggingConfig(Section):
    """``[logging]``: the gateway's log file in ``$CHATKERNEL_HOME/logs/`` (stderr keeps
    its lines whatever this says; docs/operations.md)."""

    file: bool = True
    max_bytes: int = Field(10 * 1024 ** 2, ge=10_000)
    backups: int = Field(5, ge=1, le=1000)
    max_age_days: float = Field(14, gt=0)


class TelemetryConfig(Section):
    """``[telemetry]``: OpenTelemetry traces sent over OTLP/HTTP (the ``otel`` extra;
    docs/operations.md, "Telemetry"). Without the table nothing of OpenTelemetry is
    imported. A restart applies a change."""

    #: The collector's OTLP/HTTP base URL; spans go to ``<otlp_endpoint>/v1/traces``.
    otlp_endpoint: str = "http://127.0.0.1:4318"
    #: The ``service.name`` of the spans' resource.
    service_name: str = Field("chatkernel", min_length=1, max_length=200)
    #: The share of messages traced (0 to 1), decided on each trace's root span.
    sample_ratio: float = Field(1.0, ge=0, le=1)
    #: Put message text into the spans (the inbound text, the agent's prompt and its
    #: answer): off, since a trace store is seldom kept as private as the chats.
    capture_content: bool = False

    @field_validator("otlp_endpoint")
    @classmethod
    def _base_url(cls, value: str) -> str:
        url = value.strip().rstrip("/")
        if not re.fullmatch(r"https?://[^/\s?#]+(/[^\s?#]*)?", url):
            raise ValueError(f"expected the collector's OTLP/HTTP URL such as "
                             f"http://127.0.0.1:4318, got {value!r}")
        if url.endswith("/v1/traces"):  # given whole: the exporter's path is added once
            url = url[:-len("/v1/traces")]
        return url


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
    #: Live replies (chatkernel.sdk.live) for the channel's accounts: "on" or "off";
    #: unset: the channel's default (on where the platform can show a reply in progress).
    streaming: Literal["off", "on"] | None = None
    #: The least time between two updates of a live reply; unset: the channel's.
    streaming_interval_ms: int | None = Field(None, ge=100, le=60_000)

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


#: An agent's name: ``[agents.<name>]``, a binding's ``agent``, part of a session key.
AGENT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
#: A job's or a trigger's name (config/jobs.py).
JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: The agent that answers the chats no binding matches.
DEFAULT_AGENT = "default"
#: A binding's match keys, in the order they are shown.
MATCH_KEYS = ("channel", "account", "chat", "chat_type", "thread")


class Binding(Section):
    """``[[bindings]]``: the chats one agent answers. Every match key given must match;
    the rule matching the most keys wins, ties by list order (docs/agents.md)."""

    agent: str
    channel: str | None = None
    account: str | None = None
    chat: str | None = None  # the chat (or peer) id, as the channel gives it
    chat_type: Literal["direct", "group"] | None = None
    thread: str | None = None

    @field_validator("channel", "account", "chat", "thread")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("expected a non-empty name (leave the key out to match any)")
        return value

    def match_keys(self) -> dict[str, str]:
        """The match keys this rule sets, by name."""
        return {key: getattr(self, key) for key in MATCH_KEYS
                if getattr(self, key) is not None}

    def describe(self) -> str:
        """``channel=slack account=main``: the rule's match keys in words."""
        keys = self.match_keys()
        return " ".join(f"{key}={value}" for key, value in keys.items()) or "every chat"


AgentConfig.model_rebuild()  # its heartbeat and send policy tables are defined above


class KernelConfig(Section):
    """The whole config file."""

    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    #: Named agents besides (or instead of) ``[agent]``, the agent ``default``.
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    #: Which agent answers which chats, in order (docs/agents.md).
    bindings: list[Binding] = Field(default_factory=list)
    queue: QueueConfig = Field(default_factory=QueueConfig)
    sessions: SessionsConfig = Field(default_factory=SessionsConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    heartbeat: HeartbeatConfig = Field(default_factory=HeartbeatConfig)
    health_monitor: HealthMonitorConfig = Field(default_factory=HealthMonitorConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    presence: PresenceConfig = Field(default_factory=PresenceConfig)
    send_policy: SendPolicyConfig = Field(default_factory=SendPolicyConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    #: OpenTelemetry traces (None: no ``[telemetry]`` table, off).
    telemetry: TelemetryConfig | None = None
    channels: dict[str, ChannelConfig] = Field(default_factory=dict)
    #: Scheduled jobs and inbound triggers (docs/jobs.md): their models are in
    #: config/jobs.py, resolved when the package is imported (config/__init__.py).
    jobs: dict[str, JobConfig] = Field(default_factory=dict)
    triggers: dict[str, TriggerConfig] = Field(default_factory=dict)

    @field_validator("jobs", "triggers")
    @classmethod
    def _job_names(cls, value: dict[str, Any], info: Any) -> dict[str, Any]:
        what = "job" if info.field_name == "jobs" else "trigger"
        for name in value:  # a key in the store, a part of a URL
            if not JOB_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a {what} name: expected letters, "
                                 "digits, -, _ and . (such as morning-alerts)")
        return value

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

    @field_validator("agents")
    @classmethod
    def _agent_names(cls, value: dict[str, AgentConfig]) -> dict[str, AgentConfig]:
        for name in value:
            if not AGENT_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an agent name: expected lower-case "
                                 "letters, digits, - and _ (such as work or family-bot)")
        return value

    def workspace(self) -> Path:
        return (self.gateway.workspace or home_dir() / "workspace").expanduser()

    def named_agents(self) -> dict[str, AgentConfig]:
        """Every agent of the gateway by name: ``[agents.*]``, and ``[agent]`` as
        ``default`` when the config has no ``[agents.*]`` or writes an ``[agent]`` table.
        A config with ``[agents.*]`` but neither ``[agent]`` nor ``[agents.default]``
        has no ``default``: the chats no binding matches go unanswered."""
        agents = dict(self.agents)
        if DEFAULT_AGENT not in agents and (not agents or "agent" in self.model_fields_set):
            agents = {DEFAULT_AGENT: self.agent, **agents}
        return agents

    def default_agent(self) -> AgentConfig | None:
        """The agent answering the chats no binding matches (None: they go unanswered)."""
        return self.named_agents().get(DEFAULT_AGENT)

    def agent_key(self, name: str, key: str) -> str:
        """The dotted key of agent ``name``'s ``key`` in this config: ``agent.<key>``
        for the default agent written as ``[agent]``, else ``agents.<name>.<key>``."""
        if name == DEFAULT_AGENT and DEFAULT_AGENT not in self.agents:
            return f"agent.{key}"
        return f"agents.{name}.{key}"

    def agent_workspace(self, name: str) -> Path:
        """Agent ``name``'s workspace: its ``workspace``, else the gateway's for
        ``default`` and ``<gateway workspace>/agents/<name>`` for another."""
        agent = self.named_agents().get(name)
        if agent is not None and agent.workspace is not None:
            return agent.workspace.expanduser()
        return self.workspace() if name == DEFAULT_AGENT else self.workspace() / "agents" / name

    def config_heartbeat_wanted(self) -> bool:
        """Whether the config asks for the config heartbeat (the default agent's): a
        ``[heartbeat]`` or an ``[agent.heartbeat]`` table, even an empty one. Without
        either it is off (a manual wake still runs it): its defaults (every 30m) apply
        once it is asked for. Off with no default agent."""
        default = self.default_agent()
        if default is None:  # nobody would run it
            return False
        return ("heartbeat" in self.model_fields_set or bool(self.heartbeat.model_fields_set)
                or (default is not None and default.heartbeat is not None))

    def agent_heartbeats(self) -> list[str]:
        """The agents besides ``default`` with a heartbeat of their own: those whose
        table has a ``heartbeat`` table (``[agents.<name>.heartbeat]``)."""
        return sorted(name for name, agent in self.named_agents().items()
                      if name != DEFAULT_AGENT and agent.heartbeat is not None)

    def store_path(self) -> Path:
        return (self.store.path or home_dir() / "state.db").expanduser()


# -- the channels a gateway runs -------------------------------------------------------


def listens_locally(config: KernelConfig) -> bool:
    """Whether ``gateway.listen`` is reachable from this machine only."""
    from chatkernel.core.config.listen import is_loopback

    host = config.gateway.listen.rpartition(":")[0].strip("[]")
    return is_loopback(host)


def effective_channels(config: KernelConfig,
                       pm: PluginManager | None = None) -> dict[str, ChannelConfig]:
    """``[channels.*]`` as the gateway runs them (``defaults`` left out), with the
    accounts plugins imply (the ``implied_accounts`` hook of ``pm``, by default the
    process's plugin manager) for a channel the config gives no account of its own:
    one the config does not name, or whose table lists no account. An ``enabled =
    false`` in its table still turns such a channel off.
    """
    from chatkernel.core.plugins import get_plugin_manager, implied_accounts

    channels = {name: section for name, section in config.channels.items()
                if name != "defaults"}
    implied = implied_accounts(pm if pm is not None else get_plugin_manager(), config)
    for name, accounts in implied.items():
        channels[name] = with_implied(channels.get(name), accounts)
    return channels


def with_implied(section: ChannelConfig | None,
                 accounts: dict[str, dict[str, Any]]) -> ChannelConfig:
    """A channel's table (None: the config has none) as the gateway runs it, given the
    accounts a plugin implies for it: they count only when the table lists none."""
    if section is None:
        return ChannelConfig(accounts=accounts)
    return section if section.accounts else section.model_copy(update={"accounts": accounts})


def effective_accounts(config: KernelConfig, pm: PluginManager | None = None,
                       ) -> list[tuple[str, str, bool, dict[str, Any]]]:
    """``(channel, account, enabled, raw table)`` for every account of
    :func:`effective_channels` (implied ones included)."""
    return [(name, account, bool(section.enabled and raw.get("enabled", True) is not False),
             raw)
            for name, section in effective_channels(config, pm).items()
            for account, raw in section.accounts.items()]
