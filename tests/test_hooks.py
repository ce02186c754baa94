"""One test (at least) per hook, named ``test_hook_<name>``.

Each test uses a fresh ``PluginManager`` with the built-in plugins (the ``pm``
fixture) and registers temporary plugins under known names with the
``temp_plugin`` fixture, which unregisters them afterwards.
"""

from __future__ import annotations

import inspect
import tempfile
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatkernel import (
    Account,
    Channel,
    Command,
    InboundMessage,
    OutboundPayload,
    ProbeResult,
    Route,
    SendError,
    SendResult,
    Session,
    Verdict,
    hookimpl,
)
from chatkernel.builtin.heartbeat import DEFAULT_VISIBILITY
from chatkernel.core.turns.agents import Agent, AgentEvent, TurnRequest
from chatkernel.core.plugins import collect_channels
from chatkernel.core.config import AccountConfig
from chatkernel.core.heartbeat.settings import plugin_visibility_defaults, resolve_visibility
from chatkernel.core.outbound.policy import resolve_media_path
from chatkernel.core.plugins import PluginManager
from chatkernel.testing.fuzz import fuzz_examples

# -- helpers -------------------------------------------------------------------------------


class RecordingChannel(Channel):
    """A tiny real channel: records what it is asked to send and probe."""

    name = "recorder"

    def __init__(self, account: Account) -> None:
        super().__init__(account)
        self.sent: list[tuple[Route, OutboundPayload]] = []
        self.probes = 0

    async def send(self, route: Route, payload: OutboundPayload) -> SendResult:
        self.sent.append((route, payload))
        return SendResult(message_id=f"m{len(self.sent)}")

    async def probe(self) -> ProbeResult:
        self.probes += 1
        return ProbeResult(ok=True, detail="recorder ok", latency_ms=1.0)


def make_account(*, allow_from=("42",), require_mention=True, access_level="standard",
                 workspace: Path | None = None, running: bool = False) -> Account:
    config = AccountConfig(allow_from=list(allow_from), require_mention=require_mention,
                           access_level=access_level)
    account = Account(channel_name="recorder", name="main", config=config,
                      access_level=access_level, workspace=workspace or Path.cwd())
    if running:
        account.channel = RecordingChannel(account)
    return account


def make_message(*, sender_id="42", is_group=False, mentions_bot=False, reply_to_bot=False,
                 chat_id="1000", text="hello") -> InboundMessage:
    return InboundMessage(channel="recorder", account="main", chat_id=chat_id,
                          message_id="m-1", sender_id=sender_id, text=text,
                          is_group=is_group, mentions_bot=mentions_bot,
                          reply_to_bot=reply_to_bot)


ROUTE = Route(channel="recorder", account="main", chat_id="1000")


def resolve(value):
    """Await a hook result the way the kernel does: only if it is awaitable."""
    if not inspect.isawaitable(value):
        return value

    async def wait():
        return await value

    return anyio.run(wait)


# -- registration --------------------------------------------------------------------------


def test_hook_register_channels(pm, temp_plugin):
    class Plugin:
        @hookimpl
        def register_channels(self, register):
            register(RecordingChannel)

    assert "recorder" not in collect_channels(pm)
    temp_plugin(pm, Plugin(), "test-channels")
    assert collect_channels(pm)["recorder"] is RecordingChannel


def test_hook_register_markups(pm, temp_plugin):
    from chatkernel.channels import MarkdownRenderer
    from chatkernel.sdk import markup

    class Loud(MarkdownRenderer):
        name = "test_loud"

        def text(self, s: str) -> str:
            return s.upper()

    class NotARenderer:
        name = "test_bogus"

    class Plugin:
        @hookimpl
        def register_markups(self, register):
            register(Loud)

    class Bad:
        @hookimpl
        def register_markups(self, register):
            register(NotARenderer)

    collect_channels(pm)
    assert "test_loud" not in pm.markups
    temp_plugin(pm, Plugin(), "test-markups")
    collect_channels(pm)
    assert markup.renderer_for("test_loud", pm.markups) is Loud
    assert markup.render("**hi**", "test_loud", pm.markups) == "HI"
    temp_plugin(pm, Bad(), "test-bad-markups")
    with pytest.raises(TypeError, match="'test_bogus' is not a chatkernel.MarkdownRenderer"):
        collect_channels(pm)


def test_register_channels_rejects_a_class_that_is_not_a_channel(pm, temp_plugin):
    class NotAChannel:
        name = "bogus"

    class Plugin:
        @hookimpl
        def register_channels(self, register):
            register(NotAChannel)

    temp_plugin(pm, Plugin(), "test-bad-channel")
    with pytest.raises(TypeError, match="'bogus' is not a chatkernel.Channel subclass"):
        collect_channels(pm)


def test_register_channels_needs_a_name(pm, temp_plugin):
    class Nameless(Channel):
        pass

    class Plugin:
        @hookimpl
        def register_channels(self, register):
            register(Nameless)

    temp_plugin(pm, Plugin(), "test-nameless")
    with pytest.raises(TypeError, match="non-empty string name"):
        collect_channels(pm)


def test_register_channels_later_plugin_wins_a_name_clash(pm, temp_plugin):
    class Older(RecordingChannel):
        pass

    class Newer(RecordingChannel):
        pass

    def plugin_for(cls):
        class Plugin:
            @hookimpl
            def register_channels(self, register):
                register(cls)

        return Plugin()

    temp_plugin(pm, plugin_for(Older), "test-older")
    temp_plugin(pm, plugin_for(Newer), "test-newer")
    assert collect_channels(pm)["recorder"] is Newer


def test_hook_register_agents(pm, temp_plugin):
    class ShoutAgent(Agent):
        name = "shout"

        async def turn(self, request):
            yield AgentEvent.reply(request.text.upper())

    class Plugin:
        @hookimpl
        def register_agents(self, register):
            register(ShoutAgent)

    temp_plugin(pm, Plugin(), "test-agents")
    found: dict[str, type] = {}
    pm.hook.register_agents(register=lambda cls: found.setdefault(cls.name, cls))
    assert found["shout"] is ShoutAgent

    async def one_turn():
        agent = found["shout"](config=None, store=None)
        request = TurnRequest(session_key="k", session_id="s", text="hi", envelope="")
        return [event async for event in agent.turn(request)]

    assert anyio.run(one_turn) == [AgentEvent.reply("HI")]


def test_hook_register_commands(pm, temp_plugin):
    def ping(ctx):
        return "pong"

    class First:
        @hookimpl
        def register_commands(self, register):
            register(Command(name="ping", handler=ping, help="Check the bot is alive."))

    class Second:
        @hookimpl
        def register_commands(self, register):
            register(Command(name="roll", handler=lambda ctx: "4", aliases=("dice",),
                             direct_only=True))

    temp_plugin(pm, First(), "test-commands-1")
    temp_plugin(pm, Second(), "test-commands-2")
    table: dict[str, Command] = {}
    pm.hook.register_commands(register=lambda command: table.setdefault(command.name, command))
    assert {"ping", "roll"} <= set(table)
    assert table["ping"].handler(None) == "pong"
    assert table["roll"].aliases == ("dice",) and table["roll"].direct_only


def test_registration_hooks_call_every_plugin_once(pm, temp_plugin):
    calls = []

    def plugin(tag):
        class Plugin:
            @hookimpl
            def register_commands(self, register):
                calls.append(tag)

        return Plugin()

    for tag in ("a", "b", "c"):
        temp_plugin(pm, plugin(tag), f"test-{tag}")
    pm.hook.register_commands(register=lambda command: None)
    assert calls == ["c", "b", "a"]  # newest first, each once


# -- the channels a gateway runs ----------------------------------------------------------


def test_hook_implied_accounts(pm, temp_plugin):
    from chatkernel.core.config import effective_accounts, effective_channels, parse

    # The built-in web chat: its default account with no config, on a local gateway only.
    assert effective_accounts(parse({}), pm) == [("webchat", "default", True, {})]
    beyond = {"gateway": {"listen": "0.0.0.0:8787", "control_token": "t" * 32}}
    assert effective_channels(parse(beyond), pm) == {}

    class Kiosk:
        @hookimpl
        def implied_accounts(self, config):
            return {"kiosk": {"lobby": {"allow_from": ["*"]}}}

    temp_plugin(pm, Kiosk(), "test-kiosk")
    assert effective_accounts(parse({}), pm) == [
        ("webchat", "default", True, {}), ("kiosk", "lobby", True, {"allow_from": ["*"]})]
    # A table without accounts keeps the implied ones and can turn them off; a table
    # with accounts runs exactly those.
    off = effective_accounts(parse({"channels": {"kiosk": {"enabled": False}}}), pm)
    assert ("kiosk", "lobby", False, {"allow_from": ["*"]}) in off
    own = parse({"channels": {"kiosk": {"accounts": {"desk": {}}}}})
    assert effective_channels(own, pm)["kiosk"].accounts == {"desk": {}}


def test_implied_accounts_are_asked_with_a_read_only_view_of_the_config(pm, temp_plugin):
    import dataclasses

    from chatkernel.core.config import effective_channels, parse
    from chatkernel.hookspecs import AccountView, ChannelView, ConfigView

    seen = []

    class Reader:
        @hookimpl
        def implied_accounts(self, config):
            seen.append(config)

    temp_plugin(pm, Reader(), "test-reader")
    effective_channels(parse({"gateway": {"listen": "127.0.0.1:9000"}, "channels": {
        "defaults": {"heartbeat": {"show_ok": True}},
        "webchat": {"enabled": False, "accounts": {"default": {}, "desk": {"enabled": False,
                                                                           "text_limit": 9}}}}}),
        pm)
    [config] = seen
    assert isinstance(config, ConfigView) and config.gateway.listen == "127.0.0.1:9000"
    assert dict(config.channels) == {"webchat": ChannelView(enabled=False, accounts={
        "default": AccountView(enabled=True), "desk": AccountView(enabled=False)})}
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.gateway.listen = "0.0.0.0:80"  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.channels["kiosk"] = ChannelView()  # type: ignore[index]
    with pytest.raises(TypeError):
        config.channels["webchat"].accounts["x"] = AccountView()  # type: ignore[index]


def test_implied_accounts_of_a_later_plugin_win_and_a_malformed_answer_is_named(
        pm, temp_plugin):
    from chatkernel.core.config import effective_channels, parse
    from chatkernel.core.plugins import implied_accounts

    class Rename:
        @hookimpl
        def implied_accounts(self):
            return {"webchat": {"front": {}}}

    temp_plugin(pm, Rename(), "test-rename")
    assert effective_channels(parse({}), pm)["webchat"].accounts == {"front": {}}

    class Broken:
        @hookimpl
        def implied_accounts(self):
            return {"kiosk": ["lobby"]}

    temp_plugin(pm, Broken(), "test-broken")
    with pytest.raises(TypeError, match=r"implied_accounts hook must return .*\['lobby'\]"):
        implied_accounts(pm, parse({}))


# -- inbound -------------------------------------------------------------------------------


def accept(pm, message, account) -> Verdict:
    verdict = pm.hook.inbound_accept(message=message, account=account)
    assert isinstance(verdict, Verdict)
    return verdict


def test_hook_inbound_accept(pm):
    account = make_account(allow_from=["42"])
    account.config.dm_policy = "allowlist"  # the policy that tells a stranger their id
    assert accept(pm, make_message(sender_id="42"), account).allowed

    denied = accept(pm, make_message(sender_id="777"), account)
    assert not denied.allowed
    assert "allowlist" in denied.reason
    # The one short reply names the sender's id and where the owner adds it.
    assert "777" in denied.reply
    assert "channels.recorder.accounts.main.allow_from" in denied.reply


def test_inbound_accept_star_allows_anyone(pm):
    account = make_account(allow_from=["*"])
    assert accept(pm, make_message(sender_id="anybody"), account).allowed


def test_inbound_accept_empty_allowlist_lets_nobody_in(pm):
    account = make_account(allow_from=[])
    assert not accept(pm, make_message(sender_id="42"), account).allowed


@pytest.mark.parametrize(
    ("mentions_bot", "reply_to_bot", "require_mention", "allowed"),
    [
        (False, False, True, False),
        (True, False, True, True),
        (False, True, True, True),
        (False, False, False, True),
    ],
)
def test_inbound_accept_group_mention_rule(pm, mentions_bot, reply_to_bot, require_mention,
                                           allowed):
    account = make_account(allow_from=["42"], require_mention=require_mention)
    message = make_message(sender_id="42", is_group=True, mentions_bot=mentions_bot,
                           reply_to_bot=reply_to_bot)
    verdict = accept(pm, message, account)
    assert verdict.allowed is allowed
    if not allowed:
        assert "mention" in verdict.reason
        assert verdict.reply is None  # groups are not spammed with refusals


def test_inbound_accept_group_allowlisted_by_chat_id(pm):
    account = make_account(allow_from=["chat:-100"])
    message = make_message(sender_id="5", chat_id="-100", is_group=True, mentions_bot=True)
    assert accept(pm, message, account).allowed
    # The chat: form admits group chats only, not a direct chat with that id.
    assert not accept(pm, make_message(sender_id="5", chat_id="-100"), account).allowed


def test_inbound_accept_plugin_verdict_overrides_builtin(pm, temp_plugin):
    class OpenDoor:
        @hookimpl
        def inbound_accept(self, message):
            if message.text == "open sesame":
                return Verdict.allow("password")
            return None

    temp_plugin(pm, OpenDoor(), "test-open-door")
    account = make_account(allow_from=[])
    verdict = accept(pm, make_message(sender_id="777", text="open sesame"), account)
    assert verdict == Verdict.allow("password")
    # None defers to the built-in allowlist.
    assert not accept(pm, make_message(sender_id="777", text="hi"), account).allowed


def test_inbound_accept_plugin_can_deny_an_allowlisted_sender(pm, temp_plugin):
    class Quiet:
        @hookimpl
        def inbound_accept(self, message, account):
            return Verdict.deny("quiet hours", reply="Back at 9.")

    temp_plugin(pm, Quiet(), "test-quiet")
    verdict = accept(pm, make_message(sender_id="42"), make_account(allow_from=["*"]))
    assert verdict == Verdict.deny("quiet hours", reply="Back at 9.")


def test_hook_inbound_delivered(pm, temp_plugin):
    seen: list[tuple[str, str, str]] = []

    def observer(tag):
        class Observer:
            @hookimpl
            def inbound_delivered(self, message, session):
                seen.append((tag, message.text, session.key))
                return "ignored"

        return Observer()

    class AsyncObserver:
        @hookimpl
        async def inbound_delivered(self, session):
            await anyio.sleep(0)
            seen.append(("async", "", session.key))

    temp_plugin(pm, observer("first"), "test-observer-1")
    temp_plugin(pm, observer("second"), "test-observer-2")
    temp_plugin(pm, AsyncObserver(), "test-observer-async")
    key = Session.make_key("recorder", "main", "1000", None)
    session = Session(key=key, channel="recorder", account="main", chat_id="1000")
    results = pm.hook.inbound_delivered(message=make_message(text="hi"), session=session)
    for result in results:  # the kernel awaits awaitable results
        resolve(result)
    assert sorted(seen) == [("async", "", key), ("first", "hi", key), ("second", "hi", key)]


# -- outbound ------------------------------------------------------------------------------


def send(pm, account, payload):
    return resolve(pm.hook.outbound_send(account=account, route=ROUTE, payload=payload))


def test_hook_outbound_send(pm):
    account = make_account(running=True)
    payload = OutboundPayload(text="hello", chunk_index=1, chunk_count=2)
    result = send(pm, account, payload)
    assert result == SendResult(message_id="m1")
    assert account.channel.sent == [(ROUTE, payload)]


def test_outbound_send_wrapper_observes_every_send(pm, temp_plugin):
    observed = []

    class Observer:
        @hookimpl(wrapper=True)
        def outbound_send(self, account, route, payload):
            observed.append(("before", payload.text))
            result = yield
            observed.append(("after", inspect.isawaitable(result)))
            return result

    temp_plugin(pm, Observer(), "test-send-observer")
    account = make_account(running=True)
    assert send(pm, account, OutboundPayload(text="one")).message_id == "m1"
    assert send(pm, account, OutboundPayload(text="two")).message_id == "m2"
    assert [p.text for _, p in account.channel.sent] == ["one", "two"]
    # The channel's send is a coroutine: the wrapper sees the awaitable the
    # kernel will await.
    assert observed == [("before", "one"), ("after", True), ("before", "two"), ("after", True)]


def test_outbound_send_plugin_result_replaces_the_channel(pm, temp_plugin):
    class Sink:
        @hookimpl
        def outbound_send(self, payload):
            return SendResult(message_id="sink", extra={"text": payload.text})

    temp_plugin(pm, Sink(), "test-sink")
    account = make_account(running=True)
    assert send(pm, account, OutboundPayload(text="x")) == SendResult("sink", {"text": "x"})
    assert account.channel.sent == []


def test_outbound_send_failure_is_raised_as_send_error(pm):
    class Failing(RecordingChannel):
        async def send(self, route, payload):
            raise SendError("429 Too Many Requests", retryable=True, retry_after=3, status=429)

    account = make_account()
    account.channel = Failing(account)
    with pytest.raises(SendError) as info:
        send(pm, account, OutboundPayload(text="x"))
    assert info.value.retryable and info.value.retry_after == 3


def test_outbound_send_without_a_running_channel_names_the_account(pm):
    with pytest.raises(RuntimeError, match="recorder:main is not running"):
        send(pm, make_account(running=False), OutboundPayload(text="x"))


# -- media-path policy ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def media_tree(tmp_path_factory):
    """root/ws (the workspace), root/tmp (stands in for the OS temp dir), root/outside.

    The workspace has files, a sub-directory, and links pointing in and out.
    """
    root = tmp_path_factory.mktemp("media").resolve()
    ws, fake_tmp, outside = root / "ws", root / "tmp", root / "outside"
    (ws / "a" / "b").mkdir(parents=True)
    fake_tmp.mkdir()
    outside.mkdir()
    for path in (ws / "file.txt", ws / "a" / "file.txt", ws / "a" / "b" / "file.txt",
                 ws / "key.pem", fake_tmp / "file.txt", outside / "secret.txt",
                 root / "file.txt"):
        path.write_text("x")
    (ws / "link-out").symlink_to(outside, target_is_directory=True)
    (ws / "link-file").symlink_to(outside / "secret.txt")
    (ws / "link-in").symlink_to(ws / "a", target_is_directory=True)
    return {"root": root, "ws": ws, "tmp": fake_tmp, "outside": outside}


@pytest.fixture
def media(media_tree, monkeypatch):
    # The workspace must not be under the OS temp dir for the policy to mean
    # anything here: point the temp dir at root/tmp.
    monkeypatch.setattr(tempfile, "tempdir", str(media_tree["tmp"]))
    return media_tree


def media_verdict(pm, path, workspace, access_level) -> Verdict:
    account = make_account(access_level=access_level, workspace=workspace)
    verdict = pm.hook.media_path_allowed(path=path, workspace=workspace,
                                         access_level=access_level, account=account)
    assert isinstance(verdict, Verdict)
    return verdict


def within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def test_hook_media_path_allowed(pm, media):
    ws = media["ws"]
    secret = media["outside"] / "secret.txt"
    # full: any readable file.
    assert media_verdict(pm, secret, ws, "full").allowed
    # standard and readonly: only the workspace and the temp dir.
    for level in ("standard", "readonly"):
        assert media_verdict(pm, ws / "a" / "file.txt", ws, level).allowed
        assert media_verdict(pm, media["tmp"] / "file.txt", ws, level).allowed
        verdict = media_verdict(pm, secret, ws, level)
        assert not verdict.allowed
        assert "outside the workspace" in verdict.reason and level in verdict.reason


@pytest.mark.parametrize("level", ["readonly", "standard", "full"])
def test_media_path_allowed_denies_what_is_not_a_readable_file(pm, media, level):
    ws = media["ws"]
    assert media_verdict(pm, ws / "missing.txt", ws, level).reason == "no such file"
    assert not media_verdict(pm, ws / "a", ws, level).allowed  # a directory


def test_media_path_symlink_out_of_the_workspace_is_denied(pm, media):
    ws = media["ws"]
    for name in ("link-file", "link-out/secret.txt"):
        resolved = resolve_media_path(name, ws)
        assert resolved == media["outside"] / "secret.txt"
        assert not media_verdict(pm, resolved, ws, "standard").allowed
    # A link that stays inside is fine.
    resolved = resolve_media_path("link-in/file.txt", ws)
    assert resolved == ws / "a" / "file.txt"
    assert media_verdict(pm, resolved, ws, "standard").allowed


@pytest.mark.parametrize("written", [
    "../outside/secret.txt",
    "a/../../outside/secret.txt",
    "a/b/../../../file.txt",
])
def test_media_path_dotdot_escape_is_denied(pm, media, written):
    ws = media["ws"]
    resolved = resolve_media_path(written, ws)
    assert not within(resolved, ws)
    assert not media_verdict(pm, resolved, ws, "standard").allowed


def test_media_path_absolute_and_home_paths_are_resolved(pm, media, monkeypatch):
    ws = media["ws"]
    monkeypatch.setenv("HOME", str(media["outside"]))
    assert resolve_media_path("~/secret.txt", ws) == media["outside"] / "secret.txt"
    assert resolve_media_path(str(ws / "a" / ".." / "file.txt"), ws) == ws / "file.txt"
    assert media_verdict(pm, resolve_media_path("a/../file.txt", ws), ws, "standard").allowed


def test_media_path_allowed_plugin_can_tighten(pm, temp_plugin, media):
    class NoKeys:
        @hookimpl
        def media_path_allowed(self, path):
            if path.suffix in {".pem", ".key"}:
                return Verdict.deny("private keys are never sent")
            return None

    temp_plugin(pm, NoKeys(), "test-no-keys")
    ws = media["ws"]
    verdict = media_verdict(pm, ws / "key.pem", ws, "full")
    assert verdict == Verdict.deny("private keys are never sent")
    assert media_verdict(pm, ws / "file.txt", ws, "standard").allowed  # deferred


SEGMENTS = st.sampled_from(["..", ".", "a", "b", "file.txt", "secret.txt", "outside", "ws",
                            "tmp", "link-out", "link-in", "link-file", "key.pem"])


@pytest.mark.slow
@settings(max_examples=fuzz_examples(100), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(SEGMENTS, min_size=1, max_size=8))
def test_media_path_standard_never_escapes_the_workspace(media_tree, parts):
    pm = PluginManager().load(only=[], disabled=[], strict=True)
    ws, fake_tmp = media_tree["ws"], media_tree["tmp"]
    written = "/".join(parts)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(fake_tmp))
        resolved = resolve_media_path(written, ws)
        verdict = media_verdict(pm, resolved, ws, "standard")
    inside = within(resolved, ws) or within(resolved, fake_tmp)
    if verdict.allowed:
        assert inside, f"{written!r} resolved to {resolved}, outside the workspace"
    else:
        # Denied only for a reason: outside, or not a file.
        assert not inside or not resolved.is_file(), (written, verdict)
    # full ignores the location but never sends what is not a file.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(fake_tmp))
        assert media_verdict(pm, resolved, ws, "full").allowed == resolved.is_file()


# -- heartbeat visibility ------------------------------------------------------------------


def visibility_plugin(result):
    class Plugin:
        @hookimpl
        def heartbeat_visibility(self, channel, account):
            return result(channel, account) if callable(result) else result

    return Plugin()


def test_hook_heartbeat_visibility(pm, temp_plugin):
    # Built-in defaults alone.
    assert plugin_visibility_defaults(pm, "recorder", "main") == DEFAULT_VISIBILITY
    assert DEFAULT_VISIBILITY == {"show_ok": False, "show_alerts": True, "use_indicator": True}
    # A plugin default overrides the built-in, for the channel it names.
    temp_plugin(pm, visibility_plugin(
        lambda channel, account: {"use_indicator": False} if channel == "email" else None),
        "test-email-visibility")
    assert plugin_visibility_defaults(pm, "email", "main") == {
        "show_ok": False, "show_alerts": True, "use_indicator": False}
    assert plugin_visibility_defaults(pm, "recorder", "main") == DEFAULT_VISIBILITY


@pytest.mark.parametrize(("first", "second", "expected"), [(True, False, False),
                                                           (False, True, True)])
def test_heartbeat_visibility_later_registered_plugin_wins(pm, temp_plugin, first, second,
                                                           expected):
    temp_plugin(pm, visibility_plugin({"show_ok": first, "show_alerts": False}), "test-first")
    temp_plugin(pm, visibility_plugin({"show_ok": second}), "test-second")
    merged = plugin_visibility_defaults(pm, "recorder", "main")
    assert merged == {"show_ok": expected, "show_alerts": False, "use_indicator": True}


def test_heartbeat_visibility_ignores_unknown_keys(pm, temp_plugin):
    temp_plugin(pm, visibility_plugin({"show_ok": 1, "colour": "red"}), "test-unknown-keys")
    assert plugin_visibility_defaults(pm, "recorder", "main") == {
        "show_ok": True, "show_alerts": True, "use_indicator": True}


def test_heartbeat_visibility_config_layers_over_plugin_defaults(pm, temp_plugin):
    temp_plugin(pm, visibility_plugin({"show_ok": True, "use_indicator": False}),
                "test-plugin-defaults")
    defaults = plugin_visibility_defaults(pm, "recorder", "main")
    account_layer = {"show_ok": None, "use_indicator": True}  # None falls through
    channel_layer = {"show_ok": False, "show_alerts": None}
    channels_defaults = {"show_alerts": False}
    assert resolve_visibility(defaults, account_layer, channel_layer, channels_defaults) == {
        "show_ok": False,         # channel layer
        "show_alerts": False,     # channels.defaults
        "use_indicator": True,    # account layer, over the plugin's False
    }
    # No config at all: the plugin defaults stand.
    assert resolve_visibility(defaults, None, None) == defaults


def test_heartbeat_visibility_layers_from_config_models(pm):
    from chatkernel.core.config import HeartbeatVisibility

    account = HeartbeatVisibility(show_ok=True).model_dump()
    channel = HeartbeatVisibility(show_ok=False, show_alerts=False).model_dump()
    resolved = resolve_visibility(plugin_visibility_defaults(pm, "recorder", "main"),
                                  account, channel)
    assert resolved == {"show_ok": True, "show_alerts": False, "use_indicator": True}


# -- health --------------------------------------------------------------------------------


def probe(pm, account):
    return resolve(pm.hook.health_probe(account=account))


def test_hook_health_probe(pm):
    account = make_account(running=True)
    assert probe(pm, account) == ProbeResult(ok=True, detail="recorder ok", latency_ms=1.0)
    assert account.channel.probes == 1


def test_health_probe_of_an_account_that_is_not_running_is_none(pm):
    assert probe(pm, make_account(running=False)) is None


def test_health_probe_plugin_can_replace_the_channel_probe(pm, temp_plugin):
    class Maintenance:
        @hookimpl
        async def health_probe(self, account):
            return ProbeResult(ok=False, detail=f"{account.key}: maintenance window")

    temp_plugin(pm, Maintenance(), "test-maintenance")
    account = make_account(running=True)
    assert probe(pm, account) == ProbeResult(ok=False, detail="recorder:main: maintenance window")
    assert account.channel.probes == 0


# -- the gateway's pages -------------------------------------------------------------------


def test_hook_gateway_root_page(pm):
    from chatkernel.core.config import parse
    from chatkernel.core.plugins import config_view

    config = config_view(parse({"channels": {"webchat": {"enabled": False}}}))
    page = pm.hook.gateway_root_page(config=config, channel_types={"webchat": object},
                                     loopback=True)
    assert "The web chat is off" in page
    assert "[channels.webchat] has enabled = false" in page


def test_gateway_root_page_plugin_replaces_the_built_in_page(pm, temp_plugin):
    from chatkernel.core.config import KernelConfig
    from chatkernel.core.plugins import config_view

    class FrontPage:
        @hookimpl
        def gateway_root_page(self, loopback):
            return "<h1>support desk</h1>" if loopback else None

    temp_plugin(pm, FrontPage(), "test-front-page")
    ask = pm.hook.gateway_root_page
    config = config_view(KernelConfig())
    assert ask(config=config, channel_types={}, loopback=True) == "<h1>support desk</h1>"
    # None is no opinion: the built-in page is next.
    assert "The web chat is off" in ask(config=config, channel_types={}, loopback=False)
