"""The gateway's recent log lines, in memory, redacted: what the console's Logs page
shows and streams.

A :class:`LogBuffer` is a logging handler on the root logger that keeps the newest
:data:`CAPACITY` records as plain dicts, each message passed through the same secret
filter as the log on stderr (and the kernel's own), so no line it gives out holds a
secret. Listeners (the live streams) are told of each new line.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["CAPACITY", "LogBuffer"]

#: Lines kept: enough for an hour of a busy gateway's info lines, a few MB at most.
CAPACITY = 2_000
#: Characters of a line kept (a traceback is cut).
MAX_CHARS = 4_000

_ACCOUNT = re.compile(r"^([a-z][a-z0-9_-]*):[^\s:]+")


class LogBuffer(logging.Handler):
    """The newest log records, redacted by ``redact`` (each line once, when it comes).
    ``channels()`` names the channels, to tag each line with the one it is about."""

    def __init__(self, redact: Callable[[str], str], channels: Callable[[], Iterable[str]],
                 capacity: int = CAPACITY) -> None:
        super().__init__(logging.DEBUG)
        self._redact = redact
        self._channels = channels
        self.lines: deque[dict[str, Any]] = deque(maxlen=capacity)
        self._ids = itertools.count(1)
        self.listeners: set[Callable[[dict[str, Any]], None]] = set()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                text += "\n" + logging.Formatter().formatException(record.exc_info)
            elif record.exc_text:
                text += "\n" + record.exc_text
            text = self._redact(text)[:MAX_CHARS]
            line = {"id": next(self._ids), "ts": round(record.created, 3),
                    "level": record.levelname.lower(), "logger": record.name,
                    "channel": self._channel_of(record.name, text), "message": text}
        except Exception:  # a log line must never break what logged it
            self.handleError(record)
            return
        self.lines.append(line)
        for listener in list(self.listeners):
            listener(line)

    def _channel_of(self, logger: str, text: str) -> str | None:
        """The channel a line is about: one its logger's name holds (``chatkernel_<name>``,
        ``chatkernel.<name>``), or that of the account key it starts with
        (``<channel>:<account>: ...``)."""
        known = set(self._channels())
        for part in re.split(r"[._]", logger):
            if part in known:
                return part
        match = _ACCOUNT.match(text)
        if match and match[1] in known:
            return match[1]
        return None

    def recent(self, *, after: int = 0, level: str | None = None, channel: str | None = None,
               limit: int = 500) -> list[dict[str, Any]]:
        """The newest ``limit`` lines after id ``after``, at ``level`` or above, of
        ``channel``, oldest first."""
        floor = logging.getLevelName(level.upper()) if level else 0
        if not isinstance(floor, int):
            raise ValueError(f"unknown log level {level!r}")
        found = [line for line in self.lines if line["id"] > after
                 and logging.getLevelName(line["level"].upper()) >= floor
                 and (channel is None or line["channel"] == channel)]
        return found[-limit:]

    def install(self) -> None:
        """Listen on the root logger (the stderr handler's secret filter runs too)."""
        logging.getLogger().addHandler(self)

    def uninstall(self) -> None:
        logging.getLogger().removeHandler(self)
