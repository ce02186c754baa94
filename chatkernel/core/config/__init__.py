"""Configuration: TOML on disk, pydantic models in memory, ``${ENV}`` secrets.

The file lives at ``$CHATKERNEL_HOME/config.toml`` (``~/.chatkernel`` by
default) unless ``CHATKERNEL_CONFIG`` or ``--config`` names another. It is read
with tomllib; ``config set``/``unset`` edit it through tomlkit, which keeps the
person's comments and layout, and every write has mode 0600 because it may
hold secrets. Every error a user can meet names the file, the dotted key and
what was expected.

The package, by concern:

- :mod:`~chatkernel.core.config.schema`: the sections' models, the channels a gateway runs;
- :mod:`~chatkernel.core.config.files`: where the file is, reading and writing it;
- :mod:`~chatkernel.core.config.env`: ``${ENV}`` references, secrets and redaction;
- :mod:`~chatkernel.core.config.envfile`: ``$CHATKERNEL_HOME/.env``, where the secrets live;
- :mod:`~chatkernel.core.config.validation`: parsing and validating, errors worded;
- :mod:`~chatkernel.core.config.hints`: the did-you-mean of an unknown name;
- :mod:`~chatkernel.core.config.deprecations`: keys still read on their way out;
- :mod:`~chatkernel.core.config.keys`: dotted keys, effective values, CLI values;
- :mod:`~chatkernel.core.config.starter`: the file ``chatkernel config init`` writes.

Callers import the names below from the package (``from chatkernel.core import config
as cfg``). :class:`ConfigError` is the kit's (:mod:`chatkernel.sdk.errors`), so the CLI
can catch it without importing pydantic.
"""

from __future__ import annotations

from chatkernel.core.config.env import (
    REDACTED,
    EnvNotSet,
    env_name_for,
    env_values,
    holds_env_reference,
    is_secret_field,
    is_secret_key,
    kernel_secrets,
    must_resolve,
    redact,
    resolve_env,
    secret_values,
)
from chatkernel.core.config.envfile import (
    env_file_path,
    format_env,
    load_env_file,
    parse_env,
    read_env_file,
)
from chatkernel.core.config.files import (
    config_path,
    home_dir,
    os_reason,
    read_document,
    read_raw,
    write_raw,
)
from chatkernel.core.config.keys import (
    Effective,
    as_typed,
    effective_values,
    format_value,
    get_key,
    guessed_key,
    inline_value,
    key_field,
    parse_value,
    set_key,
    split_key,
    takes_text,
    unset_key,
)
from chatkernel.core.config.schema import (
    ActiveHours,
    AgentConfig,
    ChannelConfig,
    ChannelQueueConfig,
    DropPolicy,
    GatewayConfig,
    HealthConfig,
    HeartbeatConfig,
    KernelConfig,
    PresenceConfig,
    QueueConfig,
    QueueMode,
    Section,
    SendPolicyConfig,
    SendRule,
    SessionsConfig,
    StoreConfig,
    check_timezone,
    effective_accounts,
    effective_channels,
    listens_locally,
    with_implied,
)
from chatkernel.core.config.jobs import JobConfig, TriggerConfig
from chatkernel.core.config.starter import STARTER_HEADER, starter_config
from chatkernel.core.config.hints import did_you_mean
from chatkernel.core.config.validation import (
    all_problems,
    check_channel_keys,
    load,
    parse,
    unknown_channel,
    validate_account,
    validation_error,
)
from chatkernel.sdk.accounts import AccountConfig, HealthMonitorConfig, HeartbeatVisibility
from chatkernel.sdk.errors import ConfigError

# [jobs] and [triggers] are annotated by name in the schema (config/jobs.py imports it).
KernelConfig.model_rebuild(_types_namespace={"JobConfig": JobConfig,
                                             "TriggerConfig": TriggerConfig})

__all__ = [
    "REDACTED", "STARTER_HEADER",
    "AccountConfig", "ActiveHours", "AgentConfig", "ChannelConfig", "ChannelQueueConfig",
    "ConfigError", "DropPolicy", "Effective", "EnvNotSet", "GatewayConfig", "HealthConfig",
    "HealthMonitorConfig", "HeartbeatConfig", "HeartbeatVisibility", "KernelConfig",
    "PresenceConfig", "QueueConfig", "QueueMode", "Section", "SendPolicyConfig", "SendRule",
    "SessionsConfig", "StoreConfig", "all_problems", "as_typed", "check_channel_keys", "check_timezone", "config_path",
    "did_you_mean", "effective_accounts", "effective_channels", "effective_values",
    "env_file_path", "env_name_for", "env_values", "format_env", "format_value", "get_key",
    "guessed_key", "holds_env_reference", "home_dir", "inline_value", "is_secret_field",
    "is_secret_key", "kernel_secrets", "key_field", "listens_locally", "load",
    "load_env_file", "must_resolve", "os_reason", "parse", "parse_env", "parse_value",
    "read_document", "read_env_file", "read_raw", "redact", "resolve_env", "secret_values",
    "set_key", "split_key", "starter_config", "takes_text", "unknown_channel", "unset_key",
    "validate_account", "validation_error", "with_implied", "write_raw",
    "JobConfig", "TriggerConfig",
]
