"""Telegram's text model: UTF-16 lengths and the three parse modes, as TDLib reads them.

:func:`parse_html`, :func:`parse_markdown_v2` and :func:`parse_markdown` turn a message's
markup into the visible text and its ``MessageEntity`` list (offsets and lengths in UTF-16
code units), raising :class:`EntityParseError` with TDLib's wording and byte offsets for
markup Telegram refuses; :func:`parse_entities` picks the parser from a ``parse_mode``.
:func:`detect_entities` finds what Telegram marks in an incoming text by itself
(mentions and bot commands). The fake Bot API (:mod:`chatkernel_telegram.fake`) answers
with these; they are close to TDLib's parsers, not byte-for-byte copies.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

__all__ = [
    "EntityParseError",
    "detect_entities",
    "parse_entities",
    "parse_html",
    "parse_markdown",
    "parse_markdown_v2",
    "utf16_len",
]


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, the unit of Telegram's limits and entity offsets."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


class EntityParseError(ValueError):
    """Markup Telegram refuses; the message is the reason after "can't parse entities: "."""


class _Out:
    """Parsed text being built, with its length in UTF-16 units."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.u16 = 0

    def add(self, text: str) -> None:
        self.parts.append(text)
        self.u16 += utf16_len(text)

    def text(self) -> str:
        return "".join(self.parts)


def _byte_offset(text: str, index: int) -> int:
    return len(text[:index].encode("utf-8", "surrogatepass"))


_SPACES = " \t\r\n\v\f"
_SURROGATE_ERROR = ("Text contains invalid Unicode characters after decoding HTML entities, "
                    "check for unmatched surrogate code units")
_NAMED_ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}


def _decode_html_entity(text: str, i: int) -> tuple[str | None, int]:
    """At ``text[i] == "&"``: the decoded character and the index after it, or None.

    Only &lt; &gt; &amp; &quot; and numeric entities are decoded (the ";" is optional);
    anything else stays literally in the text, as TDLib does.
    """
    n = len(text)
    j = i + 1
    if j < n and text[j] == "#":
        j += 1
        if j < n and text[j] in "xX":
            j += 1
            start = j
            while j < n and text[j] in "0123456789abcdefABCDEF":
                j += 1
            base = 16
        else:
            start = j
            while j < n and text[j] in "0123456789":
                j += 1
            base = 10
        digits = text[start:j]
        if not digits or len(digits) > 8:
            return None, i
        value = int(digits, base)
        if value == 0 or value > 0x10FFFF:
            return None, i
        if 0xD800 <= value <= 0xDFFF:
            raise EntityParseError(_SURROGATE_ERROR)
        if j < n and text[j] == ";":
            j += 1
        return chr(value), j
    start = j
    while j < n and text[j].isascii() and text[j].isalpha():
        j += 1
    value_str = _NAMED_ENTITIES.get(text[start:j])
    if value_str is None:
        return None, i
    if j < n and text[j] == ";":
        j += 1
    return value_str, j


_HTML_ENTITY_TYPES = {
    "b": "bold", "strong": "bold", "i": "italic", "em": "italic",
    "u": "underline", "ins": "underline", "s": "strikethrough", "strike": "strikethrough",
    "del": "strikethrough", "span": "spoiler", "tg-spoiler": "spoiler", "a": "text_link",
    "code": "code", "pre": "pre", "blockquote": "blockquote", "tg-emoji": "custom_emoji",
    "tg-time": "date_time",
}
_URL_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _normalize_url(url: str) -> str | None:
    """Telegram's view of a link target: ``telegram.org`` -> ``http://telegram.org/``;
    None when it is no URL (the entity is then dropped)."""
    url = url.strip()
    if not url or any(c in url for c in _SPACES):
        return None
    if url.lower().startswith(("tg:", "mailto:")):
        return url
    if not _URL_SCHEME.match(url):
        url = "http://" + url
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return None
    if not parts.netloc or ("." not in host and host != "localhost"):
        return None
    before_fragment = url.split("#", 1)[0]
    return (f"{parts.scheme.lower()}://{parts.netloc}{parts.path or '/'}"
            + ("?" + parts.query if "?" in before_fragment else "")
            + ("#" + parts.fragment if "#" in url else ""))


def _merge_pre_code(entities: list[dict[str, Any]], closed: dict[str, Any]) -> bool:
    """``<pre><code class="language-x">`` over the same text is one pre entity with a
    language. True when ``closed`` was merged into an entity already recorded."""
    if closed["type"] not in ("pre", "code"):
        return False
    for other in reversed(entities):
        if other["offset"] != closed["offset"] or other["length"] != closed["length"]:
            continue
        pair = {other["type"], closed["type"]}
        if pair != {"pre", "code"}:
            continue
        code = other if other["type"] == "code" else closed
        language = code.pop("_language", None)
        if not language:
            return False
        other.clear()
        other.update({"type": "pre", "offset": closed["offset"], "length": closed["length"],
                      "language": language})
        return True
    return False


def parse_html(markup: str) -> tuple[str, list[dict[str, Any]]]:
    """Telegram's HTML parse mode: the visible text and its MessageEntity list.

    Follows TDLib's parser: supported tags only, balanced nesting (``</>`` closes the
    innermost tag), attributes quoted or not, the four named entities plus numeric ones.
    Raises :class:`EntityParseError` with TDLib's wording and byte offset.
    """
    out = _Out()
    stack: list[dict[str, Any]] = []
    entities: list[dict[str, Any]] = []
    n = len(markup)
    i = 0
    while i < n:
        c = markup[i]
        if c == "&":
            decoded, j = _decode_html_entity(markup, i)
            if decoded is None:
                out.add("&")
                i += 1
            else:
                out.add(decoded)
                i = j
            continue
        if c != "<":
            j = i
            while j < n and markup[j] not in "<&":
                j += 1
            out.add(markup[i:j])
            i = j
            continue
        begin = i
        if i + 1 < n and markup[i + 1] == "/":
            # An end tag.
            if not stack:
                raise EntityParseError(
                    f"Unexpected end tag at byte offset {_byte_offset(markup, begin)}")
            j = i + 2
            while j < n and markup[j] not in _SPACES and markup[j] != ">":
                j += 1
            end_name = markup[i + 2:j].lower()
            while j < n and markup[j] in _SPACES:
                j += 1
            if j >= n or markup[j] != ">":
                raise EntityParseError(
                    f"Unclosed end tag at byte offset {_byte_offset(markup, begin)}")
            opened = stack[-1]
            if end_name and end_name != opened["tag"]:
                raise EntityParseError(
                    f"Unmatched end tag at byte offset {_byte_offset(markup, begin)}, "
                    f"expected \"</{opened['tag']}>\", found \"</{end_name}>\"")
            stack.pop()
            _close_html_entity(opened, out, entities)
            i = j + 1
            continue
        # A start tag.
        j = i + 1
        while j < n and markup[j] not in _SPACES and markup[j] != ">":
            j += 1
        tag = markup[i + 1:j].lower()
        if j >= n:
            raise EntityParseError(
                f"Unclosed start tag at byte offset {_byte_offset(markup, begin)}")
        if tag not in _HTML_ENTITY_TYPES:
            raise EntityParseError(
                f"Unsupported start tag \"{tag}\" at byte offset {_byte_offset(markup, begin)}")
        attributes, j = _html_attributes(markup, j, tag, begin)
        opened = {"tag": tag, "offset": out.u16, "part": len(out.parts),
                  "attributes": attributes}
        if tag == "span" and attributes.get("class") != "tg-spoiler":
            raise EntityParseError(
                f"Tag \"span\" must have class \"tg-spoiler\" at byte offset "
                f"{_byte_offset(markup, begin)}")
        if tag == "tg-emoji" and not attributes.get("emoji-id", "").isdigit():
            raise EntityParseError("Invalid custom emoji identifier specified")
        if tag == "tg-time":
            _check_time_attributes(attributes)
        stack.append(opened)
        i = j + 1
    if stack:
        raise EntityParseError(
            f"Can't find end tag corresponding to start tag \"{stack[-1]['tag']}\"")
    for entity in entities:
        entity.pop("_language", None)
    entities.sort(key=lambda e: (e["offset"], -e["length"]))
    return out.text(), entities


def _html_attributes(markup: str, j: int, tag: str, begin: int) -> tuple[dict[str, str], int]:
    """Attributes of a start tag whose name ends at ``j``; returns them and the index
    of the closing ``>``."""
    n = len(markup)
    attributes: dict[str, str] = {}
    while True:
        while j < n and markup[j] in _SPACES:
            j += 1
        if j >= n:
            raise EntityParseError(
                f"Unclosed start tag at byte offset {_byte_offset(markup, begin)}")
        if markup[j] == ">":
            return attributes, j
        name_start = j
        while j < n and markup[j] not in _SPACES and markup[j] not in "=>":
            j += 1
        name = markup[name_start:j].lower()
        if not name:
            raise EntityParseError(f"Empty attribute name in the tag \"{tag}\" at byte "
                                   f"offset {_byte_offset(markup, begin)}")
        while j < n and markup[j] in _SPACES:
            j += 1
        if j >= n or markup[j] != "=":
            attributes.setdefault(name, "")
            continue
        j += 1
        while j < n and markup[j] in _SPACES:
            j += 1
        if j >= n:
            raise EntityParseError(
                f"Unclosed start tag \"{tag}\" at byte offset {_byte_offset(markup, begin)}")
        if markup[j] in "'\"":
            quote = markup[j]
            j += 1
            value = []
            while j < n and markup[j] != quote:
                if markup[j] == "&":
                    decoded, k = _decode_html_entity(markup, j)
                    if decoded is not None:
                        value.append(decoded)
                        j = k
                        continue
                value.append(markup[j])
                j += 1
            if j >= n:
                raise EntityParseError(
                    f"Unclosed start tag at byte offset {_byte_offset(markup, begin)}")
            j += 1
            attributes.setdefault(name, "".join(value))
        else:
            token_start = j
            while j < n and (markup[j].isascii() and markup[j].isalnum() or markup[j] in ".-"):
                j += 1
            if j < n and markup[j] not in _SPACES and markup[j] != ">":
                raise EntityParseError(f"Unexpected end of name token at byte offset "
                                       f"{_byte_offset(markup, token_start)}")
            attributes.setdefault(name, markup[token_start:j].lower())


def _check_time_attributes(attributes: dict[str, str]) -> None:
    if not attributes.get("unix", "").lstrip("-").isdigit():
        raise EntityParseError("Invalid Unix time specified")
    fmt = attributes.get("format", "")
    if fmt and not (fmt == "r" or set(fmt) <= set("wWdDtT")):
        raise EntityParseError("Invalid date format used")


def _close_html_entity(opened: dict[str, Any], out: _Out,
                       entities: list[dict[str, Any]]) -> None:
    length = out.u16 - opened["offset"]
    if length <= 0:
        return
    tag, attributes = opened["tag"], opened["attributes"]
    entity: dict[str, Any] = {"type": _HTML_ENTITY_TYPES[tag], "offset": opened["offset"],
                              "length": length}
    if tag == "a":
        href = attributes.get("href")
        if href is None:   # the text itself is the link, if it is a URL
            href = "".join(out.parts[opened["part"]:])
            if href != href.strip():
                return
        url = _normalize_url(href)
        if url is None:
            return
        entity["url"] = url
    elif tag == "blockquote" and "expandable" in attributes:
        entity["type"] = "expandable_blockquote"
    elif tag == "tg-emoji":
        entity["custom_emoji_id"] = attributes["emoji-id"]
    elif tag == "tg-time":
        entity["unix_time"] = int(attributes["unix"])
        if attributes.get("format"):
            entity["date_time_format"] = attributes["format"]
    elif tag == "code":
        language = attributes.get("class", "")
        if language.startswith("language-") and len(language) > len("language-"):
            entity["_language"] = language[len("language-"):]
    if not _merge_pre_code(entities, entity):
        entities.append(entity)   # a code's "_language" stays until parse_html ends


_MDV2_RESERVED = frozenset("_*[]()~`>#+-=|{}.!")
_MDV2_NAMES = {"italic": "Italic", "bold": "Bold", "underline": "Underline",
               "strikethrough": "Strikethrough", "spoiler": "Spoiler", "code": "Code",
               "pre": "Pre", "pre_code": "PreCode", "text_link": "TextUrl",
               "custom_emoji": "CustomEmoji"}


def _tg_emoji_or_time(url: str) -> dict[str, Any]:
    """The entity fields a ``![text](tg://emoji?id=…)`` / ``tg://time?unix=…`` URL gives."""
    invalid = EntityParseError("Invalid tg://emoji or tg://time URL specified")
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        raise invalid from None
    if parts.scheme.lower() != "tg" or parts.path not in ("", "/"):
        raise invalid
    query = dict(urllib.parse.parse_qsl(parts.query))
    host = parts.netloc.lower()
    if host == "emoji" and re.fullmatch(r"[1-9]\d*", query.get("id", "")):
        return {"custom_emoji_id": query["id"]}
    if host == "time" and re.fullmatch(r"-?[1-9]\d*|0", query.get("unix", "")):
        fields: dict[str, Any] = {"type": "date_time", "unix_time": int(query["unix"])}
        fmt = query.get("format", "")
        if fmt and not (fmt.lower() == "r" or set(fmt) <= set("wWdDtT")):
            raise EntityParseError("Invalid date format used")
        if fmt:
            fields["date_time_format"] = fmt
        return fields
    raise invalid


def _mdv2_reserved(c: str) -> EntityParseError:
    return EntityParseError(
        f"Character '{c}' is reserved and must be escaped with the preceding '\\'")


def _mdv2_url(markup: str, i: int) -> tuple[str, int]:
    """Reads ``(url)`` from ``markup[i] == "("``; returns the url and the index of ``)``."""
    n = len(markup)
    i += 1
    begin = i
    url = []
    while i < n and markup[i] != ")":
        if markup[i] == "\\" and i + 1 < n and 0 < ord(markup[i + 1]) <= 126:
            url.append(markup[i + 1])
            i += 2
            continue
        url.append(markup[i])
        i += 1
    if i >= n:
        raise EntityParseError(
            f"Can't find end of a URL at byte offset {_byte_offset(markup, begin)}")
    return "".join(url), i


def parse_markdown_v2(markup: str) -> tuple[str, list[dict[str, Any]]]:
    """Telegram's MarkdownV2: the visible text and its entities.

    Reserved characters ``_*[]()~`>#+-=|{}.!`` must be escaped with ``\\`` outside
    entities, only ``\\`` and the backtick inside code and pre; ``>`` starts a block
    quotation only at the start of a line. Error wording follows TDLib.
    """
    out = _Out()
    stack: list[dict[str, Any]] = []
    entities: list[dict[str, Any]] = []
    quote: dict[str, Any] | None = None
    n = len(markup)
    i = 0

    def at(k: int) -> str:
        return markup[k] if k < n else ""

    def close_quote() -> None:
        # A quotation ends with its last line, newline included; an entity opened inside
        # it must end inside it.
        nonlocal quote
        assert quote is not None
        if len(stack) > quote["depth"]:
            top = stack[-1]
            raise EntityParseError(f"Can't find end of {_MDV2_NAMES[top['kind']]} entity at "
                                   f"byte offset {_byte_offset(markup, top['byte_index'])}")
        if out.u16 > quote["offset"]:
            entities.append({"type": quote["type"], "offset": quote["offset"],
                             "length": out.u16 - quote["offset"]})
        quote = None

    while i < n:
        c = markup[i]
        in_code = bool(stack) and stack[-1]["kind"] in ("code", "pre", "pre_code")
        if not in_code and (i == 0 or markup[i - 1] == "\n"):
            j = i
            while j < n and markup[j] == "\r":
                j += 1
            marker = 3 if markup.startswith("**>", j) else 1 if at(j) == ">" else 0
            if quote is not None and (marker != 1 or j > i):
                close_quote()   # "**>" starts a new quotation
            if marker:
                out.add(markup[i:j])
                if quote is None:
                    quote = {"type": "blockquote", "offset": out.u16, "depth": len(stack)}
                i = j + marker
                continue
        if (quote is not None and markup.startswith("||", i)
                and not (stack and stack[-1]["kind"] == "spoiler")
                and markup[i + 2:].split("\n", 1)[0].strip("\r") == ""):
            # "||" ending the last line of a quotation makes it expandable.
            quote["type"] = "expandable_blockquote"
            i += 2
            continue
        if c == "\\" and i + 1 < n and 0 < ord(markup[i + 1]) <= 126:
            out.add(markup[i + 1])
            i += 2
            continue
        reserved = "`" if in_code else _MDV2_RESERVED
        if c not in reserved:
            out.add(c)
            i += 1
            continue
        kind = stack[-1]["kind"] if stack else None
        is_end = (
            (kind == "bold" and c == "*")
            or (kind == "italic" and c == "_" and at(i + 1) != "_")
            or (kind == "code" and c == "`")
            or (kind in ("pre", "pre_code") and markup.startswith("```", i))
            or (kind in ("text_link", "custom_emoji") and c == "]")
            or (kind == "underline" and markup.startswith("__", i))
            or (kind == "strikethrough" and c == "~")
            or (kind == "spoiler" and markup.startswith("||", i))
        )
        if not is_end:
            begin = i
            argument = ""
            if c == "_":
                if at(i + 1) == "_":
                    new_kind = "underline"
                    i += 1
                else:
                    new_kind = "italic"
            elif c == "*":
                new_kind = "bold"
            elif c == "~":
                new_kind = "strikethrough"
            elif c == "|":
                if at(i + 1) != "|":
                    raise _mdv2_reserved(c)
                new_kind = "spoiler"
                i += 1
            elif c == "[":
                new_kind = "text_link"
            elif c == "`":
                if markup.startswith("```", i):
                    i += 3
                    new_kind = "pre"
                    j = i
                    while j < n and markup[j] not in _SPACES and markup[j] != "`":
                        j += 1
                    if i != j and j < n and markup[j] != "`":
                        new_kind = "pre_code"
                        argument = markup[i:j]
                        i = j
                    if at(i) in ("\n", "\r"):
                        i += 2 if at(i + 1) in ("\n", "\r") and at(i + 1) != at(i) else 1
                    i -= 1
                else:
                    new_kind = "code"
            elif c == "!":
                if at(i + 1) != "[":
                    raise _mdv2_reserved(c)
                new_kind = "custom_emoji"
                i += 1
            else:
                raise _mdv2_reserved(c)
            stack.append({"kind": new_kind, "offset": out.u16, "part": len(out.parts),
                          "byte_index": begin, "argument": argument})
            i += 1
            continue
        opened = stack.pop()
        entity: dict[str, Any] | None = {"type": opened["kind"], "offset": opened["offset"],
                                         "length": out.u16 - opened["offset"]}
        assert entity is not None
        if opened["kind"] in ("underline", "spoiler"):
            i += 1
        elif opened["kind"] in ("pre", "pre_code"):
            i += 2
            entity["type"] = "pre"
            if opened["argument"]:
                entity["language"] = opened["argument"]
        elif opened["kind"] == "text_link":
            if at(i + 1) == "(":
                url, i = _mdv2_url(markup, i + 1)
            else:
                url = "".join(out.parts[opened["part"]:])
            normalized = _normalize_url(url)
            entity = None if normalized is None else {**entity, "url": normalized}
        elif opened["kind"] == "custom_emoji":
            if at(i + 1) != "(":
                raise EntityParseError("The entity must contain a tg://emoji or tg://time URL")
            url, i = _mdv2_url(markup, i + 1)
            entity.update(_tg_emoji_or_time(url))
        if entity is not None and entity["length"] > 0:
            entities.append(entity)
        i += 1
    if quote is not None:
        close_quote()
    if stack:
        top = stack[-1]
        raise EntityParseError(f"Can't find end of {_MDV2_NAMES[top['kind']]} entity at byte "
                               f"offset {_byte_offset(markup, top['byte_index'])}")
    entities.sort(key=lambda e: (e["offset"], -e["length"]))
    return out.text(), entities


def parse_markdown(markup: str) -> tuple[str, list[dict[str, Any]]]:
    """Telegram's legacy Markdown: ``*bold*``, ``_italic_``, ``[text](url)``, ``\\`code\\```,
    pre blocks; no nesting; ``\\`` escapes ``_ * ` [``."""
    out = _Out()
    entities: list[dict[str, Any]] = []
    n = len(markup)
    i = 0
    while i < n:
        c = markup[i]
        if c == "\\" and i + 1 < n and markup[i + 1] in "_*`[":
            out.add(markup[i + 1])
            i += 2
            continue
        if c not in "_*`[":
            out.add(c)
            i += 1
            continue
        begin = i
        end_char = "]" if c == "[" else c
        is_pre = False
        language = ""
        i += 1
        if c == "`" and markup.startswith("``", i):
            is_pre = True
            i += 2
            j = i
            while j < n and markup[j] not in _SPACES and markup[j] != "`":
                j += 1
            if i != j and j < n and markup[j] != "`":
                language = markup[i:j]
                i = j
            if i < n and markup[i] in "\r\n":
                i += 2 if i + 1 < n and markup[i + 1] in "\r\n" and markup[i + 1] != markup[i] \
                    else 1
        offset, first_part = out.u16, len(out.parts)
        while i < n and (markup[i] != end_char
                         or (is_pre and not markup.startswith("``", i + 1))):
            out.add(markup[i])
            i += 1
        if i >= n:
            raise EntityParseError(f"Can't find end of the entity starting at byte offset "
                                   f"{_byte_offset(markup, begin)}")
        length = out.u16 - offset
        if length > 0:
            entity: dict[str, Any] | None = {"offset": offset, "length": length}
            assert entity is not None
            if c == "_":
                entity["type"] = "italic"
            elif c == "*":
                entity["type"] = "bold"
            elif c == "[":
                if i + 1 < n and markup[i + 1] == "(":
                    j = i + 2
                    while j < n and markup[j] != ")":
                        j += 1
                    url = markup[i + 2:j]
                    i = j
                else:
                    url = "".join(out.parts[first_part:])
                normalized = _normalize_url(url)
                entity = None if normalized is None else {**entity, "type": "text_link",
                                                          "url": normalized}
            elif is_pre:
                entity["type"] = "pre"
                if language:
                    entity["language"] = language
            else:
                entity["type"] = "code"
            if entity is not None:
                entities.append(entity)
        if is_pre:
            i += 2
        i += 1
    return out.text(), entities


def parse_entities(text: str, parse_mode: str | None) -> tuple[str, list[dict[str, Any]]]:
    """Visible text and entities of ``text`` under ``parse_mode`` (case-insensitive; empty
    or None: plain text). Raises :class:`EntityParseError` for markup Telegram refuses and
    ValueError for a parse mode it does not know."""
    mode = (parse_mode or "").lower()
    if mode == "":
        return text, []
    if mode == "html":
        return parse_html(text)
    if mode == "markdownv2":
        return parse_markdown_v2(text)
    if mode == "markdown":
        return parse_markdown(text)
    raise ValueError("unsupported parse_mode")


_MENTION = re.compile(r"(?<![\w@/])@([A-Za-z0-9_]{3,32})(?!\w)")
_COMMAND = re.compile(r"(?<![\w/])/[A-Za-z0-9_]{1,64}(?:@[A-Za-z0-9_]{3,32})?(?![\w/])")


def detect_entities(text: str) -> list[dict[str, Any]]:
    """The entities Telegram adds to an incoming text: mentions and bot commands."""
    found: list[tuple[int, int, str]] = []
    for match in _COMMAND.finditer(text):
        found.append((match.start(), match.end(), "bot_command"))
    for match in _MENTION.finditer(text):
        if not any(s <= match.start() < e for s, e, _ in found):
            found.append((match.start(), match.end(), "mention"))
    found.sort()
    return [{"offset": utf16_len(text[:s]), "length": utf16_len(text[s:e]), "type": kind}
            for s, e, kind in found]

