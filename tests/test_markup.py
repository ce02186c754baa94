"""Markdown → the kernel's generic markups: examples per target, then properties.

The renderer engine, the registry of renderers by name, and the generic plain target.
Telegram's HTML, Slack's mrkdwn and WhatsApp's renderers are tested in their plugins.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from chatkernel.sdk.markup import (
    KIT_MARKUPS,
    MarkdownRenderer,
    PlainText,
    render,
    render_payload,
    renderer_for,
    to_plain,
)
from chatkernel.testing import PATHOLOGICAL_MARKDOWN, markdown_texts

RENDERERS = (PlainText,)


def alnum(text: str) -> str:
    return "".join(ch for ch in text if ch.isalnum())


# --------------------------------------------------------------------------
# Plain examples
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("md", "expected"),
    [
        ("**bold** *it* ~~gone~~ `code`", "bold it gone code"),
        ("[site](https://example.com)", "site (https://example.com)"),
        ("[x](javascript:alert(1))", "x"),
        ("# Title\n\ntext", "Title\n\ntext"),
        ("- a\n- b", "• a\n• b"),
        ("> a\n> > b", "> a\n>\n> > b"),
        ("```\n**raw** <b>\n```", "**raw** <b>"),
        ("a < b & c", "a < b & c"),
        ("| a | b |\n|---|---|\n| 1 | 2 |", "| a   | b   |\n|-----|-----|\n| 1   | 2   |"),
    ],
)
def test_plain_examples(md: str, expected: str) -> None:
    assert to_plain(md) == expected


# --------------------------------------------------------------------------
# render()
# --------------------------------------------------------------------------


def test_render_dispatches() -> None:
    md = "**hi** <x>"
    assert render(md, "plain") == render(md, PlainText) == to_plain(md) == "hi <x>"
    assert KIT_MARKUPS["plain"] is PlainText


@pytest.mark.parametrize("name", ["html", "markdown", "", "Plain", None, 3])
def test_render_rejects_unknown_markup(name: object) -> None:
    with pytest.raises(ValueError, match="unknown markup"):
        render("x", name)  # type: ignore[arg-type]


def _shouty(name: str, shout: "Callable[[str], str]") -> type[MarkdownRenderer]:
    return type(f"Shouty_{shout.__name__}", (MarkdownRenderer,),
                {"name": name, "text": lambda self, s: shout(s)})


def _markup_plugin(*renderers: type[MarkdownRenderer], channel: type | None = None) -> object:
    from chatkernel.hookspecs import hookimpl

    class Plugin:
        @staticmethod
        @hookimpl
        def register_markups(register):
            for renderer in renderers:
                register(renderer)

        @staticmethod
        @hookimpl
        def register_channels(register):
            if channel is not None:
                register(channel)

    return Plugin()


def test_a_plugin_renderer_is_registered_by_its_hook_and_used_by_its_channel() -> None:
    from chatkernel.core.plugins import PluginManager, collect_channels
    from chatkernel.sdk.channel import Channel
    from chatkernel.sdk.context import ChannelContext
    from chatkernel.sdk.models import Account, OutboundPayload

    Shouty = _shouty("test_shouty", str.upper)

    class ShoutyChannel(Channel):
        name = "shouty"
        markup = "test_shouty"

    pm = PluginManager()
    pm.register(_markup_plugin(Shouty, channel=ShoutyChannel), name="shouty")
    with pytest.raises(ValueError, match="unknown markup 'test_shouty'"):
        render("x", "test_shouty")  # defining the class registers nothing
    assert collect_channels(pm) == {"shouty": ShoutyChannel}
    assert pm.markups == {"test_shouty": Shouty}
    assert renderer_for("test_shouty", pm.markups) is Shouty
    assert render("**hi** there", "test_shouty", pm.markups) == "HI THERE"
    account = Account(channel_name="shouty", name="main", config=None)
    channel = ShoutyChannel(account, ChannelContext(account, markups=pm.markups))
    assert channel.markup is Shouty and ShoutyChannel.markup == "test_shouty"
    assert render_payload(OutboundPayload(text="_a_ b"), channel.markup) == ("A B", "test_shouty")
    assert render_payload(OutboundPayload(text="_a_", format="plain"), channel.markup) \
        == ("_a_", None)


def test_two_plugin_managers_in_one_process_each_see_their_own_renderer() -> None:
    """Two kernels in one process (as tests make them) never see each other's renderers,
    even under the same name, whichever registered first."""
    from chatkernel.core.plugins import PluginManager, collect_channels

    loud, quiet = _shouty("test_voice", str.upper), _shouty("test_voice", str.lower)
    first, second, bare = PluginManager(), PluginManager(), PluginManager()
    first.register(_markup_plugin(loud), name="loud")
    second.register(_markup_plugin(quiet), name="quiet")
    for pm in (first, second, bare):
        collect_channels(pm)
    assert render("**Hi** There", "test_voice", first.markups) == "HI THERE"
    assert render("**Hi** There", "test_voice", second.markups) == "hi there"
    assert "test_voice" not in bare.markups
    with pytest.raises(ValueError, match="unknown markup 'test_voice'"):
        render("Hi There", "test_voice", bare.markups)


def test_a_plugin_cannot_take_the_kits_own_name() -> None:
    other = _shouty("plain", str.upper)
    assert renderer_for("plain", {"plain": other}) is PlainText


def test_fallback_escapes_when_a_renderer_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: object, markdown: str) -> str:
        raise RuntimeError("bug")

    monkeypatch.setattr(MarkdownRenderer, "render", boom)
    assert to_plain("**a**") == "**a**"


@pytest.mark.parametrize("md", PATHOLOGICAL_MARKDOWN)
def test_pathological_inputs(md: str) -> None:
    for renderer in RENDERERS:  # no fallback needed: the renderers themselves cope
        renderer().render(md)


# --------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------

any_text = markdown_texts()

PROPS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.slow
@PROPS
@given(any_text)
def test_renderers_never_raise(md: str) -> None:
    for renderer in RENDERERS:
        assert isinstance(renderer().render(md), str)
    for markup_name, renderer in _every_renderer().items():
        assert isinstance(render(md, renderer), str), markup_name


# Text with nothing Markdown gives meaning to: every target shows it as is
# (up to whitespace), escaped where the target escapes.
prose = st.text(alphabet="ab Zé09<&\"'\n", max_size=80)


@PROPS
@given(prose)
@example("    0")
def test_plain_prose_passes_through(md: str) -> None:
    words = md.split()
    assert to_plain(md).split() == words


@PROPS
@given(st.text(alphabet="ab <&>*_\n", max_size=30), st.sampled_from(["", "py", "c++"]))
def test_fenced_code_is_verbatim(code: str, lang: str) -> None:
    code = code.strip("\n")
    md = f"Intro\n\n````{lang}\n{code}\n````\n\nOutro"
    expected = f"Intro\n\n{code}\n\nOutro" if code else "Intro\n\nOutro"
    assert to_plain(md) == expected


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab Z9.,;?'\"\n\t\r*_`#-+1!|~<>&=:/()[]éπ😀 \u00a0")),
               max_size=60))
def test_plain_fast_path_is_what_every_renderer_would_give(text):
    """render() skips the parser for plain text: only when the parser agrees."""
    from chatkernel.sdk.markup import is_plain

    if not is_plain(text):
        return
    for name, renderer in _every_renderer().items():
        assert renderer.convert(text) == text, name


def _every_renderer() -> dict[str, type[MarkdownRenderer]]:
    """The kernel's renderers and those of every installed channel plugin."""
    from chatkernel.core.plugins import collect_channels
    from chatkernel.core.plugins import get_plugin_manager

    pm = get_plugin_manager()
    channels = collect_channels(pm)  # and the plugins' register_markups
    found = {**pm.markups, **KIT_MARKUPS}
    for channel in channels.values():
        if channel.markup:
            renderer = renderer_for(channel.markup, pm.markups)
            found[renderer.name] = renderer
    return found


def test_every_installed_channels_renderer_is_checked_by_the_fast_path_property():
    assert {"telegram_html", "plain", "slack_mrkdwn", "whatsapp"} <= set(_every_renderer())


def test_plain_fast_path_examples():
    from chatkernel.sdk.markup import is_plain

    assert is_plain("chat 3 msg 17") and is_plain("Sure, I can do that. Anything else?")
    for text in ("**b**", "1. item", "a\n\nb", "see http://x", "a < b", " lead", "x_y"):
        assert not is_plain(text), text


@pytest.mark.anyio
async def test_two_kernels_in_one_process_each_give_their_channel_their_own_renderer(tmp_path):
    from chatkernel.hookspecs import hookimpl
    from chatkernel.sdk.models import OutboundPayload
    from chatkernel.testing.memory import KernelHarness, MemoryChannel

    class VoiceChannel(MemoryChannel):
        markup = "test_voice"

    def voice(renderer: type[MarkdownRenderer]) -> object:
        class Plugin:
            @staticmethod
            @hookimpl
            def register_markups(register):
                register(renderer)

            @staticmethod
            @hookimpl
            def register_channels(register):
                register(VoiceChannel)  # the memory channel, with a named markup

        return Plugin()

    loud, quiet = _shouty("test_voice", str.upper), _shouty("test_voice", str.lower)
    async with KernelHarness(tmp_path / "a", plugins=[("loud", voice(loud))]) as first, \
            KernelHarness(tmp_path / "b", plugins=[("quiet", voice(quiet))]) as second:
        assert first.channel.markup is loud and second.channel.markup is quiet
        payload = OutboundPayload(text="**Hi** There")
        assert render_payload(payload, first.channel.markup) == ("HI THERE", "test_voice")
        assert render_payload(payload, second.channel.markup) == ("hi there", "test_voice")
    assert VoiceChannel.markup == "test_voice"  # the class is the same in both
