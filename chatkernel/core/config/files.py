"""The config file on disk: where it is, reading it (tomllib), and writing it back.

Edits go through tomlkit, which keeps the person's comments and layout (the helpers
below keep the comments above a table header above it when a key is added); a plain
dict is written with tomli-w. Every write is atomic and has mode 0600 from the first
byte, because the file may hold secrets.
"""

from __future__ import annotations

import os
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from chatkernel.sdk.errors import ConfigError

# -- locations -------------------------------------------------------------------------


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


# -- reading and writing ---------------------------------------------------------------


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


# -- comments kept in place ------------------------------------------------------------


def keep_notes_in_place(parent: Any, table: Any, key: str, value: Any) -> None:
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
