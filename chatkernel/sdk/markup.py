"""Convert the Markdown an agent writes into a platform's markup (docs/outbound.md).

Agents write CommonMark (plus GitHub's ``~~strike~~`` and pipe tables); chat
platforms each speak their own dialect. The text is parsed once with
markdown-it-py and its token stream is walked by :class:`MarkdownRenderer`,
whose small subclasses supply a target's syntax. A channel names its renderer
in ``Channel.markup``; a plugin defines its platform's renderer by subclassing
:class:`MarkdownRenderer` (Telegram's HTML lives in chatkernel-telegram, Slack's
mrkdwn in chatkernel-slack, WhatsApp's in chatkernel-whatsapp). A renderer the
plugin registers through the ``register_markups`` hook can be named in the kernels
that loaded the plugin: each plugin manager keeps its own table (:data:`Markups`),
never one per process. The kernel keeps the generic one:

``plain``
    The readable text with the markup removed: links as ``text (url)``, code
    verbatim, ``• `` bullets, ``> `` quote prefixes.

Shared layout rules: a heading becomes a bold line; a list becomes lines
prefixed ``• `` (``◦ ``, ``▪ `` when nested) or ``1. ``,
continuation lines indented under the item's text; a table becomes an aligned
pipe table in a code block; a horizontal rule becomes ``———``; an image becomes
a link to it; the agent's line breaks are kept; blocks are separated by one
blank line (list items of a tight list by none). Fenced and indented code
comes through verbatim (only escaped where the target requires it) and is
never re-indented.

Links: the schemes a renderer lists (``http``/``https``, ``mailto`` on Slack)
become real links. A link with a dangerous scheme (``javascript:``, ``vbscript:``,
``data:``, ``file:``) keeps only its text. Any other target (``mailto:`` on
``tel:``, relative paths, …) is shown as ``text (url)``.

Raw HTML the agent writes is not interpreted (markdown-it's ``html`` option
is off): ``<script>`` shows up as literal, escaped text.

Robustness: the functions never raise on any ``str``. markdown-it bounds
nesting (``maxNesting``) so rendering recursion is bounded; should anything
still go wrong, the raw input is returned escaped for the target, which is
always valid markup.

Chunking: convert each chunk separately *after* splitting the Markdown (see
:mod:`chatkernel.core.outbound.chunking`, which closes and reopens code fences), never
split converted HTML. Inline Markdown that straddles a cut (``**bold`` … ``**``,
a link) is rendered literally on both sides, which is still valid markup.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

from markdown_it import MarkdownIt
from markdown_it.token import Token

__all__ = [
    "Line",
    "MarkdownRenderer",
    "PlainText",
    "display_url",
    "escape_attr",
    "escape_html",
    "KIT_MARKUPS",
    "Markups",
    "render",
    "render_payload",
    "renderer_for",
    "to_plain",
    "wrap_marks",
]

HR_LINE = "———"

# A link target with one of these schemes is never shown as a link or URL.
_DANGEROUS_SCHEMES = frozenset({"javascript", "vbscript", "data", "file"})
_SCHEME_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_LANG_JUNK_RE = re.compile(r"[^A-Za-z0-9_+#.\-]")


def _make_parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable(["strikethrough", "table"])
    # Accept every link destination at parse time: the renderers decide what
    # to do with unsafe ones (keep the text), instead of markdown-it leaving
    # "[text](javascript:…)" as literal brackets.
    md.validateLink = lambda url: True  # type: ignore[method-assign]
    return md


_MD = _make_parser()


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def escape_html(text: str) -> str:
    """``&``, ``<`` and ``>`` as HTML entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escape_attr(text: str) -> str:
    """:func:`escape_html`, and ``"`` too (for attribute values)."""
    return escape_html(text).replace('"', "&quot;")


def _scheme(url: str) -> str | None:
    match = _SCHEME_RE.match(url)
    return match.group(1).lower() if match else None


def display_url(href: str) -> str:
    """The URL as a person would read it (percent-escapes of text decoded)."""
    try:
        return _MD.normalizeLinkText(href)
    except Exception:  # pragma: no cover - defensive: mdurl/punycode edge cases
        return href


def wrap_marks(content: str, mark: str) -> str:
    """Wrap ``content`` in an inline ``mark`` (``*`` for bold) the way Slack's mrkdwn
    and WhatsApp need it.

    Their markers only work when they touch non-space characters and stay on
    one line, so each line is wrapped separately with its surrounding
    whitespace kept outside; blank lines are left alone.
    """
    out = []
    for line in content.split("\n"):
        core = line.strip()
        if not core:
            out.append(line)
            continue
        start = line.index(core[0])
        out.append(line[:start] + mark + core + mark + line[start + len(core) :])
    return "\n".join(out)



def _width(text: str) -> int:
    """Monospace display width: wide East Asian characters count 2."""
    if text.isascii():
        return len(text)
    width = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        width += 2 if unicodedata.east_asian_width(ch) in "WF" else 1
    return width


def _pad(text: str, width: int, align: str) -> str:
    gap = max(width - _width(text), 0)
    if align == "right":
        return " " * gap + text
    if align == "center":
        left = gap // 2
        return " " * left + text + " " * (gap - left)
    return text + " " * gap


def _format_table(rows: list[list[str]], aligns: list[str]) -> str:
    """An aligned pipe table; the first row is the header."""
    ncols = max(len(row) for row in rows)
    rows = [row + [""] * (ncols - len(row)) for row in rows]
    aligns = aligns + ["left"] * (ncols - len(aligns))
    widths = [max(3, *(_width(row[c]) for row in rows)) for c in range(ncols)]
    lines = []
    for i, row in enumerate(rows):
        cells = [_pad(cell, widths[c], aligns[c]) for c, cell in enumerate(row)]
        lines.append("| " + " | ".join(cells) + " |")
        if i == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(line.rstrip() for line in lines)


#: A block renders to lines; the flag marks verbatim lines (code), which list
#: indentation must not touch.
Line = tuple[str, bool]
_Line = Line
_Node = tuple[Token, "list[_Node] | None"]


def _tree(tokens: Sequence[Token]) -> list[_Node]:
    """Nest markdown-it's flat block token stream (open/close pairs)."""
    root: list[_Node] = []
    stack = [root]
    for tok in tokens:
        if tok.nesting == 1:
            children: list[_Node] = []
            stack[-1].append((tok, children))
            stack.append(children)
        elif tok.nesting == -1:
            if len(stack) > 1:
                stack.pop()
        else:
            stack[-1].append((tok, None))
    return root


# --------------------------------------------------------------------------
# Renderers
# --------------------------------------------------------------------------


class MarkdownRenderer:
    """The walk over the Markdown's token tree; subclasses supply the target syntax.

    Set :attr:`name` (how ``Channel.markup`` and :func:`render` may name it)
    and override the target hooks below: :meth:`text` (escape plain text),
    :meth:`code_inline`, :meth:`style` (bold, italic, strike), :meth:`native_link`
    (for the :attr:`native_schemes`), :meth:`code_block`, :meth:`quote`, and
    :meth:`fallback`, the whole input escaped for the target, which is what is
    sent should rendering ever fail. A renderer is made anew for each text.
    """

    #: The markup's name ("telegram_html"): what ``Channel.markup`` and :func:`render`
    #: may call it once a plugin registers it (the ``register_markups`` hook).
    name: ClassVar[str] = ""

    bullets: tuple[str, ...] = ("• ", "◦ ", "▪ ")
    #: Emphasis inside a link label is dropped (Slack's ``<url|label>``).
    plain_link_labels = False
    #: Schemes rendered as the target's own link; others become ``text (url)``.
    native_schemes: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.list_depth = 0
        self.quote_depth = 0

    # -- entry points ------------------------------------------------------

    def render(self, markdown: str) -> str:
        lines = self.blocks(_tree(_MD.parse(markdown)))
        return "\n".join(text for text, _ in lines).strip("\n")

    @staticmethod
    def fallback(markdown: str) -> str:
        """The raw text made valid for the target (sent if rendering fails)."""
        return markdown

    @classmethod
    def convert(cls, markdown: str) -> str:
        """``markdown`` in this markup; never raises."""
        return _convert(markdown, cls, cls.fallback)

    # -- target hooks (text level) -----------------------------------------

    def text(self, s: str) -> str:
        return s

    def code_inline(self, s: str, in_link: bool) -> str:
        return s

    def style(self, kind: str, content: str) -> str:
        """Wrap ``content`` for ``kind`` in ``strong``, ``em``, ``s``."""
        return content

    def native_link(self, href: str, content: str, auto: bool) -> str:
        raise NotImplementedError  # pragma: no cover

    # -- target hooks (block level) ----------------------------------------

    def heading(self, content: str) -> str:
        return self.style("strong", content)

    def code_block(self, content: str, lang: str) -> list[_Line]:
        return [(line, True) for line in content.split("\n")]

    def table(self, text: str) -> list[_Line]:
        return self.code_block(text, "")

    def quote(self, lines: list[_Line]) -> list[_Line]:
        if self.quote_depth > 0:  # no nested quotes on chat platforms
            return lines
        return [("> " + text if text else ">", verbatim) for text, verbatim in lines]

    # -- links -------------------------------------------------------------

    def link(self, href: str, content: str, auto: bool) -> str:
        scheme = _scheme(href)
        if scheme in _DANGEROUS_SCHEMES:
            return content
        if scheme in self.native_schemes:
            return self.native_link(href, content, auto)
        url = display_url(href).removeprefix("mailto:")
        if auto:  # <https://…> or <a@b.c>: the text already is the URL
            return content
        if not url or url.startswith("#"):  # nothing a chat reader can open
            return content
        if not content.strip():
            return self.text(url)
        if content == self.text(url):
            return content
        return content + self.text(f" ({url})")

    # -- inline ------------------------------------------------------------

    def inline(self, tokens: Sequence[Token] | None, base: frozenset[str] = frozenset()) -> str:
        parts: list[str] = []
        frames: list[tuple[str, Token, list[str]]] = []
        counts = {"strong": 0, "em": 0, "s": 0, "link": 0}

        def close_top() -> None:
            nonlocal parts
            kind, tok, outer = frames.pop()
            content = "".join(parts)
            parts = outer
            if kind == "link":
                if counts["link"] > 1:  # a link inside a link: text only
                    parts.append(content)
                else:
                    href = tok.attrs.get("href")
                    href = href if isinstance(href, str) else ""
                    parts.append(self.link(href, content, tok.info == "auto"))
            elif (
                counts[kind] > 1
                or kind in base
                or (self.plain_link_labels and counts["link"] > 0)
            ):
                parts.append(content)
            else:
                parts.append(self.style(kind, content))
            counts[kind] -= 1

        for tok in tokens or ():
            ttype = tok.type
            if ttype == "text":
                parts.append(self.text(tok.content))
            elif ttype == "softbreak" or ttype == "hardbreak":
                parts.append("\n")
            elif ttype == "code_inline":
                parts.append(self.code_inline(tok.content, counts["link"] > 0))
            elif ttype == "image":
                alt = PlainText().inline(tok.children)
                src = tok.attrs.get("src")
                src = src if isinstance(src, str) else ""
                if counts["link"] > 0:
                    parts.append(self.text(alt))
                else:
                    parts.append(self.link(src, self.text(alt), False))
            elif tok.nesting == 1 and ttype[:-5] in counts:
                kind = ttype[:-5]
                counts[kind] += 1
                frames.append((kind, tok, parts))
                parts = []
            elif tok.nesting == -1 and ttype[:-6] in counts:
                kind = ttype[:-6]
                if any(frame[0] == kind for frame in frames):
                    while frames:
                        top = frames[-1][0]
                        close_top()
                        if top == kind:
                            break
            elif tok.content:
                parts.append(self.text(tok.content))
        while frames:
            close_top()
        return "".join(parts)

    # -- blocks ------------------------------------------------------------

    def blocks(self, nodes: list[_Node], tight: bool = False) -> list[_Line]:
        out: list[_Line] = []
        for node in nodes:
            lines = self.block(node)
            if not lines:
                continue
            if out and not tight:
                out.append(("", False))
            out.extend(lines)
        return out

    def block(self, node: _Node) -> list[_Line]:
        tok, children = node
        ttype = tok.type
        if ttype == "inline":
            text = self.inline(tok.children)
            return [(line, False) for line in text.split("\n")] if text.strip() else []
        if ttype == "paragraph_open":
            return self.blocks(children or [], tight=True)
        if ttype == "heading_open":
            inl = [t for t, _ in children or [] if t.type == "inline"]
            content = self.inline(inl[0].children if inl else None, frozenset({"strong"}))
            text = self.heading(content)
            return [(line, False) for line in text.split("\n")] if text.strip() else []
        if ttype == "fence" or ttype == "code_block":
            content = tok.content.removesuffix("\n")
            if not content:
                return []
            lang = ""
            if ttype == "fence" and tok.info:
                words = tok.info.split()
                lang = _LANG_JUNK_RE.sub("", words[0]) if words else ""
            return self.code_block(content, lang)
        if ttype == "hr":
            return [(HR_LINE, False)]
        if ttype == "blockquote_open":
            self.quote_depth += 1
            try:
                lines = self.blocks(children or [])
            finally:
                self.quote_depth -= 1
            return self.quote(lines) if lines else []
        if ttype == "bullet_list_open" or ttype == "ordered_list_open":
            return self.list_block(tok, children or [])
        if ttype == "table_open":
            return self.table_block(children or [])
        if children is not None:
            return self.blocks(children)
        if tok.content:  # html_block and anything unknown: literal text
            return [(line, False) for line in self.text(tok.content.strip("\n")).split("\n")]
        return []

    def list_block(self, tok: Token, items: list[_Node]) -> list[_Line]:
        ordered = tok.type == "ordered_list_open"
        number = 1
        if ordered:
            start = tok.attrs.get("start", 1)
            number = start if isinstance(start, int) else 1
        tight = not any(
            t.type == "paragraph_open" and not t.hidden
            for _, item_children in items
            for t, _ in item_children or []
        )
        bullet = self.bullets[self.list_depth % len(self.bullets)]
        self.list_depth += 1
        out: list[_Line] = []
        try:
            for item, item_children in items:
                if item.type != "list_item_open":
                    continue
                marker = f"{number}. " if ordered else bullet
                number += 1
                lines = self.blocks(item_children or [], tight)
                if out and not tight:
                    out.append(("", False))
                if not lines:
                    out.append((marker.rstrip(), False))
                    continue
                indent = " " * len(marker)
                out.append((marker + lines[0][0], lines[0][1]))
                out.extend(
                    (indent + text if text and not verbatim else text, verbatim)
                    for text, verbatim in lines[1:]
                )
        finally:
            self.list_depth -= 1
        return out

    def table_block(self, sections: list[_Node]) -> list[_Line]:
        rows: list[list[str]] = []
        aligns: list[str] = []
        plain = PlainText()

        def walk(nodes: list[_Node]) -> None:
            for tok, children in nodes:
                if tok.type == "tr_open":
                    row = []
                    for cell, cell_children in children or []:
                        if not rows:
                            style = cell.attrs.get("style")
                            style = style if isinstance(style, str) else ""
                            aligns.append(style.removeprefix("text-align:") or "left")
                        inl = [t for t, _ in cell_children or [] if t.type == "inline"]
                        text = plain.inline(inl[0].children) if inl else ""
                        row.append(" ".join(text.split()))
                    rows.append(row)
                elif children:
                    walk(children)

        walk(sections)
        if not rows or not any(rows):
            return []
        return self.table(_format_table(rows, aligns))


class PlainText(MarkdownRenderer):
    """Readable plain text: the markup removed."""

    name = "plain"

    def quote(self, lines: list[_Line]) -> list[_Line]:
        # Nested quotes nest ("> > "): plain text can show that.
        return [("> " + text if text else ">", verbatim) for text, verbatim in lines]

    def native_link(self, href: str, content: str, auto: bool) -> str:  # pragma: no cover
        return content


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def _convert(markdown: str, renderer: type[MarkdownRenderer], fallback: Callable[[str], str]) -> str:
    if not isinstance(markdown, str):
        markdown = "" if markdown is None else str(markdown)
    if not markdown.strip():
        return ""
    try:
        return renderer().render(markdown)
    except Exception:
        # Never fail a send over formatting: the raw text, escaped, is valid.
        return fallback(markdown)




def to_plain(markdown: str) -> str:
    """Markdown → readable plain text (markup removed, code verbatim)."""
    return PlainText.convert(markdown)


#: Renderers by name: what one plugin manager's ``register_markups`` hook collected
#: (``PluginManager.markups``, given to each channel as ``context.markups``). Each
#: kernel has its own: two kernels in one process never see each other's renderers.
Markups = Mapping[str, type[MarkdownRenderer]]

#: The renderers every kernel knows by name, whatever its plugins register.
KIT_MARKUPS: Markups = MappingProxyType({PlainText.name: PlainText})


def renderer_for(markup: "type[MarkdownRenderer] | str",
                 markups: Markups | None = None) -> type[MarkdownRenderer]:
    """The renderer ``markup`` is or names: a class as it is, a name among the kit's
    own (:data:`KIT_MARKUPS`) or ``markups``. ValueError for an unknown name."""
    if isinstance(markup, type) and issubclass(markup, MarkdownRenderer):
        return markup
    known = {**(markups or {}), **KIT_MARKUPS}  # the kit's own names cannot be taken
    if isinstance(markup, str) and markup in known:
        return known[markup]
    raise ValueError(f"unknown markup {markup!r}: expected a MarkdownRenderer or one of "
                     f"{', '.join(sorted(known))}")


# Text Markdown leaves alone: no character any target treats specially, no line
# that could open a block (indent, list number), no run of blank lines to fold.
_MARKDOWN_SYNTAX = re.compile(r"[\\`*_\[\]()#+\-!|~<>&=:/\r\t]|^\s|\s$|^\d|\n\s*\n\s*\n"
                              r"|\n\s|\s\n|\n\d")


def is_plain(text: str) -> bool:
    """Whether ``text`` reads the same in every markup (most chat replies do):
    then rendering is the identity and the parser can be skipped."""
    return _MARKDOWN_SYNTAX.search(text) is None


def render(markdown: str, markup: "type[MarkdownRenderer] | str",
           markups: Markups | None = None) -> str:
    """Convert ``markdown`` with ``markup``: a renderer, or the name of one of the kit's
    or of ``markups`` (a kernel's registered renderers, ``context.markups``)."""
    renderer = renderer_for(markup, markups)
    if is_plain(markdown):
        return markdown  # the parse would give it back unchanged (tested)
    return renderer.convert(markdown)


def render_payload(payload: Any, markup: "type[MarkdownRenderer] | str | None",
                   markups: Markups | None = None) -> tuple[str, str | None]:
    """The text of an outbound payload to put on the wire, and the name of the markup it
    is in (None: plain).

    Markdown payloads are converted with ``markup`` (a channel's
    :attr:`~chatkernel.channels.Channel.markup`); plain ones (error notes, command
    answers, a resend after the platform refused the markup) go as they are. A name
    is looked up as :func:`render` does (a channel the kernel built has its named
    markup resolved already).
    """
    if payload.format == "markdown" and markup:
        renderer = renderer_for(markup, markups)
        return render(payload.text, renderer), renderer.name
    return payload.text, None
