"""MEDIA: markers: hand-written cases, then properties over generated replies."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from chatkernel.core.outbound.markers import Segment, media_paths, split_media
from chatkernel.testing.fuzz import fuzz_examples


def text(value: str) -> Segment:
    return Segment("text", value)


def media(value: str) -> Segment:
    return Segment("media", value)


# --------------------------------------------------------------------------
# Examples
# --------------------------------------------------------------------------


def test_markers_split_the_reply_in_order():
    reply = ("Here is the chart.\nMEDIA: /tmp/chart.png\n\nAnd the data:\n"
             "MEDIA: /tmp/data.csv\nThat is all.")
    assert split_media(reply) == [
        text("Here is the chart."), media("/tmp/chart.png"),
        text("And the data:"), media("/tmp/data.csv"), text("That is all.")]
    assert media_paths(reply) == ["/tmp/chart.png", "/tmp/data.csv"]


def test_reply_without_markers_is_one_text_segment():
    assert split_media("\n\nHello\n\n  world  \n\n") == [text("Hello\n\n  world  ")]
    assert split_media("") == []
    assert split_media(" \n\t\n") == []
    assert media_paths("no markers here") == []


def test_adjacent_markers_and_blank_text_between_them():
    assert split_media("MEDIA: a.png\n\n   \nMEDIA: b.png") == [media("a.png"), media("b.png")]


def test_leading_spaces_tabs_and_no_space_after_the_colon():
    assert media_paths("  MEDIA: a.png\n\tMEDIA:b.png\nMEDIA:   c d.png   ") == [
        "a.png", "b.png", "c d.png"]


@pytest.mark.parametrize("line, path", [
    ('MEDIA: "/tmp/my file.png"', "/tmp/my file.png"),
    ("MEDIA: '/tmp/it\"s.png'", '/tmp/it"s.png'),
    ("MEDIA: `/tmp/a b.png`", "/tmp/a b.png"),
    ('MEDIA: "  padded  "', "  padded  "),
    ('MEDIA: "a"b"', 'a"b'),
    ('MEDIA: "unterminated', '"unterminated'),  # no closing quote: taken literally
    ("MEDIA: 'x\"", "'x\""),  # mismatched quotes: taken literally
    ("MEDIA: /tmp/a.png\r", "/tmp/a.png"),  # CRLF line ending
])
def test_quoted_paths(line, path):
    assert split_media(line) == [media(path)]


@pytest.mark.parametrize("line", [
    "MEDIA:", "MEDIA:   ", 'MEDIA: ""', "MEDIA: ''", "MEDIA: ``",  # empty path
    "media: /tmp/a.png", "Media: /tmp/a.png",  # case-sensitive
    "see MEDIA: /tmp/a.png", "> MEDIA: /tmp/a.png", "- MEDIA: /tmp/a.png",  # not at line start
])
def test_lines_that_are_not_markers_stay_text(line):
    assert split_media(line) == [text(line)]


def test_markers_inside_code_blocks_are_code():
    reply = ("Run this:\n```python\nprint('x')\nMEDIA: /tmp/in-code.png\n```\n"
             "MEDIA: /tmp/real.png\n````\n```\nMEDIA: /tmp/nested.png\n````\nend")
    assert split_media(reply) == [
        text("Run this:\n```python\nprint('x')\nMEDIA: /tmp/in-code.png\n```"),
        media("/tmp/real.png"),
        text("````\n```\nMEDIA: /tmp/nested.png\n````\nend")]


def test_an_unclosed_code_block_runs_to_the_end():
    reply = "MEDIA: a.png\n```\nMEDIA: b.png\n"
    assert split_media(reply) == [media("a.png"), text("```\nMEDIA: b.png")]


def test_inline_triple_backticks_do_not_open_a_block():
    assert media_paths("```x```\nMEDIA: a.png") == ["a.png"]


def test_crlf_text_is_kept_and_its_final_cr_dropped():
    assert split_media("one\r\ntwo\r\nMEDIA: a.png\r\nthree\r\n") == [
        text("one\r\ntwo"), media("a.png"), text("three")]


def test_segment_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        media("a").value = "b"  # type: ignore[misc]


# --------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------


def strip_blank_lines(value: str) -> str:
    """What split_media promises for text: no leading/trailing blank lines."""
    lines = value.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines).removesuffix("\r")


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.text())
@example("MEDIA")
@example("\r\n\r\nx\r\n")
def test_text_without_markers_round_trips(value):
    if "MEDIA:" in value:
        value = value.replace("MEDIA:", "MEDIA")
    expected = strip_blank_lines(value)
    assert split_media(value) == ([text(expected)] if expected else [])
    assert media_paths(value) == []


# A reply is built from parts whose segments are known in advance.
plain_line = st.text(alphabet=st.characters(blacklist_characters="\n`",
                                            blacklist_categories=["Cs"]), max_size=40).filter(
    lambda line: "MEDIA:" not in line)
path = st.text(alphabet=st.characters(blacklist_characters="\n\r", blacklist_categories=["Cs"]),
               min_size=1, max_size=30).filter(lambda p: p.strip())


@st.composite
def marker(draw):
    p = draw(path)
    indent = draw(st.sampled_from(["", " ", "  ", "\t"]))
    gap = draw(st.sampled_from(["", " ", "  "]))
    needs_quotes = p != p.strip() or (len(p) >= 2 and p[0] in "\"'`" and p[-1] == p[0])
    quote = draw(st.sampled_from(['"', "'", "`"])) if needs_quotes or draw(st.booleans()) else ""
    return f"{indent}MEDIA:{gap}{quote}{p}{quote}", p


@st.composite
def code_block(draw):
    ticks = "`" * draw(st.integers(3, 5))
    lang = draw(st.sampled_from(["", "python", "sh"]))
    body = draw(st.lists(st.one_of(plain_line, marker().map(lambda m: m[0])), max_size=5))
    return "\n".join([ticks + lang, *body, ticks])


part = st.one_of(
    plain_line.map(lambda line: ("text", line)),
    marker().map(lambda m: ("media", m)),
    code_block().map(lambda block: ("text", block)),
)


@pytest.mark.slow
@settings(max_examples=fuzz_examples(100), deadline=None)
@given(st.lists(part, max_size=15))
def test_generated_replies_split_as_built(parts):
    reply = "\n".join(line if kind == "text" else line[0] for kind, line in parts)
    expected: list[Segment] = []
    pending: list[str] = []

    def flush() -> None:
        block = strip_blank_lines("\n".join(pending))
        if block:
            expected.append(text(block))
        pending.clear()

    for kind, value in parts:
        if kind == "text":
            pending.append(value)
        else:
            flush()
            expected.append(media(value[1]))
    flush()
    assert split_media(reply) == expected
    assert media_paths(reply) == [value[1] for kind, value in parts if kind == "media"]


@pytest.mark.slow
@settings(max_examples=120, deadline=None)
@given(st.lists(st.one_of(plain_line, marker().map(lambda m: m[0]), code_block()), max_size=12))
def test_segments_reassemble_the_reply(lines):
    reply = "\n".join(lines)
    segments = split_media(reply)
    for s in segments:
        assert s.value and (s.kind == "media" or s.value == strip_blank_lines(s.value))
    # Every line of the reply is either in a text segment or is a marker line.
    # (A segment's last CR is dropped as the rest of a CRLF, so compare without it.)
    kept = iter([ln.removesuffix("\r")
                 for s in segments if s.kind == "text" for ln in s.value.split("\n")])
    for line in reply.split("\n"):
        if line.strip() and not line.lstrip(" \t").startswith("MEDIA:"):
            assert line.removesuffix("\r") in kept
