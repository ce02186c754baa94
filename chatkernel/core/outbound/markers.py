"""``MEDIA:`` markers in an agent's reply (docs/outbound.md, "From agent events to payloads").

An agent asks for a file to be sent by writing a line of its own::

    Here is the chart you asked for.
    MEDIA: /tmp/chart.png
    And the raw data:
    MEDIA: "/tmp/raw data.csv"

A marker line starts with ``MEDIA:`` (case-sensitive) after optional spaces or
tabs; the path is the rest of the line, stripped. A path may be quoted with
``"..."``, ``'...'`` or ```...``` so that it keeps leading or trailing spaces
or starts and ends with a quote; the outer pair is removed. A line whose path
is empty is not a marker. Inside a fenced code block (the same blocks
:func:`chatkernel.core.outbound.chunking.find_code_fences` finds) a ``MEDIA:`` line is
code, not a marker.

:func:`split_media` removes the marker lines and returns the reply as text and
media segments in their order, so each file is sent in its place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from chatkernel.core.outbound.chunking import find_code_fences

__all__ = ["MARKER", "Segment", "media_paths", "split_media"]

MARKER = "MEDIA:"
_QUOTES = "\"'`"


@dataclass(frozen=True, slots=True)
class Segment:
    """One piece of a reply: a run of text, or one media path to send."""

    kind: Literal["text", "media"]
    value: str


def _marker_path(line: str) -> str | None:
    """The path of a marker line, or None if ``line`` is not a marker."""
    body = line.lstrip(" \t")
    if not body.startswith(MARKER):
        return None
    path = body[len(MARKER):].strip()
    if len(path) >= 2 and path[0] in _QUOTES and path[-1] == path[0]:
        path = path[1:-1]
    return path or None


def _text_segment(lines: list[str]) -> Segment | None:
    """``lines`` joined, without leading and trailing blank lines; None if blank."""
    i, j = 0, len(lines)
    while i < j and not lines[i].strip():
        i += 1
    while j > i and not lines[j - 1].strip():
        j -= 1
    if i == j:
        return None
    # A CR left on the last line is the rest of a CRLF, not content.
    return Segment("text", "\n".join(lines[i:j]).removesuffix("\r"))


def split_media(text: str) -> list[Segment]:
    """Split a reply into text and media segments, in order.

    Marker lines become ``Segment("media", path)``; the lines between them
    become one ``Segment("text", ...)`` each, without leading or trailing blank
    lines; blank text segments are left out. Text without markers comes back
    as a single text segment (or none if it is blank).
    """
    if MARKER not in text:
        if "\n" not in text:  # one line: the usual short reply
            return [Segment("text", text.removesuffix("\r"))] if text.strip() else []
        segment = _text_segment(text.split("\n"))
        return [segment] if segment else []
    fences = find_code_fences(text)
    segments: list[Segment] = []
    pending: list[str] = []
    pos = 0
    fi = 0  # the first code block that does not end before the current line
    for line in text.split("\n"):
        start = pos
        pos += len(line) + 1
        while fi < len(fences) and fences[fi].close_start < start:
            fi += 1
        in_code = fi < len(fences) and fences[fi].start <= start
        path = None if in_code else _marker_path(line)
        if path is None:
            pending.append(line)
            continue
        segment = _text_segment(pending)
        if segment:
            segments.append(segment)
        pending = []
        segments.append(Segment("media", path))
    segment = _text_segment(pending)
    if segment:
        segments.append(segment)
    return segments


def media_paths(text: str) -> list[str]:
    """The paths of the reply's ``MEDIA:`` markers, in order."""
    return [s.value for s in split_media(text) if s.kind == "media"]
