"""Markdown → WhatsApp's formatting syntax: examples, then properties."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from chatkernel.channels import OutboundPayload, render, render_payload
from chatkernel.testing import PATHOLOGICAL_MARKDOWN, markdown_texts
from chatkernel_whatsapp.channel import WhatsAppChannel
from chatkernel_whatsapp.markup import WhatsAppText, to_whatsapp

PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize(
    ("md", "expected"),
    [
        ("**bold** *it* ~~gone~~", "*bold* _it_ ~gone~"),
        ("`x = 1`", "`x = 1`"),
        ("[site](https://example.com)", "site (https://example.com)"),
        ("<https://example.com>", "https://example.com"),
        ("[https://e.com](https://e.com)", "https://e.com"),
        ("[x](javascript:alert(1))", "x"),
        ("![pic](https://e.com/p.png)", "pic (https://e.com/p.png)"),
        ("## Heading", "*Heading*"),
        ("- a\n- b\n  - c", "- a\n- b\n  - c"),
        ("1. a\n2. b", "1. a\n2. b"),
        ("> quote\n> more", "> quote\n> more"),
        ("a < b & c", "a < b & c"),
        ("**bold text **", "**bold text **"),  # not emphasis in CommonMark
        ("**a\nb**", "*a*\n*b*"),  # markers must not span lines
    ],
)
def test_whatsapp_examples(md: str, expected: str) -> None:
    assert to_whatsapp(md) == expected


def test_whatsapp_fence_is_monospace() -> None:
    assert to_whatsapp("```py\nx = 1\ny = 2\n```") == "```x = 1\ny = 2```"


def test_the_renderer_is_registered_and_is_the_channels() -> None:
    from chatkernel.testing import registered_markups

    md = "**hi** <x>"
    markups = registered_markups()
    assert markups["whatsapp"] is WhatsAppText
    assert render(md, "whatsapp", markups) == render(md, WhatsAppText) == to_whatsapp(md) \
        == "*hi* <x>"
    assert WhatsAppChannel.markup is WhatsAppText
    markup = WhatsAppChannel.markup
    assert render_payload(OutboundPayload(text="**a** _b_"), markup) == ("*a* _b_", "whatsapp")
    assert render_payload(OutboundPayload(text="**a**", format="plain"), markup) == \
        ("**a**", None)


@pytest.mark.parametrize("md", PATHOLOGICAL_MARKDOWN)
def test_pathological_inputs(md: str) -> None:
    assert isinstance(WhatsAppText().render(md), str)


@PROPS
@given(markdown_texts())
def test_never_raises(md: str) -> None:
    assert isinstance(WhatsAppText().render(md), str)
    assert isinstance(render(md, WhatsAppText), str)


@PROPS
@given(st.text(alphabet="ab Zé09<&\"'\n", max_size=80))
@example("    0")
def test_plain_prose_passes_through(md: str) -> None:
    # (four leading spaces make an indented code block: monospace on WhatsApp)
    assert to_whatsapp(md).replace("```", " ").split() == md.split()


@PROPS
@given(st.text(alphabet="ab <&>*_\n", max_size=30), st.sampled_from(["", "py", "c++"]))
def test_fenced_code_is_verbatim(code: str, lang: str) -> None:
    code = code.strip("\n")
    if code:
        assert f"```{code}```" in to_whatsapp(f"Intro\n\n````{lang}\n{code}\n````\n\nOutro")
