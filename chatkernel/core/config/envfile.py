"""The env file, ``$CHATKERNEL_HOME/.env``: the one home of the secrets that the
config's ``${NAME}`` references name, read by ``chatkernel run`` (and each reload) and
by every other command alike.

One ``KEY=value`` a line, as a shell or systemd's ``EnvironmentFile`` reads it::

    # comments and blank lines are skipped
    TELEGRAM_BOT_TOKEN=123456:ABC-DEF
    export SLACK_BOT_TOKEN="xoxb-..."      # an optional `export `, a comment after a value
    GREETING='single quotes: $ and \\ taken as written'

A double-quoted value knows the escapes ``\\\\``, ``\\"``, ``\\n``, ``\\t``, ``\\r`` and
``\\$``; nothing is expanded (``${OTHER}`` in a value stays as written). Anything else
(a line without ``=``, a name that is not a variable's, a quote left open) is an error
naming the file and the line, never skipped: a secret half read is worse than none.

The file must be the owner's alone (mode 0600): one that the group or others may
read is refused, as ssh refuses a private key. The real environment wins: a variable
set there is not replaced by the file's.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import MutableMapping
from pathlib import Path

from chatkernel.core.config.files import home_dir, os_reason
from chatkernel.sdk.errors import ConfigError

#: The file's name, in the home.
ENV_FILE = ".env"
#: Names the file cannot set: they say where the file is, or are the gateway's own.
NOT_FROM_FILE = frozenset({"CHATKERNEL_HOME", "CHATKERNEL_CONFIG", "CHATKERNEL_SECRETS_FD"})

_LINE = re.compile(r"\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)")
_BARE = re.compile(r"[^\s'\"\\$`]*")
_SAFE = re.compile(r"[A-Za-z0-9_./:@%+,=-]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n", "t": "\t", "r": "\r", "$": "$"}
_ESCAPED = {value: f"\\{key}" for key, value in _ESCAPES.items()}


def env_file_path(home: Path | None = None) -> Path:
    """``$CHATKERNEL_HOME/.env`` (or ``home``'s)."""
    return (home or home_dir()) / ENV_FILE


def parse_env(text: str, *, path: Path | None = None) -> dict[str, str]:
    """The variables of an env file's text (see the module); ConfigError naming the
    line of the first one that is not ``KEY=value``."""
    found: dict[str, str] = {}
    for number, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _LINE.fullmatch(line)
        if match is None:
            raise ConfigError(f"line {number}: expected KEY=value (a variable's name, "
                              "then =)", path=path)
        name, rest = match[1], match[2]
        try:
            found[name] = _value(rest)
        except ValueError as exc:
            raise ConfigError(f"line {number} ({name}): {exc}", path=path) from None
        if name in NOT_FROM_FILE:
            raise ConfigError(f"line {number}: {name} cannot be set in the env file (it says "
                              "where the file is, or is the gateway's own)", path=path)
    return found


def _value(rest: str) -> str:
    """A value as written after ``=``, with what may follow it (blanks, a comment)."""
    if rest[:1] == "'":
        end = rest.find("'", 1)
        if end == -1:
            raise ValueError("a single quote is not closed on its line")
        value, after = rest[1:end], rest[end + 1:]
    elif rest[:1] == '"':
        chars: list[str] = []
        i = 1
        while True:
            if i >= len(rest):
                raise ValueError("a double quote is not closed on its line")
            char = rest[i]
            if char == '"':
                break
            if char == "\\":
                escaped = _ESCAPES.get(rest[i + 1:i + 2])
                if escaped is None:
                    raise ValueError(f"unknown escape {rest[i:i + 2]!r} (known: \\\\ \\\" "
                                     "\\n \\t \\r \\$)")
                chars.append(escaped)
                i += 2
                continue
            chars.append(char)
            i += 1
        value, after = "".join(chars), rest[i + 1:]
    else:
        value = _BARE.match(rest)[0]  # type: ignore[index]
        after = rest[len(value):]
    after = after.strip()
    if after and not after.startswith("#"):
        raise ValueError("a value with blanks, quotes, $, ` or \\ is quoted: "
                         "KEY=\"...\" (or KEY='...', taken as written)")
    return value


def format_env(name: str, value: str) -> str:
    """One line of an env file that :func:`parse_env` reads back as ``name=value``."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"not a variable's name: {name!r}")
    if _SAFE.fullmatch(value):
        return f"{name}={value}"
    return f'{name}="{"".join(_ESCAPED.get(char, char) for char in value)}"'


def read_env_file(path: Path | None = None) -> dict[str, str]:
    """The env file's variables (none when there is no file); ConfigError when it is
    readable by the group or others, or cannot be read or parsed."""
    path = env_file_path() if path is None else path
    try:
        with path.open("rb") as handle:
            mode = stat.S_IMODE(os.fstat(handle.fileno()).st_mode)
            if mode & 0o077:
                raise ConfigError(
                    f"refused: mode {mode:04o} lets the group or others read it, and it "
                    f"holds secrets; make it the owner's alone: chmod 600 {path}", path=path)
            data = handle.read()
    except (FileNotFoundError, NotADirectoryError):  # no file (or no home: said elsewhere)
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot be read: {os_reason(exc, path)}", path=path) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8", path=path) from None
    return parse_env(text, path=path)


def apply_env_file(environ: MutableMapping[str, str], taken: dict[str, str],
                   path: Path | None = None) -> list[str]:
    """Set in ``environ`` the env file's variables it does not set itself, and return
    their names. ``taken``: the variables a previous call set (updated here), which the
    file's may change or remove, as a reload reads the file again; the rest of
    ``environ`` is the real environment, which wins."""
    values = read_env_file(path)
    for name, value in list(taken.items()):
        if environ.get(name) != value:  # changed since by something else: no longer ours
            del taken[name]
        elif name not in values:
            del environ[name]
            del taken[name]
    for name, value in values.items():
        if name in environ and name not in taken:
            continue
        environ[name] = value
        taken[name] = value
    return sorted(taken)


#: What this process took from its home's env file into ``os.environ``.
_TAKEN: dict[str, str] = {}


def load_env_file() -> list[str]:
    """Read ``$CHATKERNEL_HOME/.env`` into ``os.environ`` (again: what changed in the
    file since the last read applies, the real environment still wins); the names
    taken from it."""
    return apply_env_file(os.environ, _TAKEN)
