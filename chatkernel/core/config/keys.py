"""Dotted keys (``channels.telegram.accounts.main.allow_from``): get, set and unset
in the raw file, the effective value of a key (the file's or its default, as
``chatkernel config get`` shows it), the pydantic field a key names, and values
parsed from and formatted for the command line."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from chatkernel.core.config.files import keep_notes_in_place
from chatkernel.core.config.schema import ChannelConfig, KernelConfig, effective_channels
from chatkernel.core.config.hints import closest
from chatkernel.core.config.validation import did_you_mean, keys_beside, model_in, parse
from chatkernel.sdk.accounts import AccountConfig
from chatkernel.sdk.errors import ConfigError


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
    comments above a table header stay above it
    (:func:`~chatkernel.core.config.files.keep_notes_in_place`)."""
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
        keep_notes_in_place(parent, node, parts[-1], value)
    else:
        node[parts[-1]] = value


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
    except for an account setting asked of a channel (``channels.<name>.allow_from``),
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
                beside = keys_beside(KernelConfig, tuple(parts))
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
    the accounts plugins imply; None: not a key of a channel the gateway runs."""
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


def as_typed(key: str, value: Any,
             account_models: dict[str, type[BaseModel]] | None = None) -> Any:
    """``value`` for ``key`` as its field takes it, inside a table too: a whole number
    given for a field that holds text is its digits (``{phone_number_id =
    106540352242922}`` sets the id ``"106540352242922"``)."""
    if isinstance(value, dict):
        return {name: as_typed(f"{key}.{name}", item, account_models)
                for name, item in value.items()}
    if isinstance(value, int) and not isinstance(value, bool) and \
            takes_text(key_field(key, account_models)):
        return str(value)
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


def guessed_key(key: str, account_models: dict[str, type[BaseModel]] | None = None
                ) -> str | None:
    """The key ``key`` was likely meant to be when its last part is no key of its table
    (``channels.telegram.accounts.main.allow_fron``: ``...allow_from``); None when it is
    one, when its table is not known (a channel's own settings), or when none is close."""
    parts = key.split(".")
    if key_field(key, account_models) is not None:
        return None
    if parts[0] == "channels":
        model = (account_models or {}).get(parts[1]) if len(parts) >= 3 else None
        if len(parts) < 5 or parts[2] != "accounts" or model is None:
            return None
        beside = keys_beside(model, tuple(parts[4:]))
    else:
        beside = keys_beside(KernelConfig, tuple(parts))
    guess = closest(parts[-1], beside)
    return ".".join([*parts[:-1], guess]) if guess else None


def _field_in(model: type[BaseModel] | None, parts: list[str]) -> Any:
    i = 0
    while model is not None and i < len(parts):
        field = model.model_fields.get(parts[i])
        if field is None:
            return None
        if i == len(parts) - 1:
            return field
        model, keyed = model_in(field.annotation)
        i += 2 if keyed else 1
    return None


def takes_text(field: Any) -> bool:
    """Whether a field holds text only (``str``, ``str | None``, a path)."""
    if field is None:
        return False
    kinds = {arg for arg in (get_args(field.annotation) or (field.annotation,))
             if arg is not type(None)}
    return bool(kinds) and kinds <= {str, Path}


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
