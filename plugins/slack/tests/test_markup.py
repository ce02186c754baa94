"""Markdown → Slack mrkdwn: examples, then properties over text shaped like agents write."""

from __future__ import annotations

import html
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from chatkernel.channels import MarkdownRenderer, escape_html, render
from chatkernel.testing import PATHOLOGICAL_MARKDOWN, markdown_texts
from chatkernel_slack.markup import SlackMrkdwn, to_slack_mrkdwn


@pytest.mark.parametrize(
    ("md", "expected"),
    [
        ("**bold** *it* ~~gone~~", "*bold* _it_ ~gone~"),
        ("***both***", "_*both*_"),
        ("**bold _and it_**", "*bold _and it_*"),
        ("`a < b & c`", "`a &lt; b &amp; c`"),
        ("``a ` b``", "a ` b"),  # mrkdwn cannot put a backtick in inline code
        ("[site](https://example.com/?a=1&b=2)", "<https://example.com/?a=1&amp;b=2|site>"),
        ("[**bold** label](https://e.com)", "<https://e.com|bold label>"),
        ("[a|b](https://e.com/x|y)", "<https://e.com/x%7Cy|a¦b>"),
        ("<https://example.com>", "<https://example.com>"),
        ("[mail](mailto:a@b.c)", "<mailto:a@b.c|mail>"),
        ("![chart](https://e.com/c.png)", "<https://e.com/c.png|chart>"),
        ("[x](javascript:alert(1))", "x"),
        ("# Title", "*Title*"),
        ("- a\n- b\n  1. c", "• a\n• b\n  1. c"),
        ("> quote\n> **b**", "> quote\n> *b*"),
        ("> a\n>\n> > b", "> a\n>\n> b"),
        ("- item\n\n  > quoted", "• item\n\n  &gt; quoted"),  # ">" only quotes at a line's start
        ("a < b & c > d", "a &lt; b &amp; c &gt; d"),
        ("<!channel> <@U123>", "&lt;!channel&gt; &lt;@U123&gt;"),
        ("<script>x</script>", "&lt;script&gt;x&lt;/script&gt;"),
        ("---", "———"),
        ("**a\nb**", "*a*\n*b*"),  # markers must not span lines
    ],
)
def test_slack_examples(md: str, expected: str) -> None:
    assert to_slack_mrkdwn(md) == expected


def test_slack_fence_drops_language_and_escapes() -> None:
    assert to_slack_mrkdwn("```python\nif a < b:\n    pass\n```") == (
        "```\nif a &lt; b:\n    pass\n```"
    )


def test_the_renderer_is_registered_by_its_name() -> None:
    from chatkernel.testing import registered_markups

    md = "**hi** <x>"
    assert render(md, "slack_mrkdwn", registered_markups()) == render(md, SlackMrkdwn) \
        == to_slack_mrkdwn(md) \
        == "*hi* &lt;x&gt;"


def test_fallback_escapes_when_the_renderer_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: object, markdown: str) -> str:
        raise RuntimeError("bug")

    monkeypatch.setattr(MarkdownRenderer, "render", boom)
    assert to_slack_mrkdwn("a & <b>") == "a &amp; &lt;b&gt;"


PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_SLACK_LINK_RE = re.compile(r"<(?:https?|mailto):[^<>|\s]*(?:\|[^<>]*)?>")
_SLACK_QUOTE_RE = re.compile(r"^>(?: |$)", re.MULTILINE)
_SLACK_ENTITY_RE = re.compile(r"&(?!(?:amp|lt|gt);)")


@PROPS
@given(markdown_texts())
def test_slack_escapes_control_characters(md: str) -> None:
    """Only the renderer's own links and quotes use < > ; every & starts an escape."""
    out = to_slack_mrkdwn(md)
    rest = _SLACK_QUOTE_RE.sub("", _SLACK_LINK_RE.sub("", out))
    assert "<" not in rest and ">" not in rest, (md, out)
    assert not _SLACK_ENTITY_RE.search(out), (md, out)


@PROPS
@given(st.text(alphabet="ab Zé09<&\"'\n", max_size=80))
@example("    0")
def test_plain_prose_passes_through(md: str) -> None:
    # (four leading spaces make an indented code block: fenced on Slack)
    assert html.unescape(to_slack_mrkdwn(md)).replace("```", " ").split() == md.split()


@PROPS
@given(st.text(alphabet="ab <&>*_\n", max_size=30), st.sampled_from(["", "py", "c++"]))
def test_fenced_code_is_verbatim(code: str, lang: str) -> None:
    code = code.strip("\n")
    md = f"Intro\n\n````{lang}\n{code}\n````\n\nOutro"
    if code:
        assert f"```\n{escape_html(code)}\n```" in to_slack_mrkdwn(md)
    else:
        assert to_slack_mrkdwn(md) == "Intro\n\nOutro"


@pytest.mark.parametrize("md", PATHOLOGICAL_MARKDOWN)
def test_pathological_inputs(md: str) -> None:
    assert isinstance(SlackMrkdwn().render(md), str)  # the renderer itself copes
