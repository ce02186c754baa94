"""Hypothesis strategies for a renderer's property tests: text shaped like what agents write.

Plain text alone rarely hits a renderer's edge cases; these draw runs of Markdown
syntax (emphasis markers, fences, links, entities, tables, raw HTML, dangerous
schemes) mixed with short random text. The kernel's renderers and Telegram's are
tested with them; a plugin's renderer should be too::

    from hypothesis import given
    from chatkernel.testing import markdown_texts

    @given(markdown_texts())
    def test_my_renderer_never_raises(md):
        assert isinstance(MyMarkup().render(md), str)
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

__all__ = ["FRAGMENTS", "PATHOLOGICAL_MARKDOWN", "markdown_texts"]

#: Pieces of Markdown (and of what breaks naive renderers) the strategy joins.
FRAGMENTS = [
    "*", "**", "_", "__", "~~", "~", "`", "```", "```py\n", "\n```\n", "[", "]", "(", ")",
    "](", "![", "<", ">", "> ", "&", "&amp;", "&#65;", "&lt;", "#", "# ", "- ", "* ", "+ ",
    "1. ", "2) ", "|", "| a | b |\n|---|---|\n", "---\n", "===", "\n", "\n\n", "  \n",
    "    ", "\\", "\\*", '"', "'", "http://x.y/é", "https://e.com/?a=1&b=<2>", "mailto:a@b",
    "javascript:alert(1)", "data:x", "<http://a.b>", "<a@b.c>", "<b>", "</b>",
    "<script>", "||", "a", "word", "日本", "é", "\t", "\r\n", "[x]: http://ref.example\n",
    "[x]", " ",
]


def markdown_texts(max_size: int = 200) -> st.SearchStrategy[str]:
    """Any text, or up to 40 fragments of Markdown syntax and short random text joined."""
    markdownish = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4),
                           max_size=40).map("".join)
    return st.text(max_size=max_size) | markdownish


#: Inputs that break renderers built naively: deep nesting, runs of markers, a lone
#: surrogate. A renderer must render each (``renderer().render(md)``) without raising.
PATHOLOGICAL_MARKDOWN: tuple[str, ...] = (
    "\x00\ud800 lone surrogate",
    "[" * 500 + "x" + "](http://a)" * 500,
    "![" * 300 + "x" + "](http://a)" * 300,
    ">" * 300 + " deep",
    "- " * 300 + "deep",
    "*" * 3000,
    "`" * 3000,
    "1. " * 200,
    "|a|\n|-|\n" + "|x|\n" * 100,
)


def registered_markups() -> dict[str, Any]:
    """The renderers a channel may name, by name, once every installed plugin's
    ``register_markups`` has run (as the kernel runs it when it collects channels)."""
    from chatkernel.core.plugins import collect_channels, get_plugin_manager
    from chatkernel.sdk.markup import KIT_MARKUPS

    pm = get_plugin_manager()
    collect_channels(pm)
    return {**pm.markups, **KIT_MARKUPS}
