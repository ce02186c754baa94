"""Markdown → Telegram's HTML parse mode: the channel's renderer (``Channel.markup``)."""

from __future__ import annotations

from chatkernel.channels import Line, MarkdownRenderer, display_url, escape_attr, escape_html

__all__ = ["TelegramHTML", "to_telegram_html"]


class TelegramHTML(MarkdownRenderer):
    """Telegram's ``parse_mode=HTML`` subset.

    ``<b> <i> <s> <code> <pre>``, ``<pre><code class="language-x">`` for a fence
    with a language, ``<a href>`` and ``<blockquote>``. No other tag is ever
    emitted, every tag is balanced and properly nested, and Telegram's own
    nesting rules hold (nothing inside ``<code>``/``<pre>``, no ``<code>`` inside
    a link, no blockquote inside a blockquote). ``&``, ``<`` and ``>`` are
    escaped everywhere and ``"`` in attribute values, with the only named
    entities Telegram accepts (``&amp; &lt; &gt; &quot;``). ``http``, ``https``
    and ``tg`` links are real links.
    """

    name = "telegram_html"
    fallback = staticmethod(escape_html)
    native_schemes = frozenset({"http", "https", "tg"})
    _TAGS = {"strong": "b", "em": "i", "s": "s"}

    def text(self, s: str) -> str:
        return escape_html(s)

    def code_inline(self, s: str, in_link: bool) -> str:
        # Telegram: a link cannot contain a code entity.
        if in_link or not s:
            return escape_html(s)
        return "<code>" + escape_html(s) + "</code>"

    def style(self, kind: str, content: str) -> str:
        if not content:
            return content
        tag = self._TAGS[kind]
        return f"<{tag}>{content}</{tag}>"

    def native_link(self, href: str, content: str, auto: bool) -> str:
        if not content.strip():
            content = escape_html(display_url(href))
        return f'<a href="{escape_attr(href)}">{content}</a>'

    def code_block(self, content: str, lang: str) -> list[Line]:
        body = escape_html(content)
        if lang:
            html = f'<pre><code class="language-{escape_attr(lang)}">{body}</code></pre>'
        else:
            html = f"<pre>{body}</pre>"
        return [(line, True) for line in html.split("\n")]

    def quote(self, lines: list[Line]) -> list[Line]:
        if self.quote_depth > 0:  # Telegram: blockquotes can't be nested
            return lines
        if not any(text.strip() for text, _ in lines):
            return []
        lines = list(lines)
        text, verbatim = lines[0]
        lines[0] = ("<blockquote>" + text, verbatim)
        text, verbatim = lines[-1]
        lines[-1] = (text + "</blockquote>", verbatim)
        return lines


def to_telegram_html(markdown: str) -> str:
    """Markdown → Telegram ``parse_mode=HTML`` text; never raises."""
    return TelegramHTML.convert(markdown)
