"""Markdown → Slack's ``mrkdwn``: the channel's renderer (``Channel.markup``)."""

from __future__ import annotations

import re
from typing import Any

from chatkernel.channels import Line, MarkdownRenderer, display_url, escape_html, wrap_marks

__all__ = ["SlackMrkdwn", "to_slack_mrkdwn"]

#: What after a fence's opening ``` is a language tag: one word of letters, digits and
#: ``_ + - . #`` with nothing after it (``python``, ``c++``, ``objective-c``, ``c#``).
#: Anything else there (``def f():``) is the code's first line.
LANGUAGE_TAG = re.compile(r"[A-Za-z0-9_+.#-]+")


class SlackMrkdwn(MarkdownRenderer):
    """Slack's ``mrkdwn``.

    ``*bold*``, ``_italic_``, ``~strike~``, `` `code` ``, ``` fences (no
    language: mrkdwn has none; text after the opening ``` that is not a language
    tag, :data:`LANGUAGE_TAG`, is the code's first line, as Slack shows it),
    ``<url|text>`` links for ``http``, ``https`` and ``mailto``, ``>`` quotes. ``&``, ``<`` and ``>`` in text become ``&amp; &lt;
    &gt;`` — the only escapes Slack reads — so an agent cannot produce a
    ``<!channel>`` or ``<@U123>`` mention by accident.
    """

    name = "slack_mrkdwn"
    native_schemes = frozenset({"http", "https", "mailto"})
    plain_link_labels = True
    fallback = staticmethod(escape_html)
    _MARKS = {"strong": "*", "em": "_", "s": "~"}

    def text(self, s: str) -> str:
        return escape_html(s)

    def code_inline(self, s: str, in_link: bool) -> str:
        # No escape for a backtick inside inline code in mrkdwn.
        if in_link or "`" in s or not s.strip():
            return escape_html(s)
        return "`" + escape_html(s) + "`"

    def style(self, kind: str, content: str) -> str:
        return wrap_marks(content, self._MARKS[kind])

    def native_link(self, href: str, content: str, auto: bool) -> str:
        # "|" and ">" end the URL part; markdown-it already percent-encodes
        # ">" and spaces, not "|".
        url = escape_html(href.replace("|", "%7C"))
        label = " ".join(content.replace("|", "¦").split())
        if not label or label == escape_html(display_url(href)):
            return f"<{url}>"
        return f"<{url}|{label}>"

    def block(self, node: Any) -> list[Line]:
        token = node[0]
        info = token.info.strip() if token.type == "fence" else ""
        if info and not LANGUAGE_TAG.fullmatch(info):
            # Slack's own fences have no language: what a person typed after ``` is code
            # (```def f(): ... ```), kept as the block's first line.
            content = token.content.removesuffix("\n")
            return self.code_block(info + ("\n" + content if content else ""), "")
        return super().block(node)

    def code_block(self, content: str, lang: str) -> list[Line]:
        text = "```\n" + escape_html(content) + "\n```"
        return [(line, True) for line in text.split("\n")]

    def quote(self, lines: list[Line]) -> list[Line]:
        if self.quote_depth > 0 or self.list_depth == 0:
            return super().quote(lines)
        # Slack only reads ">" as a quote at the very start of a line; inside
        # a list item the marker is shown as text, so it must be escaped.
        return [("&gt; " + text if text else "&gt;", verbatim) for text, verbatim in lines]


def to_slack_mrkdwn(markdown: str) -> str:
    """Markdown → Slack ``mrkdwn`` text; never raises."""
    return SlackMrkdwn.convert(markdown)
