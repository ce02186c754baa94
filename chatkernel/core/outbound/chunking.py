"""Split an agent's reply into chunks a channel accepts (docs/outbound.md).

Every platform caps the length of one message: Telegram at 4096 UTF-16 code
units, Slack at 4000 characters, WeChat at 3500. :func:`chunk_text` cuts a
reply so that every chunk fits, and cuts where a reader would:

1. at a paragraph boundary (a blank line),
2. else at a line break,
3. else after a sentence end (``.``, ``!``, ``?`` or ``…``, optionally followed
   by closing quotes or brackets, then whitespace; or a CJK full stop
   ``。！？｡``, which needs no space after it since CJK text has none),
4. else at whitespace between words,
5. else anywhere between two grapheme clusters.

The last break of the best kind that fits is used, however early it is.

The whitespace a break falls on is dropped (the newline or space is neither
the end of one chunk nor the start of the next), except that the indentation
of the line the next chunk starts with is kept, since it carries meaning in
code and nested lists. Nothing else is changed, apart from code fences: a
split inside a fenced code block closes the fence at the end of the chunk and
reopens it, with its opening line (so its language), at the start of the next
one; those added lines count towards the limit.

The module is pure and linear: every step looks at one window of at most
``limit`` characters, and whole-text passes run in C (``re``, ``str.rfind``,
``str.encode``), so a megabyte reply is chunked in milliseconds.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left
from functools import lru_cache
from typing import Literal, NamedTuple

__all__ = [
    "UNITS",
    "CodeFence",
    "Unit",
    "chunk_text",
    "find_code_fences",
    "grapheme_boundaries",
    "is_grapheme_boundary",
    "safe_split_point",
    "text_length",
]

#: How a channel measures text: code points, or UTF-16 code units (Telegram).
Unit = Literal["chars", "utf16"]
UNITS: tuple[str, ...] = ("chars", "utf16")

_ZWJ = "\u200d"


def text_length(text: str, unit: Unit) -> int:
    """Length of ``text`` as a platform counts it.

    ``"chars"`` counts code points (``len``); ``"utf16"`` counts UTF-16 code
    units, as Telegram does, so a character outside the Basic Multilingual
    Plane (most emoji, many CJK extension ideographs) counts 2.
    """
    if unit == "chars":
        return len(text)
    if unit == "utf16":
        if text.isascii():
            return len(text)
        # surrogatepass: a lone surrogate is one code unit, not an error.
        return len(text.encode("utf-16-le", "surrogatepass")) // 2
    raise ValueError(f"unknown text unit {unit!r}: expected one of {', '.join(UNITS)}")


# --------------------------------------------------------------------------
# Grapheme clusters
#
# The chunker must never cut a user-perceived character in two: a cut between
# "e" and U+0301, inside "👨‍👩‍👧", between the two regional indicators of a flag
# or between the tone modifier and its emoji shows the reader garbage. This is
# an approximation of UAX #29 extended grapheme clusters covering what chat
# text meets: CR LF (GB3), Extend and SpacingMark characters (GB9, GB9a: every
# combining mark, variation selectors, ZWNJ/ZWJ, emoji modifiers, tag
# characters), anything but whitespace after a ZWJ (GB11, applied to any
# following character rather than only pictographs: stricter, never wrong for
# emoji), regional
# indicator pairs (GB12, GB13) and conjoining Hangul jamo (GB6-GB8). It does
# not implement Prepend characters or the Indic conjunct rule (GB9c); a split
# there is legible, merely not ideal.
# --------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _is_extend(ch: str) -> bool:
    """True for a character that belongs to the cluster before it."""
    o = ord(ch)
    if (
        0xFE00 <= o <= 0xFE0F  # variation selectors (text/emoji presentation)
        or 0x1F3FB <= o <= 0x1F3FF  # emoji skin-tone modifiers
        or o == 0x200D  # ZWJ
        or o == 0x200C  # ZWNJ
        or 0xE0020 <= o <= 0xE007F  # tag characters (subdivision flags)
        or 0xE0100 <= o <= 0xE01EF  # variation selectors supplement
    ):
        return True
    if unicodedata.combining(ch):
        return True
    # Marks with combining class 0 (many Indic vowel signs, enclosing keycap).
    return unicodedata.category(ch) in ("Mn", "Me", "Mc")


def _is_ri(ch: str) -> bool:
    return "\U0001f1e6" <= ch <= "\U0001f1ff"


def _hangul_type(ch: str) -> str:
    o = ord(ch)
    if 0x1100 <= o <= 0x115F or 0xA960 <= o <= 0xA97C:
        return "L"
    if 0x1160 <= o <= 0x11A7 or 0xD7B0 <= o <= 0xD7C6:
        return "V"
    if 0x11A8 <= o <= 0x11FF or 0xD7CB <= o <= 0xD7FB:
        return "T"
    if 0xAC00 <= o <= 0xD7A3:
        return "LV" if (o - 0xAC00) % 28 == 0 else "LVT"
    return ""


def _joins(prev: str, ch: str) -> bool:
    """True if ``prev`` and ``ch`` are in one cluster (all rules but GB12/13)."""
    if prev == _ZWJ:
        return not ch.isspace()  # GB11 joins pictographs; whitespace after a ZWJ is no part
    if prev == "\r" or prev == "\n":  # GB3, GB4: nothing joins a line break but CR LF
        return prev == "\r" and ch == "\n"
    if _is_extend(ch):
        return True
    if "\u1100" <= ch <= "\ud7fb":  # cheap guard: the rest only concerns Hangul
        p, c = _hangul_type(prev), _hangul_type(ch)
        if p == "L" and c in ("L", "V", "LV", "LVT"):
            return True
        if p in ("LV", "V") and c in ("V", "T"):
            return True
        if p in ("LVT", "T") and c == "T":
            return True
    return False


def _boundary(text: str, i: int, lo: int) -> bool:
    """Whether a cut at ``i`` is safe, given that ``lo <= i`` is a boundary.

    ``lo`` bounds the backward count of regional indicators: a boundary
    resets their pairing, so there is no need to count past it.
    """
    if i <= lo or i >= len(text):
        return True
    prev, ch = text[i - 1], text[i]
    if _joins(prev, ch):
        return False
    if _is_ri(prev) and _is_ri(ch):
        k = i - 1
        while k > lo and _is_ri(text[k - 1]):
            k -= 1
        return (i - k) % 2 == 0  # an even run before i: the flags pair up before it
    return True


def is_grapheme_boundary(text: str, index: int) -> bool:
    """Whether ``text`` may be cut at ``index`` without splitting a character.

    Positions 0 and ``len(text)`` are always boundaries. The rules approximate
    UAX #29 extended grapheme clusters for the cases chat text meets: CR LF,
    combining marks, variation selectors, ZWJ sequences, skin-tone modifiers,
    tag sequences, regional-indicator pairs (flags) and Hangul jamo.
    """
    return _boundary(text, index, 0)


def grapheme_boundaries(text: str) -> list[int]:
    """Every index at which ``text`` may be cut, in order, 0 and ``len(text)`` included.

    Same rules as :func:`is_grapheme_boundary`, computed in one pass.
    """
    out = [0]
    ri_run = 0  # regional indicators immediately before the current position
    for i in range(1, len(text)):
        prev, ch = text[i - 1], text[i]
        ri_run = ri_run + 1 if _is_ri(prev) else 0
        if _joins(prev, ch):
            continue
        if ri_run % 2 and _is_ri(ch):
            continue
        out.append(i)
    if text:
        out.append(len(text))
    return out


def safe_split_point(text: str, index: int, lo: int = 0) -> int:
    """The largest grapheme boundary ``b`` with ``lo <= b <= index``.

    ``lo`` must itself be a boundary; it is returned when nothing after it is.
    Costs time proportional to ``index - lo`` at worst, usually O(1).
    """
    n = len(text)
    b = min(index, n)
    while b > lo:
        if b >= n:
            return b
        prev, ch = text[b - 1], text[b]
        if _joins(prev, ch):
            b -= 1
        elif _is_ri(prev) and _is_ri(ch) and not _boundary(text, b, lo):
            b -= 1  # one step back lands between two pairs, so one count suffices
        else:
            return b
    return lo


# --------------------------------------------------------------------------
# Code fences
# --------------------------------------------------------------------------

#: A line that looks like a fence: up to 3 spaces, then 3+ backticks.
#: Groups: indentation, backticks, the rest without trailing whitespace.
_FENCE_LINE = re.compile(r"^( {0,3})(`{3,})([^\n]*?)[^\S\n]*$", re.M)


class CodeFence(NamedTuple):
    """One fenced code block of a text, as indices into it.

    A block opens with a line of 3+ backticks (up to 3 spaces before them)
    followed by an optional info string without backticks, the language
    (```` ```python ````), and closes with a line of at least as many backticks
    and nothing else, as in CommonMark. A block never closed runs to the end
    of the text; then ``close_start == close_end == len(text)``.
    """

    start: int  #: first character of the opening line
    opener_end: int  #: end of the opening line, trailing whitespace excluded
    close_start: int  #: first character of the closing line
    close_end: int  #: end of the closing line's backticks
    opener: str  #: the opening line as written, e.g. "```python"
    ticks: int  #: how many backticks open (and must close) the block


def find_code_fences(text: str) -> list[CodeFence]:
    """The fenced code blocks of ``text`` in order (see :class:`CodeFence`)."""
    return _scan_fences(text)[0]


def _scan_fences(text: str) -> tuple[list[CodeFence], list[int], list[int]]:
    """The code blocks, and the (start, end) of every fence-looking line.

    One pass for both: a reply of nothing but backticks is a worst case.
    """
    fences: list[CodeFence] = []
    zone_starts: list[int] = []
    zone_ends: list[int] = []
    start = opener_end = ticks = 0
    opener = ""
    inside = False
    for m in _FENCE_LINE.finditer(text):
        indent, backticks, rest = m.groups()
        line_start = m.start()
        line_end = m.end(3)
        zone_starts.append(line_start)
        zone_ends.append(line_end)
        if not inside:
            if "`" in rest:  # ```inline``` on one line is a code span, not a fence
                continue
            start, opener_end = line_start, line_end
            opener = text[start:opener_end]
            ticks = len(backticks)
            inside = True
        elif not rest and len(backticks) >= ticks:
            fences.append(CodeFence(start, opener_end, line_start,
                                    line_start + len(indent) + len(backticks), opener, ticks))
            inside = False
    if inside:
        fences.append(CodeFence(start, opener_end, len(text), len(text), opener, ticks))
    return fences, zone_starts, zone_ends


# --------------------------------------------------------------------------
# The chunker
# --------------------------------------------------------------------------

_NON_SPACE = re.compile(r"\S")
#: The last sentence end in a window: greedy ``.*`` backtracks from the
#: window's end, so the search costs the distance to the match, not the window.
_LAST_SENTENCE_END = re.compile(
    r"(?s:.*)(?:([.!?\u2026][\"'\u201d\u2019\u00bb)\]]*)(?=\s)"
    r"|([\u3002\uff01\uff1f\uff61][\u300d\u300f\u201d\u2019\uff09)]*))"
)
#: The last breakable space of a window (no-break spaces are not breakable).
_LAST_SPACE = re.compile(r"(?s:.*)[^\S\u00a0\u2007\u202f]")
#: How far past the window a blank line may end and still count as a paragraph
#: break at the window's edge (its dropped whitespace may overhang).
_LOOKAHEAD = 64


class _NoRoom(Exception):
    """Fence repair cannot make progress within the limit."""


def chunk_text(text: str, limit: int, unit: Unit = "chars") -> list[str]:
    """Split ``text`` into chunks of at most ``limit`` (measured in ``unit``).

    Breaks are chosen as the module docstring describes: paragraph, line,
    sentence, word, then any grapheme boundary. A grapheme cluster is cut only
    when it alone is longer than ``limit`` (then at a code point; a code
    point is never cut). The whitespace a break falls on is dropped, except
    the indentation of the next chunk's first line; chunks are never empty and
    carry no trailing whitespace. A split inside a fenced code block closes the
    fence at the end of the chunk (``"\\n```"``) and reopens it with its
    opening line at the start of the next (``"```python\\n"``), both counted in
    the limit; when the limit is too small for that overhead, the whole text
    is split without fence repair instead.

    Empty or whitespace-only text gives ``[]``. Raises :class:`ValueError`
    for ``limit < 1``, an unknown ``unit``, or a limit smaller than a single
    code point (a non-BMP character at ``limit=1`` in ``"utf16"``).
    """
    if unit not in UNITS:
        raise ValueError(f"unknown text unit {unit!r}: expected one of {', '.join(UNITS)}")
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int, not {type(limit).__name__}")
    if limit < 1:
        raise ValueError(f"chunk limit must be at least 1, got {limit}")
    if not text or text.isspace():
        return []
    whole = text.rstrip()
    if not text[0].isspace() and len(whole) <= limit and (unit == "chars" or text_length(whole, unit) <= limit):
        return [whole]  # the common case: a reply that fits as it is
    # Without non-BMP characters both units agree, and counting chars is free.
    utf16 = unit == "utf16" and max(text) > "\uffff"
    fences, zone_starts, zone_ends = _scan_fences(text)
    if fences:
        try:
            return _Chunker(text, limit, utf16, fences, zone_starts, zone_ends).run()
        except _NoRoom:
            pass  # the fence lines leave no room: split as plain text instead
    return _Chunker(text, limit, utf16, [], zone_starts, zone_ends).run()


class _Chunker:
    """One chunking run over one text; ``fences`` empty means no fence repair."""

    def __init__(self, text: str, limit: int, utf16: bool, fences: list[CodeFence],
                 zone_starts: list[int], zone_ends: list[int]) -> None:
        self.text = text
        self.limit = limit
        self.utf16 = utf16
        self.fences = fences
        self.fence_starts = [f.start for f in fences]
        self.repair = bool(fences)
        self.picky = False
        # Never cut inside a fence-looking line: half of "```python" or of a
        # "```x`" line reads as a fence of its own in the chunk it lands in.
        self.zone_starts = zone_starts
        self.zone_ends = zone_ends
        self.n = self._strip_end(0, len(text))  # trailing whitespace is never sent

    # -- measuring --------------------------------------------------------

    def _units(self, a: int, b: int) -> int:
        if not self.utf16:
            return b - a
        return len(self.text[a:b].encode("utf-16-le", "surrogatepass")) // 2

    def _advance(self, s: int, room: int) -> int:
        """The largest ``e <= n`` with ``text[s:e]`` at most ``room`` units long."""
        e = min(self.n, s + room)
        if not self.utf16:
            return e
        t = self.text
        u = self._units(s, e)
        while u > room:
            # Dropping k code points drops k..2k units: halve the excess each
            # round without undershooting by more than one unit.
            k = (u - room + 1) // 2
            u -= self._units(e - k, e)
            e -= k
        while e < self.n and u + (2 if t[e] > "\uffff" else 1) <= room:
            u += 2 if t[e] > "\uffff" else 1
            e += 1
        return e

    # -- whitespace -------------------------------------------------------

    def _strip_end(self, lo: int, hi: int) -> int:
        """``hi`` moved back over whole whitespace clusters (never below ``lo``)."""
        t = self.text
        while hi > lo and t[hi - 1].isspace():
            c = hi - 1
            if t[c] == "\n" and c > lo and t[c - 1] == "\r":
                c -= 1
            hi = c
        return hi

    def _skip_break(self, b: int, line_start: bool = False) -> int:
        """Where the chunk after a break at ``b`` starts.

        Skips the whitespace at ``b`` up to and including its last line break,
        so the next chunk keeps its first line's indentation (``line_start``:
        ``b`` is the start of a line, as the start of the text is).
        """
        t, n = self.text, self.n
        m = _NON_SPACE.search(t, b, n)
        if m is None:
            return n
        r = m.start()
        while r > b and _joins(t[r - 1], t[r]):
            r -= 1  # a space carrying a combining mark is content, not a break
        k = t.rfind("\n", b, r)
        return k + 1 if k >= 0 else (b if line_start else r)

    def _run_start(self, k: int, f: int) -> int:
        """Start of the whitespace run that contains ``k`` (never at or before ``f``)."""
        t = self.text
        while k > f and t[k - 1].isspace():
            k -= 1
        return k

    # -- checks on a break ------------------------------------------------

    def _in_zone(self, b: int) -> bool:
        """Whether ``b`` falls strictly inside a fence-looking line."""
        i = bisect_left(self.zone_starts, b) - 1
        return i >= 0 and b < self.zone_ends[i]

    def _ok(self, b: int, f: int) -> bool:
        """Whether a soft break (paragraph/line/sentence/word) at ``b`` is usable."""
        t = self.text
        if b <= f or _joins(t[b - 1], t[b]) or self._in_zone(b):
            return False
        # A mid-line break must not start the next chunk with ``` : it would
        # open a code block that the original text does not have.
        nxt = self._skip_break(b)
        if t.startswith("```", nxt) and t.rfind("\n", b, nxt) < 0:
            return False
        if self.picky and self.repair:
            # Cutting right after a fence's opening line, or right before its
            # closing line, sends an empty code block; prefer another break.
            fence = self._cut_fence(b)
            if fence is not None and (b == fence.opener_end or nxt == fence.close_start):
                return False
        return True

    def _cut_fence(self, b: int) -> CodeFence | None:
        """The code block a chunk ending at ``b`` leaves open, if any."""
        i = bisect_left(self.fence_starts, b) - 1
        if i >= 0:
            fence = self.fences[i]
            if fence.opener_end <= b <= fence.close_start:
                return fence
        return None

    # -- finding a break in text[s:e] -------------------------------------
    # Each finder returns a break b with f < b <= e (f: the first non-space at
    # or after s, so the chunk text[s:b] is not blank), or None.

    def _paragraph(self, f: int, e: int) -> int | None:
        t = self.text
        k = t.rfind("\n", f, min(self.n, e + 1 + _LOOKAHEAD))
        while k > f:
            j = t.rfind("\n", f, k)
            if j < 0:
                return None
            if not t[j + 1:k].strip():  # the line between j and k is blank
                b = self._run_start(j, f)
                if b <= e and self._ok(b, f):
                    return b
            k = j
        return None

    def _line(self, f: int, e: int) -> int | None:
        t = self.text
        k = t.rfind("\n", f, e + 1)
        while k > f:
            b = self._run_start(k, f)
            if self._ok(b, f):
                return b
            k = t.rfind("\n", f, b)
        return None

    def _sentence(self, f: int, e: int) -> int | None:
        t = self.text
        end = min(self.n, e + 1)  # one more character, for the space after the stop
        while True:
            m = _LAST_SENTENCE_END.match(t, f, end)
            if m is None:
                return None
            b = m.end()
            if b <= e and self._ok(b, f):
                return b
            end = m.start(1) if m.group(1) is not None else m.start(2)

    def _word(self, f: int, e: int) -> int | None:
        t = self.text
        end = min(self.n, e + 1)
        while True:
            m = _LAST_SPACE.match(t, f, end)
            if m is None:
                return None
            b = self._run_start(m.end() - 1, f)
            if self._ok(b, f):
                return b
            end = b

    def _hard(self, s: int, f: int, b: int, strict: bool) -> int | None:
        """The last grapheme boundary in (f, b], ``b`` being one; ``strict``
        also avoids whitespace (the finders above had their say there),
        fence-looking lines and a next chunk starting with ```."""
        t = self.text
        while b > f:
            if not strict:
                return self._strip_end(f + 1, b)
            if t[b - 1].isspace() or t[b].isspace() or t.startswith("```", b):
                b = safe_split_point(t, b - 1, s)
            elif self._in_zone(b):
                b = self.zone_starts[bisect_left(self.zone_starts, b) - 1]
            else:
                return b
        return None

    def _choose(self, s: int, f: int, e: int) -> int | None:
        last = None  # the last boundary in (f, e], found once: a long cluster is slow to walk
        # First pass picky about cosmetics (see _ok), second pass not; a
        # cosmetic preference must never force the fallback without repair.
        for picky in (True, False) if self.repair else (False,):
            self.picky = picky
            for find in (self._paragraph, self._line, self._sentence, self._word):
                b = find(f, e)
                if b is not None:
                    return b
            if last is None:
                last = safe_split_point(self.text, e, s)
            b = self._hard(s, f, last, strict=True)
            if b is not None:
                return b
        if not self.repair:
            return self._hard(s, f, last, strict=False)
        return None

    # -- the loop ----------------------------------------------------------

    def _step(self, s: int, room: int) -> tuple[int, int, CodeFence | None]:
        """The next chunk's body ``text[s:b]`` and the fence it cuts.

        ``room`` is the limit less the reopened fence line, if any. ``s`` may
        come back larger when leading indentation had to be dropped.
        """
        t, n = self.text, self.n
        if room < 1:
            raise _NoRoom
        while True:
            m = _NON_SPACE.search(t, s, n)
            f = m.start() if m else s
            e = self._advance(s, room)
            if e >= n:
                return s, n, None
            cap = room
            while e > f:
                b = self._choose(s, f, e)
                if b is None:
                    break
                fence = self._cut_fence(b)
                extra = fence.ticks + 1 if fence else 0  # "\n```"
                if self._units(s, b) + extra <= room:
                    return s, b, fence
                cap = min(cap - 1, room - extra)
                if cap < 1:
                    break
                e = self._advance(s, cap)
            # Nothing fits after the indentation: drop it (keeping a space that
            # carries a combining mark with the mark).
            c = f
            while c > s and _joins(t[c - 1], t[c]):
                c -= 1
            if c > s:
                s = c
                continue
            if self.repair:
                raise _NoRoom
            # One grapheme cluster longer than the limit: cut it at a code point.
            cut = self._advance(s, room)
            if cut <= s:
                raise ValueError(
                    f"chunk limit {self.limit} is too small for the character "
                    f"{t[s]!r} ({self._units(s, s + 1)} units)")
            if cut <= f:
                s = f
                continue
            return s, cut, None

    def run(self) -> list[str]:
        t = self.text
        out: list[str] = []
        s = self._skip_break(0, line_start=True)
        reopen: CodeFence | None = None
        while s < self.n:
            prefix = reopen.opener + "\n" if reopen else ""
            room = self.limit - (text_length(prefix, "utf16" if self.utf16 else "chars"))
            s, b, fence = self._step(s, room)
            suffix = "\n" + "`" * fence.ticks if fence else ""
            out.append(prefix + t[s:b] + suffix)
            reopen = fence
            s = self._skip_break(b)
        return out
