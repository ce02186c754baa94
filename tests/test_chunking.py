"""The outbound chunker: hand-written cases for each rule, then properties.

The properties check chunk_text against oracles written independently here:
a naive grapheme-boundary scan, a line-by-line fence parser, and an aligner
that maps every chunk back onto the original text.
"""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from chatkernel.core.outbound.chunking import (
    chunk_text,
    find_code_fences,
    grapheme_boundaries,
    is_grapheme_boundary,
    safe_split_point,
    text_length,
)

ZWJ = "\u200d"
FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"  # 👨‍👩‍👧‍👦
THUMBS_TONE = "\U0001f44d\U0001f3fd"  # 👍🏽
FLAG_US = "\U0001f1fa\U0001f1f8"
FLAG_DE = "\U0001f1e9\U0001f1ea"
HEART = "\u2764\ufe0f"
KEYCAP = "1\ufe0f\u20e3"


# --------------------------------------------------------------------------
# Oracles
# --------------------------------------------------------------------------


def units(text: str, unit: str) -> int:
    return len(text) if unit == "chars" else len(text.encode("utf-16-le", "surrogatepass")) // 2


def o_extend(ch: str) -> bool:
    o = ord(ch)
    return bool(
        0xFE00 <= o <= 0xFE0F or 0x1F3FB <= o <= 0x1F3FF or o in (0x200C, 0x200D)
        or 0xE0020 <= o <= 0xE007F or 0xE0100 <= o <= 0xE01EF
        or unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Mc"))


def o_ri(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def o_hangul(ch: str) -> str:
    o = ord(ch)
    for kind, ranges in (("L", [(0x1100, 0x115F), (0xA960, 0xA97C)]),
                         ("V", [(0x1160, 0x11A7), (0xD7B0, 0xD7C6)]),
                         ("T", [(0x11A8, 0x11FF), (0xD7CB, 0xD7FB)])):
        if any(a <= o <= b for a, b in ranges):
            return kind
    if 0xAC00 <= o <= 0xD7A3:
        return "LV" if (o - 0xAC00) % 28 == 0 else "LVT"
    return ""


def o_boundaries(text: str) -> list[int]:
    """Naive boundary scan: every pair looked at, RIs counted from the start."""
    out = [0]
    for i in range(1, len(text)):
        p, c = text[i - 1], text[i]
        if p in "\r\n":  # after a line break, only CR LF stays together (GB3, GB4)
            if (p, c) != ("\r", "\n"):
                out.append(i)
            continue
        if (p == ZWJ and not c.isspace()) or o_extend(c):
            continue
        hp, hc = o_hangul(p), o_hangul(c)
        if (hp == "L" and hc in ("L", "V", "LV", "LVT")) or (
                hp in ("LV", "V") and hc in ("V", "T")) or (hp in ("LVT", "T") and hc == "T"):
            continue
        if o_ri(p) and o_ri(c):
            run = 0
            while i - 1 - run >= 0 and o_ri(text[i - 1 - run]):
                run += 1
            if run % 2:
                continue
        out.append(i)
    if text:
        out.append(len(text))
    return out


def o_fences(text: str) -> list[tuple[int, int, int, str, int]]:
    """(opener_end, close_start, close_end, opener, ticks) per code block, line by line."""
    out = []
    pos = 0
    cur = None
    for line in text.split("\n"):
        start, pos = pos, pos + len(line) + 1
        indent = len(line) - len(line.lstrip(" "))
        if indent > 3:
            continue
        body = line[indent:]
        ticks = len(body) - len(body.lstrip("`"))
        if ticks < 3:
            continue
        rest = body[ticks:]
        if cur is None:
            if "`" not in rest:
                cur = (start + len(line.rstrip()), line.rstrip(), ticks)
        elif not rest.strip() and ticks >= cur[2]:
            out.append((cur[0], start, start + indent + ticks, cur[1], cur[2]))
            cur = None
    if cur is not None:
        out.append((cur[0], len(text), len(text), cur[1], cur[2]))
    return out


def o_fence_lines(text: str) -> list[tuple[int, int]]:
    """(start, end) of every line that looks like a fence, trailing whitespace excluded."""
    out, pos = [], 0
    for line in text.split("\n"):
        start, pos = pos, pos + len(line) + 1
        if re.match(r" {0,3}```", line):
            out.append((start, start + len(line.rstrip())))
    return out


FENCE_OPENER = re.compile(r" {0,3}(`{3,})[^`]*")


def align(text: str, chunks: list[str]) -> list[tuple[int, int, str | None, int | None]]:
    """Map each chunk onto ``text``: (start, end, reopened opener, closing ticks).

    A chunk is its body, optionally preceded by a reopened fence line and
    followed by a closing fence line; bodies must appear in ``text`` in
    order, separated only by whitespace. Depth-first over the (rare) choices.
    """
    last = len(chunks) - 1

    def variants(i: int, chunk: str):
        lines = chunk.split("\n")
        pres = [None]
        if i > 0 and len(lines) > 1 and FENCE_OPENER.fullmatch(lines[0]):
            pres.append(lines[0])
        sufs = [None]
        if i < last and len(lines) > 1 and re.fullmatch(r"`{3,}", lines[-1]):
            sufs.append(len(lines[-1]))
        for pre in pres:
            for suf in sufs:
                body = lines[(1 if pre is not None else 0):(-1 if suf is not None else None)]
                if body:
                    yield "\n".join(body), pre, suf

    def place(p: int, body: str) -> int | None:
        r = p
        while r < len(text) and text[r].isspace():
            r += 1
        q = r - (len(body) - len(body.lstrip()))
        return q if q >= p and text.startswith(body, q) else None

    # State: chunk index, position in text, ticks closed by the previous chunk
    # (a chunk is reopened exactly when the one before it was closed).
    stack: list[tuple[int, int, int | None, tuple]] = [(0, 0, None, ())]
    seen = set()
    while stack:
        i, p, closed, spans = stack.pop()
        if i == len(chunks):
            if not text[p:].strip():
                return list(spans)
            continue
        if (i, p, closed) in seen:
            continue
        seen.add((i, p, closed))
        for body, pre, suf in variants(i, chunks[i]):
            if (pre is None) != (closed is None):
                continue
            q = place(p, body)
            if q is not None:
                stack.append((i + 1, q + len(body), suf, spans + ((q, q + len(body), pre, suf),)))
    raise AssertionError(f"chunks do not reassemble into the text: {chunks!r}")


def cluster_at(bounds: list[int], i: int) -> tuple[int, int]:
    """The oracle cluster containing position ``i`` (which is not a boundary)."""
    lo = max(b for b in bounds if b < i)
    hi = min(b for b in bounds if b > i)
    return lo, hi


def check_chunks(text: str, limit: int, unit: str, chunks: list[str]) -> None:
    """Every property chunk_text promises, checked against the oracles."""
    if not text.strip():
        assert chunks == []
        return
    assert chunks, "non-blank text gives at least one chunk"
    for c in chunks:
        assert units(c, unit) <= limit, (c, limit)
        assert c.strip(), "no empty chunk"
    spans = align(text, chunks)
    bounds = o_boundaries(text)
    bset = set(bounds)
    oversized = {  # clusters that cannot fit a chunk: the only ones that may be cut
        (a, b) for a, b in zip(bounds, bounds[1:]) if units(text[a:b], unit) > limit}

    def intact(i: int) -> bool:
        return i in bset or cluster_at(bounds, i) in oversized

    for (q, e, _, _), c in zip(spans, chunks):
        assert intact(q) and intact(e), ("split inside a grapheme cluster", q, e, c)
        # Whitespace at a break is dropped: a chunk neither ends with a
        # whitespace-only cluster nor starts with one, bar kept indentation.
        if e in bset:
            lo = max(q, max(b for b in bounds if b < e))
            assert text[lo:e].strip(), ("trailing whitespace", c)
        if q in bset:
            hi = min(e, min(b for b in bounds if b > q))
            assert text[q:hi].strip() or q == 0 or text[q - 1] == "\n", ("leading whitespace", c)

    fences = o_fences(text)
    repaired = any(pre is not None or suf is not None for _, _, pre, suf in spans)

    def cut(pos: int):
        for f in fences:
            if f[0] <= pos <= f[1]:
                return f
        return None

    cuts = [cut(e) for _, e, _, _ in spans[:-1]]
    if repaired or not any(cuts):
        for i, f in enumerate(cuts):
            assert spans[i][3] == (f[4] if f else None), ("fence not closed", chunks[i])
            assert spans[i + 1][2] == (f[3] if f else None), ("fence not reopened", chunks[i + 1])
        assert spans[0][2] is None and spans[-1][3] is None
        if repaired:
            zones = o_fence_lines(text)
            for q, e, _, _ in spans:
                for a, b in zones:
                    assert not (a < q < b or a < e < b), "split inside a fence line"
            # Each chunk read on its own: every fence it opens is closed, but
            # for the last one when the text itself ends inside a block.
            for c in chunks[:-1]:
                assert all(f[1] < len(c) for f in o_fences(c)), ("chunk left open", c)
            text_open = bool(fences) and fences[-1][1] == len(text)
            last_open = any(f[1] == len(chunks[-1]) for f in o_fences(chunks[-1]))
            assert last_open == text_open
    else:
        # Fence repair was given up: only when the limit is too small for it.
        lines = [units(text[a:b], unit) for a, b in o_fence_lines(text)]
        biggest_cluster = max(units(text[a:b], unit) for a, b in zip(bounds, bounds[1:]))
        ticks = max(f[4] for f in fences)
        bound = 2 * (max(lines) + 1) + 2 * (ticks + 1) + biggest_cluster + 8
        assert limit < bound, ("fence repair given up at a roomy limit", limit, bound)


# --------------------------------------------------------------------------
# Strategies: replies made of the pieces that break naive chunkers
# --------------------------------------------------------------------------

_ATOMS = [
    "hello", "world", "a", "the quick", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\r\n\r\n",
    "\n  \n", ". ", "! ", "? ", "… ", '." ', "。", "！", "，", "e\u0301", "a\u0301\u0302",
    "\u0301", "\u20e3", "\ufe0f", ZWJ, "\U0001f3fd", "\U0001f600", "\U0001f44d", THUMBS_TONE,
    FAMILY, HEART, KEYCAP, FLAG_US, FLAG_DE, "\U0001f1eb", "日本語のテキスト", "中文句子",
    "한국어", "\u1100\u1161\u11a8", "\u00a0", "x\u200d ", " \u0301", "```python\n",
    "```\n", "\n```\n", "````js title=x\n", "\n````\n", "```", "`", "  ```sh\n",
    "```a`b\n", "MEDIA: /tmp/x.png\n", "    indented", "\U00020000\U00020001",
]
atoms = st.one_of(
    st.sampled_from(_ATOMS),
    st.text(alphabet="abcdefghij", min_size=15, max_size=120),  # long words
    st.text(max_size=8),  # anything at all
)
texts = st.lists(atoms, max_size=80).map("".join)
limits = st.one_of(st.integers(10, 40), st.integers(41, 400), st.integers(401, 5000))
unit_st = st.sampled_from(["chars", "utf16"])


# --------------------------------------------------------------------------
# text_length
# --------------------------------------------------------------------------


def test_text_length_counts_utf16_code_units():
    assert text_length("abc", "utf16") == 3
    assert text_length("\U0001f44d", "chars") == 1
    assert text_length("\U0001f44d", "utf16") == 2
    assert text_length(FAMILY, "chars") == 7
    assert text_length(FAMILY, "utf16") == 11
    assert text_length("日本語", "utf16") == 3
    assert text_length("\ud800", "utf16") == 1  # a lone surrogate is one unit
    with pytest.raises(ValueError, match="unknown text unit"):
        text_length("x", "bytes")  # type: ignore[arg-type]


@given(st.text())
def test_text_length_matches_the_encoders(text):
    assert text_length(text, "chars") == len(text)
    assert text_length(text, "utf16") == len(text.encode("utf-16-le")) // 2


# --------------------------------------------------------------------------
# Grapheme boundaries
# --------------------------------------------------------------------------


@pytest.mark.parametrize("text, inside", [
    ("e\u0301", [1]),  # combining acute
    ("a\u0301\u0323", [1, 2]),  # two marks
    (HEART, [1]),  # variation selector
    (KEYCAP, [1, 2]),  # VS + combining enclosing keycap
    (THUMBS_TONE, [1]),  # skin-tone modifier
    (FAMILY, [1, 2, 3, 4, 5, 6]),  # ZWJ sequence: the ZWJ and what follows it
    (FLAG_US, [1]),  # regional-indicator pair
    ("\r\n", [1]),
    ("\u1100\u1161\u11a8", [1, 2]),  # conjoining Hangul jamo
    ("\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f", [1, 2, 3, 4, 5, 6]),
])
def test_clusters_are_not_split(text, inside):
    assert grapheme_boundaries(text) == [0, len(text)]
    for i in inside:
        assert not is_grapheme_boundary(text, i)
        assert safe_split_point(text, i) == 0


def test_flags_pair_from_the_left():
    text = FLAG_US + FLAG_DE + "\U0001f1eb"  # two flags and a lone indicator
    assert grapheme_boundaries(text) == [0, 2, 4, 5]
    assert safe_split_point(text, 3) == 2
    assert not is_grapheme_boundary(FLAG_US, 1)


def test_boundaries_between_plain_characters():
    assert grapheme_boundaries("ab c") == [0, 1, 2, 3, 4]
    assert grapheme_boundaries("") == [0]
    assert grapheme_boundaries("\n\r") == [0, 1, 2]  # LF CR is two clusters


@given(st.text())
@example("\U0001f1fa\U0001f1f8\U0001f1e9")
@example("\u200d\u0301x\r\n\r")
def test_grapheme_boundaries_match_the_naive_scan(text):
    bounds = grapheme_boundaries(text)
    assert bounds == o_boundaries(text)
    assert [i for i in range(len(text) + 1) if is_grapheme_boundary(text, i)] == bounds
    for i in range(len(text) + 1):
        assert safe_split_point(text, i) == max(b for b in bounds if b <= i)


# --------------------------------------------------------------------------
# Code fences
# --------------------------------------------------------------------------


def test_find_code_fences():
    text = "a\n```python  \nx\n```py\n  ```\n````\n```\n````\n```x```\n```sh\ny"
    fences = find_code_fences(text)
    assert [(f.opener, f.ticks) for f in fences] == [("```python", 3), ("````", 4), ("```sh", 3)]
    first, second, last = fences
    assert text[first.start:first.opener_end] == "```python"
    assert text[first.close_start:first.close_end] == "  ```"  # "```py" did not close it
    assert text[second.close_start:second.close_end] == "````"  # "```" did not close it
    assert last.close_start == last.close_end == len(text)  # never closed
    assert find_code_fences("    ```\nindented four: not a fence") == []


@given(texts)
def test_find_code_fences_matches_the_line_parser(text):
    assert [(f.opener_end, f.close_start, f.close_end, f.opener, f.ticks)
            for f in find_code_fences(text)] == o_fences(text)


# --------------------------------------------------------------------------
# chunk_text: contract and the preference order
# --------------------------------------------------------------------------


def test_blank_text_gives_no_chunks():
    assert chunk_text("", 10) == []
    assert chunk_text(" \n\t\r\n  ", 10) == []


def test_text_that_fits_is_one_chunk_without_surrounding_whitespace():
    assert chunk_text("\n\nhello world\n\n", 100) == ["hello world"]
    assert chunk_text("  indented\n", 100) == ["  indented"]  # indentation is content


@pytest.mark.parametrize("limit", [0, -1, -4096])
def test_limit_below_one_is_an_error(limit):
    with pytest.raises(ValueError, match="at least 1"):
        chunk_text("hello", limit)


def test_unknown_unit_is_an_error():
    with pytest.raises(ValueError, match="unknown text unit"):
        chunk_text("hello", 10, "bytes")  # type: ignore[arg-type]


def test_limit_below_one_code_point_is_an_error():
    with pytest.raises(ValueError, match="too small"):
        chunk_text("\U0001f600", 1, "utf16")


def test_paragraph_boundary_is_preferred():
    text = "Para one.\n\nPara two, line one.\nPara two line two is long"
    # The line break and a sentence end also fit; the paragraph break wins.
    assert chunk_text(text, 37) == ["Para one.", "Para two, line one.",
                                    "Para two line two is long"]


def test_blank_line_with_spaces_and_crlf_is_a_paragraph_boundary():
    text = "one two\r\n  \r\nthree. four five\nsix"
    assert chunk_text(text, 30)[0] == "one two"


def test_line_break_when_no_paragraph_fits():
    text = "Line one. More words\nLine two. More words here"
    assert chunk_text(text, 30) == ["Line one. More words", "Line two. More words here"]


def test_sentence_end_when_no_line_break_fits():
    text = "One sentence here! Another one? Follows here"
    assert chunk_text(text, 34) == ["One sentence here! Another one?", "Follows here"]
    assert chunk_text('He said "stop." Then left', 20) == ['He said "stop."', "Then left"]


def test_cjk_full_stop_needs_no_space_after_it():
    assert chunk_text("这是第一句。这是第二句。这是第三句。", 8) == [
        "这是第一句。", "这是第二句。", "这是第三句。"]


def test_word_boundary_when_no_sentence_end_fits():
    assert chunk_text("alpha beta gamma delta epsilon", 20) == ["alpha beta gamma",
                                                               "delta epsilon"]
    # A decimal point is not a sentence end, and a no-break space is no break.
    assert chunk_text("pi is 3.14159 roughly\u00a0so", 16) == ["pi is 3.14159", "roughly\u00a0so"]


def test_hard_split_only_as_a_last_resort():
    assert chunk_text("abcdefghijklmnopqrstuvwxyz", 10) == ["abcdefghij", "klmnopqrst", "uvwxyz"]


def test_the_last_break_of_the_best_kind_is_used():
    text = "a b c d e f g h i j k l"
    assert chunk_text(text, 9) == ["a b c d e", "f g h i j", "k l"]


def test_indentation_after_a_line_break_is_kept():
    text = "def f():\n    return 1\n    # a comment here"
    assert chunk_text(text, 22) == ["def f():\n    return 1", "    # a comment here"]


def test_whitespace_only_indentation_longer_than_the_limit_is_dropped():
    assert chunk_text("a\n" + " " * 50 + "b", 10) == ["a", "b"]


def test_emoji_sequences_are_never_split():
    assert chunk_text(FAMILY * 3, 12, "utf16") == [FAMILY] * 3
    assert chunk_text(FAMILY * 3, 22, "utf16") == [FAMILY * 2, FAMILY]
    assert chunk_text(FLAG_US + FLAG_DE + FLAG_US, 5, "utf16") == [FLAG_US, FLAG_DE, FLAG_US]
    assert chunk_text(THUMBS_TONE * 3, 5, "utf16") == [THUMBS_TONE] * 3
    assert chunk_text("e\u0301" * 5, 3) == ["e\u0301"] * 5
    assert chunk_text(HEART * 4, 5) == [HEART * 2] * 2


def test_utf16_limit_counts_surrogate_pairs():
    # 4 emoji = 8 units: at 7 units only 3 fit; in chars all 4 would.
    assert chunk_text("\U0001f600" * 4, 7, "utf16") == ["\U0001f600" * 3, "\U0001f600"]
    assert chunk_text("\U0001f600" * 4, 7, "chars") == ["\U0001f600" * 4]


def test_utf16_limit_never_lands_between_the_halves_of_a_pair():
    # Python strings hold code points, so half a surrogate pair cannot even be
    # expressed; what matters is that the 2-unit character moves whole.
    assert chunk_text("ab\U0001f600", 3, "utf16") == ["ab", "\U0001f600"]
    assert all(c.encode("utf-16-le") for c in chunk_text("x\U0001f600" * 9, 4, "utf16"))


def test_crlf_is_a_line_break_and_never_split():
    assert chunk_text("abc\r\ndef", 4) == ["abc", "def"]
    assert chunk_text("abc\r\n\r\ndef ghi", 8) == ["abc", "def ghi"]


def test_a_cluster_longer_than_the_limit_is_cut_at_code_points():
    text = "a" + "\u0301" * 20  # one cluster of 21 code points
    chunks = chunk_text(text, 10)
    assert "".join(chunks) == text
    assert all(len(c) <= 10 for c in chunks)


def test_split_inside_a_code_block_closes_and_reopens_it():
    text = "Intro\n\n```python\n" + "print(1)\n" * 10 + "```\nOutro"
    chunks = chunk_text(text, 40)
    assert chunks[0] == "Intro"
    for c in chunks[1:-1]:
        assert c.startswith("```python\n") and c.endswith("\n```")
        assert len(c) <= 40
    assert chunks[-1].startswith("```python\n") and chunks[-1].endswith("```\nOutro")
    check_chunks(text, 40, "chars", chunks)


def test_reopened_fence_keeps_the_whole_opening_line_and_tick_count():
    text = "````js title=a.js\n" + "let x = 1; // ``` inside\n" * 6 + "````"
    chunks = chunk_text(text, 80)
    assert len(chunks) > 1
    for c in chunks[:-1]:
        assert c.startswith("````js title=a.js\n") and c.endswith("\n````")
    check_chunks(text, 80, "chars", chunks)


def test_no_empty_code_block_at_a_chunk_edge():
    text = "Some intro text here\n```python\nx = 1\ny = 2\n```"
    chunks = chunk_text(text, 32)
    assert chunks[0] == "Some intro text here"  # not "...\n```python\n```"
    check_chunks(text, 32, "chars", chunks)


def test_unclosed_code_block_stays_open_in_the_last_chunk():
    text = "```sh\n" + "echo hello world\n" * 5
    chunks = chunk_text(text, 40)
    assert chunks[-1].startswith("```sh\n") and not chunks[-1].endswith("```")
    check_chunks(text, 40, "chars", chunks)


def test_inline_triple_backticks_are_not_a_fence():
    text = "use ```x``` inline, then many more words after it"
    chunks = chunk_text(text, 20)
    assert not any(c.startswith("```") for c in chunks[1:])
    check_chunks(text, 20, "chars", chunks)


def test_fence_overhead_larger_than_the_limit_falls_back_to_plain_splitting():
    text = "```python-with-a-long-info-string\nprint(1)\nprint(2)\n```"
    chunks = chunk_text(text, 12)
    assert all(len(c) <= 12 for c in chunks)
    assert "".join(chunks).replace("\n", "") == text.replace("\n", "")
    check_chunks(text, 12, "chars", chunks)


# --------------------------------------------------------------------------
# chunk_text: properties
# --------------------------------------------------------------------------


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts, limits, unit_st)
@example("a```python\nx", 10, "chars")
@example(FAMILY * 3 + "a" * 30, 10, "utf16")
@example("```python\n" + "x = 1\n" * 20 + "```\n", 16, "chars")
@example("a\u200d " * 10, 10, "chars")
@example("0000\r\u0301hello", 10, "chars")  # a mark after a line break starts a cluster
@example("0000\n\u0301hello", 10, "chars")
def test_chunks_keep_every_promise(text, limit, unit):
    check_chunks(text, limit, unit, chunk_text(text, limit, unit))


code_lines = st.lists(
    st.one_of(st.text(alphabet="abc xyz=()`", max_size=60), st.sampled_from(["", "    pass"])),
    min_size=1, max_size=25).map("\n".join)
fenced = st.builds(
    lambda before, ticks, lang, code, closed, after:
        f"{before}\n{'`' * ticks}{lang}\n{code}" + (f"\n{'`' * ticks}\n{after}" if closed else ""),
    st.text(alphabet="abc .\n", max_size=200), st.integers(3, 5),
    st.sampled_from(["", "python", "js title=x.js", "c++"]), code_lines, st.booleans(),
    st.text(alphabet="abc .\n", max_size=200))


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(fenced, min_size=1, max_size=4).map("\n".join),
       st.one_of(st.integers(20, 120), st.integers(10, 300)), unit_st)
def test_code_blocks_are_closed_and_reopened(text, limit, unit):
    chunks = chunk_text(text, limit, unit)
    check_chunks(text, limit, unit, chunks)
    event("fence repaired" if any(c.endswith("\n```") for c in chunks[:-1]) else "no repair")


@settings(max_examples=150, deadline=None)
@given(texts, st.integers(10, 200), unit_st)
def test_chunking_is_deterministic_and_rechunking_is_stable(text, limit, unit):
    chunks = chunk_text(text, limit, unit)
    assert chunk_text(text, limit, unit) == chunks
    for c in chunks:  # a chunk that fits comes back unchanged
        assert chunk_text(c, limit, unit) == [c]


# --------------------------------------------------------------------------
# Large inputs terminate (timings live in bench/chunking.py)
# --------------------------------------------------------------------------


def _mixed_megabyte() -> str:
    para = ("Hello world, this is a sentence. Another one! And a question? "
            f"Emoji {THUMBS_TONE} {FAMILY} {FLAG_US} caf\u00e9 e\u0301 日本語の文。\n")
    block = para * 6 + "\n```python\n" + "def f(x):\n    return x * 2\n" * 20 + "```\n\n"
    return (block * (1_000_000 // len(block) + 1))[:1_000_000]


@pytest.mark.parametrize("text, unit", [
    pytest.param(_mixed_megabyte(), "chars", id="mixed-chars"),
    pytest.param(_mixed_megabyte(), "utf16", id="mixed-utf16"),
    pytest.param("x" * 1_000_000, "utf16", id="one-word"),
    pytest.param((FLAG_US + FLAG_DE) * 125_000, "utf16", id="flags"),
    pytest.param("a" + "\u0301" * 999_999, "utf16", id="one-cluster"),
    pytest.param("a" + " " * 999_998 + "b", "utf16", id="spaces"),
    pytest.param("```\n" * 250_000, "utf16", id="fence-lines"),
    pytest.param(("word " * 30 + "\n") * 6_600, "utf16", id="lines"),
])
@pytest.mark.slow
def test_a_megabyte_reply_terminates(text, unit):
    chunks = chunk_text(text, 4096, unit)
    assert all(text_length(c, unit) <= 4096 for c in chunks)
    assert all(c.strip() for c in chunks)
    if not find_code_fences(text):
        squeeze = re.compile(r"\s+")
        assert squeeze.sub("", "".join(chunks)) == squeeze.sub("", text)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from(list(" \n\tab.`😀é\u0301")), max_size=120),
       st.integers(1, 150), st.sampled_from(["chars", "utf16"]))
def test_fast_path_for_a_fitting_reply_agrees_with_the_chunker(text, limit, unit):
    """chunk_text answers a reply that fits without running the chunker: same result."""
    from chatkernel.core.outbound import chunking

    if not text or text.isspace():
        return
    utf16 = unit == "utf16" and max(text) > "\uffff"
    fences, starts, ends = chunking._scan_fences(text)
    try:
        try:
            expected = chunking._Chunker(text, limit, utf16, fences, starts, ends).run() \
                if fences else None
        except chunking._NoRoom:
            expected = None
        if expected is None:
            expected = chunking._Chunker(text, limit, utf16, [], starts, ends).run()
    except ValueError:
        return
    assert chunk_text(text, limit, unit) == expected
