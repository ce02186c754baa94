"""Logging set-up: readable lines by default, JSON lines on request, secrets redacted."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Iterable

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


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message (and exc)."""

    def format(self, record: logging.LogRecord) -> str:
        data = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_text:
            data["exc"] = record.exc_text
        return json.dumps(data, ensure_ascii=False)


TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"

secret_filter = SecretFilter()


def configure(fmt: str = "text", level: str = "info", secrets: Iterable[str] = ()) -> None:
    """Install one stderr handler on the root logger."""
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
