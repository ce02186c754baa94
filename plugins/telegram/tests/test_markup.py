"""Markdown → Telegram HTML: examples, then properties.

The properties use an independent checker built on ``html.parser.HTMLParser``:
only Telegram's tags and attributes, every tag balanced and properly nested,
Telegram's nesting rules, no stray ``<``/``>`` and only the four named entities
Telegram knows.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from chatkernel.channels import escape_html, render
from chatkernel.testing import PATHOLOGICAL_MARKDOWN, markdown_texts, registered_markups
from chatkernel_telegram.channel import TelegramChannel
from chatkernel_telegram.markup import TelegramHTML, to_telegram_html


def to_plain(markdown: str) -> str:
    return render(markdown, "plain")


# --------------------------------------------------------------------------
# Telegram checker
# --------------------------------------------------------------------------

TELEGRAM_TAGS = {"b", "i", "u", "s", "code", "pre", "a", "blockquote", "tg-spoiler"}
INLINE_TAGS = {"b", "i", "u", "s", "a", "code", "tg-spoiler"}
_DISPLAY = MarkdownIt()


class TelegramChecker(HTMLParser):
    """Collects violations of Telegram's HTML rules and the visible text.

    The visible text is the data with entities decoded, plus `` (url)`` after
    each link, so that it can be compared with the plain rendering, which
    shows links as ``text (url)``.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, str]] = []
        self.parts: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = [name for name, _ in attrs]
        open_tags = [t for t, _ in self.stack]
        href = ""
        if tag not in TELEGRAM_TAGS:
            self.errors.append(f"tag <{tag}> outside Telegram's subset")
        if tag == "a":
            if names != ["href"] or not attrs[0][1]:
                self.errors.append(f"<a> needs exactly one href, got {attrs}")
            href = (attrs[0][1] or "") if attrs else ""
        elif tag == "code" and attrs:
            if open_tags[-1:] != ["pre"]:
                self.errors.append("<code class> outside <pre>")
            if names != ["class"] or not re.fullmatch(r"language-[\w+#.\-]+", attrs[0][1] or ""):
                self.errors.append(f"bad <code> attributes {attrs}")
        elif attrs:
            self.errors.append(f"<{tag}> takes no attributes, got {attrs}")
        if any(t in ("code", "pre") for t in open_tags) and not (
            tag == "code" and open_tags[-1:] == ["pre"]
        ):
            self.errors.append(f"<{tag}> inside code/pre")
        if tag == "a" and "a" in open_tags:
            self.errors.append("link inside link")
        if tag == "code" and "a" in open_tags:
            self.errors.append("code inside link")
        if tag == "blockquote" and "blockquote" in open_tags:
            self.errors.append("nested blockquote")
        if tag in ("pre", "blockquote") and INLINE_TAGS & set(open_tags):
            self.errors.append(f"block <{tag}> inside inline {open_tags}")
        self.stack.append((tag, href))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.errors.append(f"self-closing <{tag}/>")

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1][0] != tag:
            self.errors.append(f"</{tag}> does not close {self.stack[-1:] or 'anything'}")
            return
        _, href = self.stack.pop()
        if tag == "a":
            self.parts.append(f" ({_DISPLAY.normalizeLinkText(href)})")

    def handle_data(self, data: str) -> None:
        self.parts.append(data)

    def handle_comment(self, data: str) -> None:
        self.errors.append("comment")

    def handle_decl(self, decl: str) -> None:
        self.errors.append("declaration")

    def handle_pi(self, data: str) -> None:
        self.errors.append("processing instruction")

    def unknown_decl(self, data: str) -> None:
        self.errors.append("unknown declaration")


_TG_TAG_RE = re.compile(
    r'</?(?:b|i|u|s|code|pre|a|blockquote|tg-spoiler)>|<a href="[^"<>]*">|<code class="[^"<>]*">'
)
_TG_ENTITY_RE = re.compile(r"&(?!(?:amp|lt|gt|quot);)")


def check_telegram(out: str) -> str:
    """Assert ``out`` is valid Telegram HTML; return its visible text."""
    checker = TelegramChecker()
    checker.feed(out)
    checker.close()
    assert not checker.errors, (checker.errors, out)
    assert not checker.stack, (f"unclosed {checker.stack}", out)
    rest = _TG_TAG_RE.sub("", out)
    assert "<" not in rest and ">" not in rest, ("stray < or >", out)
    assert not _TG_ENTITY_RE.search(out), ("an & that is not &amp; &lt; &gt; &quot;", out)
    return "".join(checker.parts)


def visible(out: str) -> str:
    return check_telegram(out)


def alnum(text: str) -> str:
    return "".join(ch for ch in text if ch.isalnum())


def is_subsequence(needle: str, haystack: str) -> bool:
    it = iter(haystack)
    return all(ch in it for ch in needle)


# --------------------------------------------------------------------------
# Telegram examples
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("md", "expected"),
    [
        ("**bold** and __bold__", "<b>bold</b> and <b>bold</b>"),
        ("*it* and _it_", "<i>it</i> and <i>it</i>"),
        ("~~gone~~", "<s>gone</s>"),
        ("`a < b && c`", "<code>a &lt; b &amp;&amp; c</code>"),
        ("***both***", "<i><b>both</b></i>"),
        ("**bold _and it_**", "<b>bold <i>and it</i></b>"),
        ("**a **b** c**", "<b>a b c</b>"),  # same style nested once only
        ("[site](https://example.com/a?x=1&y=2)",
         '<a href="https://example.com/a?x=1&amp;y=2">site</a>'),
        ('[q](https://e.com/"x")', '<a href="https://e.com/%22x%22">q</a>'),
        ("<https://example.com>", '<a href="https://example.com">https://example.com</a>'),
        ("[**bold** `code`](https://e.com)", '<a href="https://e.com"><b>bold</b> code</a>'),
        ("[x](javascript:alert(1))", "x"),
        ("[x](JavaScript:alert(1))", "x"),
        ("[x](data:text/html;base64,AAAA)", "x"),
        ("[x](vbscript:msgbox)", "x"),
        ("[docs](/docs/intro)", "docs (/docs/intro)"),
        ("[mail me](mailto:a@b.c)", "mail me (a@b.c)"),
        ("![a cat](https://img.example/cat.png)",
         '<a href="https://img.example/cat.png">a cat</a>'),
        ("![x](data:image/png;base64,AAAA)", "x"),
        ("# Title *here*", "<b>Title <i>here</i></b>"),
        ("## **Bold** heading", "<b>Bold heading</b>"),
        ("Setext\n===", "<b>Setext</b>"),
        ("line one\nline two", "line one\nline two"),
        ("hard  \nbreak", "hard\nbreak"),
        ("para one\n\npara two", "para one\n\npara two"),
        ("- a\n- b\n  - c\n- d", "• a\n• b\n  ◦ c\n• d"),
        ("* a\n\n* b", "• a\n\n• b"),
        ("1. a\n2. b", "1. a\n2. b"),
        ("7. a\n1. b\n1. c", "7. a\n8. b\n9. c"),
        ("- a\n\n  more", "• a\n\n  more"),
        ("> quoted\n> **text**", "<blockquote>quoted\n<b>text</b></blockquote>"),
        ("> outer\n>\n> > inner", "<blockquote>outer\n\ninner</blockquote>"),
        ("- item\n  > quote", "• item\n  <blockquote>quote</blockquote>"),
        ("---", "———"),
        ("a < b & c > d", "a &lt; b &amp; c &gt; d"),
        ("AT&amp;T &lt;3 &copy;", "AT&amp;T &lt;3 ©"),
        ("<script>alert('x')</script>", "&lt;script&gt;alert('x')&lt;/script&gt;"),
        ("<b>no</b> <a href=x>y</a>", "&lt;b&gt;no&lt;/b&gt; &lt;a href=x&gt;y&lt;/a&gt;"),
        ("[x]() [y](#top)", "x y"),
        ("<div>\n*x*\n</div>", "&lt;div&gt;\n<i>x</i>\n&lt;/div&gt;"),
        (r"\*not italic\* \<b\>", "*not italic* &lt;b&gt;"),
        ("||spoiler||", "||spoiler||"),  # not supported: left as text
        ("", ""),
        ("   \n\n ", ""),
    ],
)
def test_telegram_examples(md: str, expected: str) -> None:
    out = to_telegram_html(md)
    assert out == expected
    check_telegram(out)


def test_telegram_fenced_code_with_language() -> None:
    md = "Run:\n\n```python\nif a < b and c & d:\n    print(\"<hi>\")\n```\n\nDone."
    out = to_telegram_html(md)
    assert out == (
        "Run:\n\n"
        '<pre><code class="language-python">if a &lt; b and c &amp; d:\n'
        '    print("&lt;hi&gt;")</code></pre>\n\n'
        "Done."
    )
    check_telegram(out)


def test_telegram_fence_without_language_and_indented_code() -> None:
    assert to_telegram_html("```\n**not bold**\n  x\n```") == "<pre>**not bold**\n  x</pre>"
    assert to_telegram_html("    code  <here>") == "<pre>code  &lt;here&gt;</pre>"


def test_telegram_fence_language_is_sanitised() -> None:
    out = to_telegram_html('```py"><script> extra\nx\n```')
    check_telegram(out)
    assert out == '<pre><code class="language-pyscript">x</code></pre>'
    assert to_telegram_html("```c++\nint x;\n```").startswith('<pre><code class="language-c++">')


def test_telegram_code_inside_list_is_not_reindented() -> None:
    md = "- step:\n\n  ```sh\n  echo hi\n    indented\n  ```\n- next"
    out = to_telegram_html(md)
    check_telegram(out)
    assert '<pre><code class="language-sh">echo hi\n  indented</code></pre>' in out
    assert out.startswith("• step:")


def test_telegram_table_becomes_pre() -> None:
    md = "| Name | Qty |\n|:--|--:|\n| apple & pear | 10 |\n| <b> | 2 |"
    out = to_telegram_html(md)
    check_telegram(out)
    assert out == (
        "<pre>| Name         | Qty |\n"
        "|--------------|-----|\n"
        "| apple &amp; pear |  10 |\n"
        "| &lt;b&gt;          |   2 |</pre>"
    )


def test_telegram_long_mixed_reply_is_valid() -> None:
    md = "\n\n".join(
        [
            "# Report",
            "Some **bold**, *italic*, ~~struck~~ and `inline <code>`.",
            "> A quote with a [link](https://e.com) and **bold**\n> > nested",
            "1. first\n2. second\n   - sub *item*\n3. third",
            "```js\nconst x = a < b && c > d;\n```",
            "| a | b |\n|---|---|\n| 1 | 2 |",
            "---",
            "Bye & thanks <3",
        ]
    )
    check_telegram(to_telegram_html(md))


# --------------------------------------------------------------------------
# render() and the channel
# --------------------------------------------------------------------------


def test_the_channel_renders_with_its_renderer_chosen_by_class_or_name() -> None:
    md = "**hi** <x>"
    assert TelegramChannel.markup is TelegramHTML
    assert render(md, TelegramHTML) == render(md, "telegram_html", registered_markups()) \
        == "<b>hi</b> &lt;x&gt;"


def test_fallback_escapes_when_the_renderer_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: object, markdown: str) -> str:
        raise RuntimeError("bug")

    monkeypatch.setattr(TelegramHTML, "render", boom)
    assert to_telegram_html("**a** <b>") == "**a** &lt;b&gt;"


@pytest.mark.parametrize("md", PATHOLOGICAL_MARKDOWN)
def test_pathological_inputs(md: str) -> None:
    TelegramHTML().render(md)  # no fallback needed: the renderer itself copes
    check_telegram(to_telegram_html(md))


# --------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------

any_text = markdown_texts()

PROPS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@PROPS
@given(any_text)
@example("[a **b](http://x) c**")
@example("**[a](http://x) `c` ![d](http://e)**")
@example("> - a\n>   > b\n> ```\n> c\n")
def test_telegram_output_is_valid_and_keeps_the_text(md: str) -> None:
    out = to_telegram_html(md)
    text = check_telegram(out)
    plain = to_plain(md)
    assert is_subsequence(alnum(plain), alnum(text)), (md, out, plain)


prose = st.text(alphabet="ab Zé09<&\"'\n", max_size=80)


@PROPS
@given(prose)
@example("    0")
def test_plain_prose_passes_through(md: str) -> None:
    assert visible(to_telegram_html(md)).split() == md.split()


@PROPS
@given(st.text(alphabet="ab <&>*_\n", max_size=30), st.sampled_from(["", "py", "c++"]))
def test_fenced_code_is_verbatim(code: str, lang: str) -> None:
    code = code.strip("\n")
    md = f"Intro\n\n````{lang}\n{code}\n````\n\nOutro"
    expected = f"Intro\n\n{code}\n\nOutro" if code else "Intro\n\nOutro"
    assert visible(to_telegram_html(md)) == expected
    assert escape_html(code) in to_telegram_html(md)
