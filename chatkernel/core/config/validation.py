"""From raw TOML to validated models, and how a config error is worded.

``${ENV}`` references are resolved first; pydantic's errors become one ConfigError
naming the file, each dotted key and what was expected, with a did-you-mean for an
unknown key or value. A secret's value is never shown, even when malformed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from chatkernel.catalog import CHANNEL_DISTRIBUTIONS
from chatkernel.core.config.deprecations import DEPRECATED, account_deprecations, upgrade
from chatkernel.core.config.env import is_secret_key, resolve_env
from chatkernel.core.config.files import config_path, read_raw
from chatkernel.core.config.hints import did_you_mean
from chatkernel.core.config.schema import DEFAULT_AGENT, ChannelConfig, KernelConfig
from chatkernel.sdk.errors import ConfigError


def _dotted(loc: tuple[Any, ...]) -> str:
    key = ""
    for part in loc:
        if isinstance(part, int):
            key += f"[{part}]"
        else:
            key += f".{part}" if key else str(part)
    return key


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
    distribution = CHANNEL_DISTRIBUTIONS.get(name)
    if distribution is not None:
        message += f": pip install {distribution} provides it"
    else:
        # Only the project's own are suggested: a package named from whatever was typed
        # would send a typo to whoever registered it.
        message += did_you_mean(name, set(installed) | set(CHANNEL_DISTRIBUTIONS))
    return ConfigError(message, path=path, key=key or f"channels.{name}")


def model_in(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model an annotation holds (``M``, ``M | None``, ``list[M]``, ``dict[str, M]``),
    and whether a table key comes before it in an error's location."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    for arg in get_args(annotation):
        found, keyed = model_in(arg)
        if found is not None:
            return found, keyed or get_origin(annotation) is dict
    return None, False


def keys_beside(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """The keys ``model`` accepts in the table holding ``loc``'s last part."""
    parts = [part for part in loc[:-1] if not isinstance(part, int)]
    node, i = model, 0
    while node is not None and i < len(parts):
        field = node.model_fields.get(parts[i])
        if field is None:
            return []
        node, keyed = model_in(field.annotation)
        i += 2 if keyed else 1
    return list(node.model_fields) if node is not None else []


def _expected(error: dict[str, Any], model: type[BaseModel] | None = None) -> str:
    if error["type"] == "extra_forbidden":
        loc = tuple(error["loc"])
        hint = did_you_mean(str(loc[-1]), keys_beside(model, loc)) if loc else ""
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
    return _worded(problems, path)


def _worded(problems: list[tuple[str | None, str]], path: Path | None) -> ConfigError:
    """One ConfigError for ``(key, message)`` problems; its ``problems`` keeps them."""
    if len(problems) == 1:
        key, message = problems[0]
        error = ConfigError(message, path=path, key=key)
    else:
        lines = "\n".join(f"  {key}: {message}" if key else f"  {message}"
                          for key, message in problems)
        error = ConfigError(f"{len(problems)} problems:\n{lines}", path=path)
    error.problems = problems  # type: ignore[attr-defined]
    return error


def problems_of(error: ConfigError) -> list[tuple[str | None, str]]:
    """The ``(key, message)`` problems a ConfigError names (one, or each of several)."""
    return getattr(error, "problems", None) or [(error.key, error.message)]


def all_problems(errors: Iterable[ConfigError], *, path: Path | None) -> ConfigError | None:
    """One ConfigError naming every problem of ``errors`` in order, a key's first only
    (an unset variable, not then the pattern its reference fails); None for none: how
    ``config validate`` reports them all at once."""
    problems: list[tuple[str | None, str]] = []
    keys: set[str] = set()
    for key, message in (problem for error in errors for problem in problems_of(error)):
        if key is None or key not in keys:
            problems.append((key, message))
        if key is not None:
            keys.add(key)
    return _worded(problems, path) if problems else None


def check_bindings(config: KernelConfig, *, path: Path | None = None) -> None:
    """Refuse a config whose agents or bindings cannot work as written: the default
    agent defined twice, a rule naming no agent of the config (a kind instead of an
    agent is said so), a rule that can never match because an earlier one matches the
    same chats. The ConfigError names the rule (``bindings[2]``)."""
    if "agent" in config.model_fields_set and DEFAULT_AGENT in config.agents:
        raise ConfigError("the default agent is defined twice, by [agent] and by "
                          "[agents.default]: keep one of them", path=path,
                          key="agents.default")
    agents = config.named_agents()
    seen: dict[tuple[tuple[str, str], ...], int] = {}
    for i, rule in enumerate(config.bindings):
        if rule.agent not in agents:
            kinds = sorted(name for name, agent in agents.items() if agent.kind == rule.agent)
            hint = (f": a binding names an agent, not a kind (agents of kind "
                    f"{rule.agent!r}: {', '.join(kinds)})" if kinds
                    else did_you_mean(rule.agent, agents))
            raise ConfigError(f"no agent named {rule.agent!r} (agents: "
                              f"{', '.join(sorted(agents)) or 'none'}){hint}", path=path,
                              key=f"bindings[{i}].agent")
        keys = tuple(sorted(rule.match_keys().items()))
        if keys in seen:
            raise ConfigError(f"can never match: bindings[{seen[keys]}] matches the same "
                              f"chats ({rule.describe()}) and comes first", path=path,
                              key=f"bindings[{i}]")
        seen[keys] = i


def parse(data: dict[str, Any], *, path: Path | None = None,
          environ: Mapping[str, str] | None = None,
          strict_env: bool | Collection[str] = True) -> KernelConfig:
    """Resolve ``${ENV}`` references and validate the kernel's sections (and the
    bindings against the agents: :func:`check_bindings`). ``strict_env``: where a
    reference to a variable that is not set is an error (:func:`~chatkernel.core.config.
    env.must_resolve`); elsewhere it is left as written: a command resolves only what it
    uses. A deprecated key (:mod:`~chatkernel.core.config.deprecations`) is taken as its
    replacement, with a warning."""
    data = upgrade(data, DEPRECATED, path=path)
    resolved = resolve_env(data, path=path, environ=environ, strict=strict_env)
    try:
        config = KernelConfig.model_validate(resolved)
    except ValidationError as exc:
        raise validation_error(exc, path=path, model=KernelConfig) from None
    check_bindings(config, path=path)  # agents and rules that cannot work as written
    return config


def load(path: str | os.PathLike[str] | None = None, *,
         environ: dict[str, str] | None = None) -> KernelConfig:
    """Read and validate the config file (a missing file gives the defaults)."""
    file = config_path(path)
    return parse(read_raw(file), path=file, environ=environ)


def validate_account(model: type[BaseModel], data: dict[str, Any], *, channel: str,
                     account: str, path: Path | None = None) -> BaseModel:
    """Validate one ``[channels.<channel>.accounts.<account>]`` table with its model (its
    deprecated keys taken as their replacements, with a warning)."""
    data = upgrade(data, account_deprecations(model),
                   prefix=f"channels.{channel}.accounts.{account}", path=path)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, path=path, prefix=("channels", channel, "accounts", account),
                               model=model) from None
