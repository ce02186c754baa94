"""Markdown → WhatsApp's formatting syntax: the channel's renderer (``Channel.markup``)."""

from __future__ import annotations

from chatkernel.channels import Line, MarkdownRenderer, wrap_marks

__all__ = ["WhatsAppText", "to_whatsapp"]


class WhatsAppText(MarkdownRenderer):
    """WhatsApp's formatting syntax.

    ``*bold*``, ``_italic_``, ``~strike~``, `` `inline` ``, ```` ```monospace``` ````,
    ``- `` bullets, ``> `` quotes, links as ``text (url)`` (WhatsApp shows a URL as a
    link by itself). WhatsApp has no escape mechanism, so text is passed through as is.
    """

    name = "whatsapp"
    bullets = ("- ",)
    _MARKS = {"strong": "*", "em": "_", "s": "~"}

    def code_inline(self, s: str, in_link: bool) -> str:
        if "`" in s or not s.strip():
            return s
        return "`" + s + "`"

    def style(self, kind: str, content: str) -> str:
        return wrap_marks(content, self._MARKS[kind])

    def native_link(self, href: str, content: str, auto: bool) -> str:  # pragma: no cover
        return content  # no scheme is native: every link is shown as "text (url)"

    def code_block(self, content: str, lang: str) -> list[Line]:
        text = "```" + content + "```"
        return [(line, True) for line in text.split("\n")]


def to_whatsapp(markdown: str) -> str:
    """Markdown → WhatsApp's formatting syntax; never raises."""
    return WhatsAppText.convert(markdown)
