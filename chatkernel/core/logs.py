"""Logging set-up: readable lines by default, JSON lines on request, secrets redacted;
the gateway's log file in ``$CHATKERNEL_HOME/logs/`` (one JSON object a line, rotated by
size and age, 0600) and its reader (:func:`read_lines`, :func:`follow`), which
``chatkernel logs`` and the console use.

A log file that cannot be written (a full disk) is said once on stderr, with why, and
again once it is written again; meanwhile stderr has every line."""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from chatkernel.core.telemetry import log_ids


class SecretFilter(logging.Filter):
    """Replaces known secret values, and whatever matches a channel's secret
    patterns (a token inside a URL that no config holds), in every record.

    A pattern's first group, if it has one, is kept: ``(bot)\\d+:\\w+`` turns
    ``bot123:abc`` into ``bot***``.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets: set[str] = {s for s in secrets if s and len(s) >= 6}
        self.patterns: list[re.Pattern[str]] = []

    def add(self, *secrets: str) -> None:
        self.secrets.update(s for s in secrets if s and len(s) >= 6)

    def add_patterns(self, *patterns: re.Pattern[str]) -> None:
        for pattern in patterns:
            if pattern not in self.patterns:
                self.patterns.append(pattern)

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, "***")
        for pattern in self.patterns:
            text = pattern.sub(_keep_first_group, text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = self.redact(message)
        if record.exc_info and record.exc_info[1] is not None:
            # Render the traceback now, redacted, so the formatter cannot leak it.
            formatter = logging.Formatter()
            record.exc_text = self.redact(formatter.formatException(record.exc_info))
            record.exc_info = None
        if redacted != message or record.args:
            record.msg, record.args = redacted, None
        return True


def _keep_first_group(match: re.Match[str]) -> str:
    return (match[1] or "") + "***" if match.re.groups else "***"


#: What a record may carry (``extra={...}``) that a JSON line shows: the account's
#: channel and key (``chatkernel logs --channel`` filters on them).
EXTRA_FIELDS = ("channel", "account")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message (and exc, the
    :data:`EXTRA_FIELDS` a record carries, and ``trace_id`` and ``span_id`` while a
    traced span runs: core/telemetry.py)."""

    def format(self, record: logging.LogRecord) -> str:
        data = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in EXTRA_FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                data[name] = value
        if record.exc_text:
            data["exc"] = record.exc_text
        ids = log_ids()
        if ids is not None:
            data["trace_id"], data["span_id"] = ids
        return json.dumps(data, ensure_ascii=False)


TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"

secret_filter = SecretFilter()


def configure(fmt: str = "text", level: str = "info", secrets: Iterable[str] = (), *,
              file: LogFile | None = None) -> None:
    """Install one stderr handler on the root logger, and with ``file`` the log file's
    (JSON lines, whatever ``fmt`` says: its reader filters them)."""
    secret_filter.add(*secrets)
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(secret_filter)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        formatter = logging.Formatter(TEXT_FORMAT, "%Y-%m-%d %H:%M:%S")
        formatter.converter = time.localtime
        handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    if file is not None:
        try:
            root.addHandler(file.handler(stderr=handler))
        except OSError as exc:  # the home cannot be written: its own error comes next
            logging.getLogger("chatkernel.logs").warning(
                "cannot write the log file %s (%s): logging to stderr only", file.path,
                exc.strerror or exc)


# -- the log file ------------------------------------------------------------------------------

#: The log file's name in ``$CHATKERNEL_HOME/logs/``; its backups add ``.1``, ``.2``...
LOG_NAME = "gateway.log"
LEVELS = ("debug", "info", "warning", "error", "critical")


def log_dir(home: Path) -> Path:
    return home / "logs"


class LogFile:
    """Where and how the gateway keeps its log (``[logging]``): the file in
    ``<home>/logs/``, rotated past ``max_bytes`` keeping ``backups`` older files, none
    older than ``max_age_days``."""

    def __init__(self, home: Path, *, max_bytes: int = 10 * 1024 ** 2, backups: int = 5,
                 max_age_days: float = 14.0) -> None:
        self.path = log_dir(home) / LOG_NAME
        self.max_bytes, self.backups, self.max_age_days = max_bytes, backups, max_age_days

    def handler(self, stderr: logging.Handler | None = None) -> logging.Handler:
        """The file's handler: JSON lines, secrets redacted as on stderr. When the file
        cannot be written, and when it can again, it says so once through ``stderr``
        (the stderr handler; None: a plain line on ``sys.stderr``)."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        handler = _RotatingFile(self.path, self.max_bytes, self.backups,
                                self.max_age_days * 86400, stderr)
        handler.addFilter(secret_filter)
        handler.setFormatter(JsonFormatter())
        return handler


class _RotatingFile(logging.handlers.RotatingFileHandler):
    """Rotated by size; a backup older than ``max_age`` seconds is removed at start and
    at each rotation; every file created 0600 (a log names chats and senders).

    A record that cannot be written (``OSError``: a full disk, the directory gone) is
    dropped here, not reported as logging reports an error (a traceback on stderr for
    every record): the first failure is said once through ``stderr`` and the file is
    opened afresh for the next record, which first writes, and tells stderr, that the
    file is written again."""

    def __init__(self, path: Path, max_bytes: int, backups: int, max_age: float,
                 stderr: logging.Handler | None = None) -> None:
        self.max_age = max_age
        self._stderr = stderr
        #: Why the file cannot be written, while it cannot (None: it can).
        self.failing: str | None = None
        self._failed = False  # the record being emitted was not written
        super().__init__(path, maxBytes=max_bytes, backupCount=max(backups, 1),
                         encoding="utf-8")
        os.chmod(path, 0o600)
        self._prune()

    def _open(self) -> Any:
        old = os.umask(0o077)
        try:
            return super()._open()
        finally:
            os.umask(old)

    def doRollover(self) -> None:
        super().doRollover()
        self._prune()

    def emit(self, record: logging.LogRecord) -> None:
        if self.failing is not None:
            # First the news that the file is written again: into the file (where its
            # gap is), then on stderr. Still failing: this record is on stderr only.
            notice = _record(logging.INFO, "the log file %s is written again (what was "
                             "logged while it could not be is on stderr only)",
                             self.baseFilename)
            self._failed = False
            super().emit(notice)
            if self._failed:
                return
            self.failing = None
            self._tell_stderr(notice)
        super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        error = sys.exc_info()[1]
        if not isinstance(error, OSError):
            super().handleError(record)  # a bug (a bad format string): as logging says it
            return
        self._failed = True
        stream, self.stream = self.stream, None  # opened afresh for the next record
        if stream is not None:
            try:
                stream.close()
            except OSError:  # its buffer could not be written either: dropped with it
                pass
        if self.failing is None:
            self.failing = error.strerror or str(error)
            self._tell_stderr(_record(
                logging.WARNING, "cannot write the log file %s (%s): logging to stderr "
                "only until it can be written again", self.baseFilename, self.failing))

    def _tell_stderr(self, record: logging.LogRecord) -> None:
        if self._stderr is not None:
            self._stderr.handle(record)
        else:
            sys.stderr.write(f"chatkernel: {record.getMessage()}\n")

    def _prune(self) -> None:
        cutoff = time.time() - self.max_age
        for path in _backups(Path(self.baseFilename)):
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
            except FileNotFoundError:
                pass


def _record(level: int, message: str, *args: Any) -> logging.LogRecord:
    """A record of the log file's own (``chatkernel.logs``), made here: it is not logged
    through the loggers, whose handlers include the file's."""
    return logging.LogRecord("chatkernel.logs", level, __file__, 0, message, args, None)


def _backups(path: Path) -> list[Path]:
    """The rotated files of ``path``, oldest first."""
    found = []
    for candidate in path.parent.glob(path.name + ".*"):
        suffix = candidate.name[len(path.name) + 1:]
        if suffix.isdigit():
            found.append((int(suffix), candidate))
    return [candidate for _, candidate in sorted(found, reverse=True)]


def _matcher(since: float | None, level: str | None, channel: str | None
             ) -> Callable[[dict[str, Any]], bool]:
    floor = LEVELS.index(level.lower()) if level else 0

    def matches(line: dict[str, Any]) -> bool:
        if since is not None and float(line.get("ts") or 0) < since:
            return False
        found = str(line.get("level") or "info").lower()
        if floor and (LEVELS.index(found) if found in LEVELS else 1) < floor:
            return False
        if channel and line.get("channel") != channel and \
                f"{channel}:" not in str(line.get("message", "")):
            return False
        return True

    return matches


def _parse(text: str) -> dict[str, Any] | None:
    try:
        line = json.loads(text)
    except ValueError:  # a line cut by a crash, or not ours
        return None
    return line if isinstance(line, dict) else None


def read_lines(home: Path, since: float | None = None, level: str | None = None,
               channel: str | None = None) -> Iterator[dict[str, Any]]:
    """The gateway's log lines in ``home``, oldest first, each a dict (``ts``,
    ``level``, ``logger``, ``message``, and ``channel``, ``account``, ``exc`` where
    known): those at or after ``since`` (a Unix time), at ``level`` or
    above, about ``channel`` (a channel's name, or an account key ``telegram:main``)."""
    path = log_dir(home) / LOG_NAME
    matches = _matcher(since, level, channel)
    for file in [*_backups(path), path]:
        try:
            handle = open(file, encoding="utf-8", errors="replace")
        except FileNotFoundError:
            continue
        with handle:
            for text in handle:
                line = _parse(text)
                if line is not None and matches(line):
                    yield line


def follow(home: Path, since: float | None = None, level: str | None = None,
           channel: str | None = None, *, poll: float = 0.5,
           stop: Callable[[], bool] = lambda: False,
           sleep: Callable[[float], None] = time.sleep) -> Iterator[dict[str, Any]]:
    """:func:`read_lines`, then each new line as it is written (across rotations), until
    ``stop()`` says so; between reads it waits ``poll`` seconds through ``sleep``."""
    yield from read_lines(home, since, level, channel)
    path = log_dir(home) / LOG_NAME
    matches = _matcher(None, level, channel)
    try:
        handle, inode = open(path, encoding="utf-8", errors="replace"), path.stat().st_ino
        handle.seek(0, os.SEEK_END)
    except FileNotFoundError:
        handle, inode = None, None
    pending = ""
    try:
        while not stop():
            text = handle.readline() if handle is not None else ""
            if text:
                pending += text
                if pending.endswith("\n"):
                    line, pending = _parse(pending), ""
                    if line is not None and matches(line):
                        yield line
                continue
            try:  # rotated (a new file under the name), or created: read it from its start
                current = path.stat().st_ino
            except FileNotFoundError:
                current = None
            if current is not None and current != inode:
                if handle is not None:
                    handle.close()
                handle, inode = open(path, encoding="utf-8", errors="replace"), current
                continue
            sleep(poll)
    finally:
        if handle is not None:
            handle.close()
