"""Deprecated config keys: still read, with one warning each, and reported by doctor.

:data:`DEPRECATED` is the kernel's own table: dotted keys from the top of the file, ``*``
standing for any one table name (an agent's, a channel's, an account's), each with a
:class:`~chatkernel.sdk.accounts.Deprecated` saying since when and what replaces it. A
channel declares its account keys the same way, on its account model
(``AccountConfig.deprecated_keys``, keys from the account's table), so the kernel names
no channel.

Loading (:func:`upgrade`, which :func:`~chatkernel.core.config.parse` and
:func:`~chatkernel.core.config.validate_account` call before validating) moves a
deprecated key's value to its replacement, or drops a key that has none; when the
replacement is set as well, the replacement wins. Each key found is logged once per
file, saying what to change; ``chatkernel doctor`` reports it (:func:`find_deprecated`).
Only the keys in a table are taken: any other unknown key is still an error.
"""

from __future__ import annotations

import copy
import logging
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chatkernel.core.config.env import holds_env_reference, is_secret_key
from chatkernel.sdk.accounts import Deprecated

log = logging.getLogger("chatkernel.config")

#: The kernel's deprecated keys. Empty: no key of the kernel's sections has been renamed
#: or dropped yet. An entry reads
#: ``"gateway.old_name": Deprecated("chatkernel 0.9", replacement="gateway.new_name")``.
DEPRECATED: dict[str, Deprecated] = {}

#: ``(file, key)`` already warned about: a config is read several times by one process
#: (its kernel sections, each account, a reload), and each key is said once.
_warned: set[tuple[str, str]] = set()


@dataclass(frozen=True, slots=True)
class DeprecatedKey:
    """A deprecated key found in a config: the key as written, the key that replaces
    it there (None: dropped), whether that one is set too, and the entry."""

    key: str
    replacement: str | None
    entry: Deprecated
    #: The replacement is set as well: the old key's value is ignored.
    shadowed: bool = False
    #: Its value, as written (None for a secret or a table: not shown in a fix).
    shown_value: str | None = None

    @property
    def message(self) -> str:
        """What was found, and what loading does with it."""
        said = f"{self.key} is deprecated since {self.entry.since}"
        if self.replacement is None:
            return f"{said} and ignored" + (f": {self.entry.reason}" if self.entry.reason
                                            else "")
        if self.shadowed:
            return f"{said}: {self.replacement} replaces it and is set too, so its value is " \
                   "ignored"
        return f"{said}: {self.replacement} replaces it (its value is taken for " \
               f"{self.replacement} until then)"

    def fix(self, path: Path | None) -> str:
        """The commands (or the edit) that leave the key behind."""
        unset = f"chatkernel config unset {self.key}"
        if self.replacement is None or self.shadowed:
            return unset
        if self.shown_value is not None:
            return (f"chatkernel config set {self.replacement} "
                    f"{shlex.quote(self.shown_value)} && {unset}")
        where = f" in {path}" if path is not None else ""
        return f"rename {self.key} to {self.replacement}{where}, keeping its value"


def account_deprecations(model: type) -> dict[str, Deprecated]:
    """An account model's deprecated keys, its bases' included (a subclass's win)."""
    table: dict[str, Deprecated] = {}
    for cls in reversed(getattr(model, "__mro__", ())):
        table.update(vars(cls).get("deprecated_keys") or {})
    return table


def find(raw: Mapping[str, Any], table: Mapping[str, Deprecated], *,
         prefix: str = "") -> list[DeprecatedKey]:
    """Every key of ``table`` present in ``raw`` (a table of the config as written;
    ``prefix``: its dotted place in the file, for the keys reported)."""
    found = []
    for pattern, entry in table.items():
        for parts, names in _matches(raw, pattern.split(".")):
            replacement = None if entry.replacement is None else \
                _filled(entry.replacement.split("."), names)
            shadowed = replacement is not None and _get(raw, replacement) is not None
            value = _get(raw, parts)
            key = ".".join(parts)
            found.append(DeprecatedKey(
                key=_joined(prefix, key),
                replacement=None if replacement is None else
                _joined(prefix, ".".join(replacement)),
                entry=entry, shadowed=shadowed, shown_value=_shown(key, value)))
    return sorted(found, key=lambda item: item.key)


def upgrade(raw: dict[str, Any], table: Mapping[str, Deprecated], *, prefix: str = "",
            path: Path | None = None) -> dict[str, Any]:
    """``raw`` as the current keys say it: each deprecated key's value moved to its
    replacement (unless that one is set) or dropped, with one warning per file and key.
    ``raw`` itself is left alone; it is returned as it is when no key is deprecated."""
    if not table:
        return raw
    found = []
    for pattern, entry in table.items():
        found += [(parts, names, entry) for parts, names in _matches(raw, pattern.split("."))]
    if not found:
        return raw
    upgraded = copy.deepcopy(raw)
    for parts, names, entry in found:
        if _get(upgraded, parts) is None:
            continue  # (two entries for one key: moved already)
        value = _pop(upgraded, parts)
        replacement = None if entry.replacement is None else \
            _filled(entry.replacement.split("."), names)
        if replacement is not None and _get(upgraded, replacement) is None:
            _put(upgraded, replacement, value)
    for item in find(raw, table, prefix=prefix):
        _warn(item, path)
    return upgraded


def find_deprecated(raw: Mapping[str, Any], account_models: Mapping[str, type]
                    ) -> list[DeprecatedKey]:
    """Every deprecated key of a config as written: the kernel's, and each account's by
    its channel's model (``account_models``: the installed channels' models by name)."""
    found = find(raw, DEPRECATED)
    channels = raw.get("channels")
    for name, section in (channels.items() if isinstance(channels, Mapping) else ()):
        model = account_models.get(name)
        accounts = section.get("accounts") if isinstance(section, Mapping) else None
        if model is None or not isinstance(accounts, Mapping):
            continue
        table = account_deprecations(model)
        for account, data in accounts.items():
            if isinstance(data, Mapping):
                found += find(data, table, prefix=f"channels.{name}.accounts.{account}")
    return found


def _warn(item: DeprecatedKey, path: Path | None) -> None:
    memo = (str(path), item.key)
    if memo in _warned:
        return
    _warned.add(memo)
    where = f"{path}: " if path is not None else ""
    log.warning("%s%s; fix: %s", where, item.message, item.fix(path))


def _matches(raw: Mapping[str, Any], pattern: list[str], names: tuple[str, ...] = (),
             parts: tuple[str, ...] = ()) -> Iterator[tuple[list[str], tuple[str, ...]]]:
    """``(key parts, the names the wildcards stood for)`` of each key of ``raw`` the
    dotted ``pattern`` matches."""
    head, rest = pattern[0], pattern[1:]
    keys = [key for key in raw if isinstance(key, str)] if head == "*" else \
        [head] if head in raw else []
    for key in keys:
        value = raw[key]
        found = names + (key,) if head == "*" else names
        if not rest:
            yield [*parts, key], found
        elif isinstance(value, Mapping):
            yield from _matches(value, rest, found, (*parts, key))


def _filled(parts: list[str], names: tuple[str, ...]) -> list[str]:
    """A replacement's parts with its wildcards filled, in order, by ``names``."""
    filled, given = [], iter(names)
    for part in parts:
        filled.append(next(given, part) if part == "*" else part)
    return filled


def _get(raw: Mapping[str, Any], parts: list[str]) -> Any:
    node: Any = raw
    for part in parts:
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _pop(raw: dict[str, Any], parts: list[str]) -> Any:
    node = raw
    for part in parts[:-1]:
        node = node[part]
    return node.pop(parts[-1])


def _put(raw: dict[str, Any], parts: list[str], value: Any) -> None:
    node = raw
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def _joined(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _shown(key: str, value: Any) -> str | None:
    """The value as ``config set`` takes it, unless it is a table or a secret (an
    ``${ENV}`` reference is no secret: it is shown as written)."""
    if isinstance(value, (dict, list)) or value is None:
        return None
    if is_secret_key(key.rsplit(".", 1)[-1]) and not (
            isinstance(value, str) and holds_env_reference(value)):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
