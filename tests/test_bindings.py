"""Several agents on one gateway: named agents, bindings choosing among them, sessions
that belong to one agent, and reloads that move a chat to another agent.

End to end through the receiver path: loopback accounts on a real platform on
127.0.0.1, their receive loops delivering to the kernel's receiver."""

from __future__ import annotations

import contextlib
import logging
import sqlite3

import anyio
import pytest

from chatkernel.core import config as cfg
from chatkernel.core.config.schema import Binding
from chatkernel.core.turns.agents import AgentEvent
from chatkernel.core.turns.bindings import Bindings, Chat
from chatkernel.testing import BUSY_HINT
from chatkernel.testing.agents import LabelAgent, agent_plugin, scripted_agent
from chatkernel.testing.contract import wait_until
from chatkernel.testing.loopback import LoopbackPlatform, LoopbackPlugin
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio


def label(name: str) -> dict:
    """An agent of the kit's ``label`` kind: it answers ``<name> (<n> before): <text>``."""
    return {"kind": "label", "system_prompt": name}


# -- the config ----------------------------------------------------------------------------


def test_a_plain_agent_table_is_the_agent_named_default():
    assert list(cfg.parse({}).named_agents()) == ["default"]
    config = cfg.parse({"agent": {"kind": "command", "command": ["llm"]}})
    assert {name: agent.kind for name, agent in config.named_agents().items()} == {
        "default": "command"}
    assert config.default_agent() is config.agent


def test_named_agents_with_and_without_a_default():
    config = cfg.parse({"agents": {"work": label("work")}})
    assert list(config.named_agents()) == ["work"] and config.default_agent() is None
    config = cfg.parse({"agent": label("d"), "agents": {"work": label("work")}})
    assert list(config.named_agents()) == ["default", "work"]
    config = cfg.parse({"agents": {"default": label("d"), "work": label("work")}})
    assert config.default_agent().system_prompt == "d"
    with pytest.raises(cfg.ConfigError, match=r"agents\.default: the default agent is "
                                              r"defined twice, by \[agent\] and by"):
        cfg.parse({"agent": label("d"), "agents": {"default": label("d")}})


def test_an_agent_name_is_checked():
    with pytest.raises(cfg.ConfigError, match=r"agents: 'Work Bot' is not an agent name"):
        cfg.parse({"agents": {"Work Bot": label("w")}})


def test_an_agents_workspace_defaults_under_the_gateways(tmp_path):
    config = cfg.parse({"gateway": {"workspace": str(tmp_path / "ws")},
                        "agents": {"default": label("d"), "work": label("w"),
                                   "mine": {**label("m"), "workspace": str(tmp_path / "m")}}})
    assert config.agent_workspace("default") == tmp_path / "ws"
    assert config.agent_workspace("work") == tmp_path / "ws" / "agents" / "work"
    assert config.agent_workspace("mine") == tmp_path / "m"


@pytest.mark.parametrize(("bindings", "message"), [
    ([{"agent": "work", "channel": "slack"}, {"agent": "wrok"}],
     r"bindings\[1\]\.agent: no agent named 'wrok' \(agents: default, work\) "
     r"\(did you mean 'work'\?\)"),
    ([{"agent": "label", "channel": "slack"}],
     r"bindings\[0\]\.agent: no agent named 'label' .*a binding names an agent, not a kind "
     r"\(agents of kind 'label': default, work\)"),
    ([{"agent": "work", "channel": "slack", "account": "a"}, {"agent": "default"},
      {"agent": "default", "account": "a", "channel": "slack"}],
     r"bindings\[2\]: can never match: bindings\[0\] matches the same chats "
     r"\(channel=slack account=a\) and comes first"),
    ([{"agent": "work", "chat_type": "dm"}],
     r"bindings\[0\]\.chat_type: Input should be 'direct' or 'group'"),
    ([{"agent": "work", "chanel": "slack"}],
     r"bindings\[0\]\.chanel: unknown key \(did you mean 'channel'\?\)"),
])
def test_a_binding_that_cannot_work_is_refused_naming_the_rule(bindings, message):
    with pytest.raises(cfg.ConfigError, match=message) as error:
        cfg.parse({"agent": label("d"), "agents": {"work": label("w")}, "bindings": bindings})
    assert "\n" not in str(error.value)


def test_the_most_specific_rule_wins_ties_by_order_and_default_catches_the_rest():
    rules = [Binding(agent="a", channel="t"),
             Binding(agent="b", channel="t", account="x"),
             Binding(agent="c", channel="t", chat_type="group"),
             Binding(agent="d", channel="t", account="x", chat="42")]
    bindings = Bindings(rules, ["a", "b", "c", "d", "default"])
    assert bindings.match(Chat("t", "y", "1")).agent == "a"
    assert bindings.match(Chat("t", "x", "1")).agent == "b"
    assert bindings.match(Chat("t", "x", "1", is_group=True)).rule == 1  # a tie: order
    assert bindings.match(Chat("t", "y", "1", is_group=True)).agent == "c"
    assert bindings.match(Chat("t", "x", "42", is_group=True)).agent == "d"
    caught = bindings.match(Chat("u", "x", "42"))
    assert (caught.agent, caught.rule) == ("default", None)
    assert Bindings(rules, ["a", "b", "c", "d"]).match(Chat("u", "x", "1")).agent is None
    assert bindings.match(Chat("t", "x", "1")).why(rules) == \
        "bindings[1] (channel=t account=x)"


def check(data: dict) -> object:
    """The start-up checks (what `config validate` runs) on memory accounts."""
    from chatkernel.core.gateway.process import check_startup
    from chatkernel.core.plugins import PluginManager
    from chatkernel.testing.memory import MemoryPlugin

    pm = PluginManager()
    pm.load(only=[], disabled=[], strict=True)
    pm.register(MemoryPlugin, name="memory")
    pm.register(agent_plugin(LabelAgent), name="label")
    pm.check_pending()
    base = {"channels": {"memory": {"accounts": {"main": {}, "other": {}}},
                         "webchat": {"enabled": False}}}
    return check_startup(cfg.parse({**base, **data}), pm=pm)


@pytest.mark.parametrize(("rule", "message"), [
    ({"channel": "slack"}, r"bindings\[0\]\.channel: no channel 'slack' runs on this "
                           r"gateway, so the rule can never match \(channels: memory\)"),
    ({"channel": "memory", "account": "mian"},
     r"bindings\[0\]\.account: no account 'mian' in channel 'memory', so the rule can never "
     r"match \(accounts: main, other\) \(did you mean 'main'\?\)"),
    ({"account": "nope"}, r"bindings\[0\]\.account: no account 'nope' in any channel"),
])
def test_a_binding_to_an_unknown_channel_or_account_is_refused(rule, message):
    with pytest.raises(cfg.ConfigError, match=message):
        check({"agents": {"work": label("w")}, "bindings": [{"agent": "work", **rule}]})


def test_a_binding_may_name_an_account_the_config_switched_off():
    kernel = check({"agents": {"work": label("w")},
                    "channels": {"memory": {"accounts": {"main": {},
                                                         "off": {"enabled": False}}},
                                 "webchat": {"enabled": False}},
                    "bindings": [{"agent": "work", "channel": "memory", "account": "off"}]})
    assert sorted(kernel.accounts) == ["memory:main"]


def test_each_agents_kind_is_checked_naming_its_key():
    with pytest.raises(cfg.ConfigError, match=r"agents\.work\.kind: no agent kind 'lable'"):
        check({"agents": {"work": {"kind": "lable"}}})


def test_without_a_default_the_accounts_left_unanswered_are_named():
    kernel = check({"agents": {"work": label("w"), "home": label("h")},
                    "bindings": [{"agent": "work", "account": "main", "chat_type": "direct"},
                                 {"agent": "home", "account": "main", "chat_type": "group"},
                                 {"agent": "home", "account": "other", "chat": "7"}]})
    assert kernel.unanswered == ["memory:other"]
    assert check({"agents": {"work": label("w")},
                  "bindings": [{"agent": "work", "channel": "memory"}]}).unanswered == []


# -- end to end ------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def gateway(tmp_path, data: dict, agents: tuple = (LabelAgent,)):
    """A kernel with loopback accounts ``main`` and ``alt``, each on a platform of its own
    (``h.platforms``), and the kit's memory account ``memory:main``; the loopback
    accounts' receive loops running."""
    platforms = {"main": LoopbackPlatform(), "alt": LoopbackPlatform()}
    async with contextlib.AsyncExitStack() as stack:
        for platform in platforms.values():
            await stack.enter_async_context(platform)
        async with _kernel(tmp_path, platforms, data, agents) as h:
            h.platforms = platforms
            yield h


@contextlib.asynccontextmanager
async def _kernel(tmp_path, platforms, data, agents):
    accounts = {name: {"base_url": platform.url, "poll_timeout": 0.2}
                for name, platform in platforms.items()}
    config = {"channels": {"memory": {"accounts": {"main": {"allow_from": ["*"]}}},
                           "webchat": {"enabled": False},
                           "loopback": {"accounts": accounts}},
              "queue": {"mode": "followup"}, **data}
    async with KernelHarness(tmp_path, config=config, plugins=[
            ("loopback", LoopbackPlugin), ("agents", agent_plugin(*agents))]) as h:
        scope = anyio.CancelScope()

        async def loops() -> None:
            with scope:
                async with anyio.create_task_group() as tg:
                    for name in ("main", "alt"):
                        transport = h.kernel.accounts[f"loopback:{name}"].transport
                        tg.start_soon(transport.run, h.kernel.receiver)

        h.kernel.task_group.start_soon(loops)
        try:
            yield h
        finally:
            scope.cancel()


async def answered(h, count: int, account: str = "main") -> list[str]:
    """Wait (bounded) for ``count`` sends on ``account``'s platform, then for the kernel to
    settle; the texts sent, ``chat: text``."""
    platform = h.platforms[account]
    await wait_until(lambda: len(platform.sent) >= count, what=f"{count} sends",
                     state=lambda: platform.sent, interval=0.01)
    await h.settle()
    return [f"{m.chat_id}: {m.text}" for m in platform.sent]


THREE_AGENTS = {
    "agent": label("default"),
    "agents": {"work": label("work"), "home": label("home"), "family": label("family")},
    "bindings": [
        {"agent": "work", "channel": "loopback"},  # by channel
        {"agent": "home", "channel": "loopback", "account": "alt"},  # by account
        {"agent": "family", "channel": "loopback", "account": "main", "chat": "fam"},  # chat
        {"agent": "home", "channel": "loopback", "chat_type": "group"},  # a group rule
    ],
}


async def test_three_agents_answer_the_chats_their_bindings_name(tmp_path):
    async with gateway(tmp_path, THREE_AGENTS) as h:
        h.platforms["main"].inject("c1", "one")  # main, direct: by channel
        h.platforms["main"].inject("fam", "two")  # main, the family chat
        h.platforms["main"].inject("g1", "three", is_group=True,
                                   mentions_bot=True)  # the group rule
        assert sorted(await answered(h, 3)) == [
            "c1: work (0 before): one", "fam: family (0 before): two",
            "g1: home (0 before): three"]
        h.platforms["main"].sent.clear()
        h.platforms["alt"].inject("c1", "four")  # alt: by account
        await h.channel.receive("five")  # the memory channel: no rule, the default
        await h.settle()
        assert await answered(h, 1, "alt") == ["c1: home (0 before): four"]
        assert h.channel.texts() == ["default (0 before): five"]
        sessions = {record.key: record.agent for record in await h.kernel.store.list_sessions()}
        assert sessions == {"loopback:main:c1#work": "work",
                            "loopback:main:fam#family": "family",
                            "loopback:main:g1#home": "home", "loopback:alt:c1#home": "home",
                            "memory:main:chat-1": "default"}
        # A proactive send to a chat goes in the session of the agent the chat is bound to.
        assert (await h.kernel.directory.resolve_target("loopback", "main", "fam"))[2] == \
            "loopback:main:fam#family"
        assert (await h.kernel.directory.resolve_target("memory", "main", "x"))[2] == "memory:main:x"


async def test_without_a_default_agent_an_unbound_chat_is_refused_and_said(tmp_path, caplog):
    caplog.set_level(logging.WARNING, "chatkernel")
    data = {"agents": {"work": label("work")},
            "bindings": [{"agent": "work", "channel": "loopback", "account": "main"}]}
    async with gateway(tmp_path, data) as h:
        assert h.kernel.unanswered == ["loopback:alt", "memory:main"]
        h.platforms["alt"].inject("c9", "anyone?")
        h.platforms["main"].inject("c1", "hello")
        assert await answered(h, 1) == ["c1: work (0 before): hello"]
    assert "no default agent: the chats no binding matches go unanswered in loopback:alt, " \
           "memory:main (add [agents.default], or bindings for them)" in caplog.text
    assert "loopback:alt: message m1" in caplog.text
    assert "in chat c9 not answered: no binding matches it and the config has no default " \
           "agent" in caplog.text
    with sqlite3.connect(tmp_path / "state.db") as db:
        statuses = dict(db.execute("SELECT account, status FROM inbound_journal"))
    assert statuses == {"alt": "rejected", "main": "done"}


async def test_a_plain_agent_config_keeps_its_session_keys(tmp_path):
    async with gateway(tmp_path, {"agent": label("solo")}) as h:
        h.platforms["main"].inject("c1", "hi")
        h.platforms["main"].inject("c1", "again")
        assert await answered(h, 2) == ["c1: solo (0 before): hi",
                                                  "c1: solo (1 before): again"]
        records = await h.kernel.store.list_sessions()
    assert [(r.key, r.agent) for r in records] == [("loopback:main:c1", "default")]


async def test_a_store_from_before_agents_keeps_its_conversations(tmp_path):
    """A session written with the old key shape, by a schema without agents, is the
    default agent's: its history goes on."""
    from chatkernel.core.store.sqlite import schema as sqlite_store

    db = sqlite3.connect(tmp_path / "state.db", isolation_level=None)
    before = sqlite_store.MIGRATIONS[:7]  # the schema before sessions had an agent
    for script in before:
        for statement in sqlite_store._statements(script):
            db.execute(statement)
    db.execute(f"PRAGMA user_version = {len(before)}")
    db.execute("INSERT INTO sessions (key, session_id, channel, account, chat_id, thread_id,"
               " created_at, last_active_at, settings) VALUES ('loopback:main:c1', 'old-1',"
               " 'loopback', 'main', 'c1', NULL, 1.0, 1.0, '{}')")
    db.execute("INSERT INTO session_log (session_key, session_id, role, text, ts)"
               " VALUES ('loopback:main:c1', 'old-1', 'user', 'long ago', 1.0)")
    db.close()
    data = {"agent": label("default"), "agents": {"work": label("work")},
            "bindings": [{"agent": "work", "channel": "loopback", "account": "alt"}]}
    async with gateway(tmp_path, data) as h:
        h.platforms["main"].inject("c1", "still there?")
        assert await answered(h, 1) == ["c1: default (1 before): still there?"]
        record = await h.kernel.store.get_session("loopback:main:c1")
    assert (record.session_id, record.agent) == ("old-1", "default")


# -- reloads ----------------------------------------------------------------------------------


def rebound(config: cfg.KernelConfig, bindings: list[dict]) -> cfg.KernelConfig:
    data = config.model_dump(exclude_unset=True)
    return cfg.parse({**data, "bindings": bindings}, strict_env=False)


async def test_a_reload_moves_a_chat_to_its_new_agent_in_a_new_session(tmp_path):
    async with gateway(tmp_path, THREE_AGENTS) as h:
        h.platforms["main"].inject("c1", "one")
        h.platforms["main"].inject("c2", "two")
        await answered(h, 2)
        before = {r.key: r.session_id for r in await h.kernel.store.list_sessions()}
        h.platforms["main"].sent.clear()
        report = await h.kernel.reload(rebound(h.kernel.config, [
            *THREE_AGENTS["bindings"],
            {"agent": "family", "channel": "loopback", "account": "main", "chat": "c1"}]))
        assert report.applied == ["bindings"]
        h.platforms["main"].inject("c1", "three")
        h.platforms["main"].inject("c2", "four")
        assert sorted(await answered(h, 2)) == [
            "c1: family (0 before): three",  # a new conversation with the new agent
            "c2: work (1 before): four"]  # the other chat keeps its session
        after = {r.key: r.session_id for r in await h.kernel.store.list_sessions()}
    assert after["loopback:main:c2#work"] == before["loopback:main:c2#work"]
    assert after["loopback:main:c1#work"] == before["loopback:main:c1#work"]  # kept, idle
    assert "loopback:main:c1#family" in after


async def test_a_turn_in_flight_finishes_with_the_agent_it_started_with(tmp_path):
    held = scripted_agent(gate=True, name="held")
    data = {"agent": {"kind": "held", "system_prompt": "old"}}
    async with gateway(tmp_path, data, agents=(LabelAgent, held)) as h:
        h.platforms["main"].inject("c1", "slow")
        await wait_until(lambda: held.running, what="the held turn", interval=0.01)
        old = h.kernel.agent
        edited = h.kernel.config.model_dump(exclude_unset=True)
        edited["agent"] = label("new")
        report = await h.kernel.reload(cfg.parse(edited, strict_env=False))
        assert report.applied == ["agent.kind", "agent.system_prompt"]
        assert h.kernel.agent is not old and h.kernel.roster.in_use(old)
        held.gate.set()  # the old agent answers the turn it started
        h.platforms["main"].inject("c1", "next")
        assert await answered(h, 2) == ["c1: re: slow", "c1: new (1 before): next"]
        assert not h.kernel.roster.in_use(old)


async def test_an_agents_access_level_and_workspace_judge_its_files(tmp_path, monkeypatch):
    """``work`` (``access_level = "full"``) finds a relative path in its own workspace and
    may send a file outside it; ``[agent]`` (the account's ``standard`` level, the
    gateway's workspace) finds neither."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # tmp_path is in /tmp
    outside = tmp_path / "elsewhere.png"
    outside.write_bytes(b"\x89PNG\r\n\x1a\n")
    media = scripted_agent(name="media", script=lambda request: [
        AgentEvent.reply(f"MEDIA: report.png\nMEDIA: {outside}")])
    data = {"agent": {"kind": "media"},
            "agents": {"work": {"kind": "media", "access_level": "full"}},
            "bindings": [{"agent": "work", "channel": "loopback", "account": "main"}]}
    async with gateway(tmp_path, data, agents=(LabelAgent, media)) as h:
        own = tmp_path / "workspace" / "agents" / "work"
        assert own.is_dir()  # made at start
        (own / "report.png").write_bytes(b"\x89PNG\r\n\x1a\n")
        h.platforms["main"].inject("c1", "send them")
        h.platforms["alt"].inject("c2", "me too")
        await answered(h, 2)
        await answered(h, 2, "alt")
        sent, refused = h.platforms["main"].sent, h.platforms["alt"].sent
    assert [(m.kind, m.filename) for m in sent] == [("image", "report.png"),
                                                          ("image", "elsewhere.png")]
    assert [m.text for m in refused] == [
        "⚠️ upload failed: report.png — no such file",
        "⚠️ upload failed: elsewhere.png — outside the workspace (access level 'standard' "
        "may only send files under the workspace or the temp dir)"]


async def test_an_agents_send_policy_replaces_the_gateways_for_its_sessions(tmp_path):
    data = {**THREE_AGENTS, "send_policy": {"default": "deny"},
            "agents": {**THREE_AGENTS["agents"],
                       "family": {**label("family"), "send_policy": {"default": "allow"}}}}
    async with gateway(tmp_path, data) as h:
        h.platforms["main"].inject("c1", "work is denied")
        h.platforms["main"].inject("fam", "family may")
        assert await answered(h, 1) == ["fam: family (0 before): family may"]


def test_every_agents_secrets_are_known_to_the_redactor():
    config = cfg.parse({"agents": {"work": {"kind": "openai", "api_key_env": "WORK_KEY",
                                            "env": {"API_TOKEN": "tok-123"}}}})
    found = cfg.kernel_secrets(config, environ={"WORK_KEY": "sk-work-1"})
    assert "sk-work-1" in found and "tok-123" in found


async def test_status_in_a_chat_names_its_agent_and_the_access_level_it_has(tmp_path):
    config = {"agent": label("default"),
              "agents": {"work": {**label("work"), "access_level": "full"}},
              "bindings": [{"agent": "work", "channel": "memory", "chat": "w"}],
              "channels": {"memory": {"accounts": {"main": {"allow_from": ["*"]}}},
                           "webchat": {"enabled": False}}}
    async with KernelHarness(tmp_path, config=config,
                             plugins=[("agents", agent_plugin(LabelAgent))]) as h:
        await h.channel.receive("/status", chat_id="w")
        await h.channel.receive("/status", chat_id="d")
        await h.settle()
        bound, default = h.channel.texts("w")[0], h.channel.texts("d")[0]
    assert "; agent: work (label)" in bound and "access level: full" in bound
    assert "; agent: label\n" in default and "access level: standard" in default


def test_a_kinds_check_names_the_named_agents_own_key():
    with pytest.raises(cfg.ConfigError) as error:
        check({"agents": {"work": {"kind": "command"}}})
    assert error.value.key == "agents.work.command"
    assert "runs agents.work.command, which is not set" in error.value.message


async def test_a_reply_queued_before_a_restart_is_judged_by_its_agents_send_policy(tmp_path):
    """The outbox sends what a restart left pending: its session, read from the store,
    says which agent's policy applies (here, one that denies)."""
    from chatkernel.core.store.base import OutboxEntry, SessionRecord
    from chatkernel.core.store.sqlite import SQLiteStore
    from chatkernel.sdk.models import OutboundPayload, Route

    key = "memory:main:c1#work"
    async with SQLiteStore.at(tmp_path / "state.db") as store:
        await store.save_session(SessionRecord(
            key=key, session_id="s1", channel="memory", account="main", chat_id="c1",
            thread_id=None, created_at=1.0, last_active_at=1.0, agent="work"))
        await store.outbox_add([OutboxEntry(
            id=0, reply_id="r1", session_key=key, session_id="s1", channel="memory",
            account="main", route=Route("memory", "main", "c1"),
            payload=OutboundPayload(text="queued before"), status="pending", error=None,
            created_at=0.0)])
    config = {"agent": label("default"),
              "agents": {"work": {**label("work"), "send_policy": {"default": "deny"}}},
              "bindings": [{"agent": "work", "channel": "memory", "chat": "c1"}]}
    async with KernelHarness(tmp_path, config=config,
                             plugins=[("agents", agent_plugin(LabelAgent))]) as h:
        await h.settle()
        assert h.channel.texts() == []
        assert await h.outbox_statuses() == ["failed"]
        [note] = [e.text for e in await h.kernel.store.read_log(key)]
    assert note.endswith("blocked by the send policy (agents.work.send_policy.default)")


async def test_a_reload_whose_agent_cannot_be_made_changes_nothing(tmp_path):
    from chatkernel.core.turns.agents import Agent

    class Broken(Agent):
        name = "broken"

        def __init__(self, config, store):
            raise RuntimeError("no model file")

    data = {"agent": label("default"), "agents": {"work": label("work")},
            "bindings": [{"agent": "work", "channel": "memory", "chat": "w"}]}
    async with KernelHarness(tmp_path, config=data, plugins=[
            ("agents", agent_plugin(LabelAgent, Broken))]) as h:
        edited = h.kernel.config.model_dump(exclude_unset=True)
        edited["agents"]["work"] = {"kind": "broken"}
        edited["bindings"] = []
        with pytest.raises(cfg.ConfigError, match=r"agents\.work\.kind: the broken agent "
                                                  r"'work' cannot be made: RuntimeError: "
                                                  r"no model file"):
            await h.kernel.reload(cfg.parse(edited, strict_env=False))
        await h.channel.receive("still work?", chat_id="w")
        await h.settle()
        assert h.channel.texts("w") == ["work (0 before): still work?"]
        assert h.kernel.config.bindings  # the running config stays


async def test_messages_queued_for_an_agent_a_reload_removed_are_said_not_answered(
        tmp_path, caplog):
    caplog.set_level(logging.WARNING, "chatkernel.kernel")
    held = scripted_agent(gate=True, name="held")
    data = {"agent": label("default"), "agents": {"work": {"kind": "held"}},
            "bindings": [{"agent": "work", "channel": "loopback", "account": "main"}]}
    async with gateway(tmp_path, data, agents=(LabelAgent, held)) as h:
        h.platforms["main"].inject("c1", "first")
        await wait_until(lambda: held.running, what="the held turn", interval=0.01)
        h.platforms["main"].inject("c1", "second")  # waits behind the running turn
        await wait_until(lambda: h.kernel.queue.lane("loopback:main:c1#work").pending,
                         what="the second message queued", interval=0.01)
        edited = h.kernel.config.model_dump(exclude_unset=True)
        del edited["agents"]
        edited["bindings"] = []
        await h.kernel.reload(cfg.parse(edited, strict_env=False))
        held.gate.set()
        assert await answered(h, 2) == [f"c1: {BUSY_HINT}", "c1: re: first"]
        h.platforms["main"].inject("c1", "third")  # the default agent's now
        assert (await answered(h, 3))[2] == "c1: default (0 before): third"
        assert h.metric("chatkernel_queue_dropped_total", reason="agent removed") == 1
    assert "session loopback:main:c1#work: 1 message(s) not answered: the config has no " \
           "agent 'work' any more" in caplog.text


def test_the_worked_example_of_the_docs_routes_as_its_table_says():
    import re
    import tomllib
    from pathlib import Path

    page = (Path(__file__).parents[1] / "docs" / "agents.md").read_text()
    example = re.search(r"```toml\n(.*?)```", page, re.S)[1]
    config = cfg.parse(tomllib.loads(example), strict_env=False)
    bindings = Bindings.from_config(config)
    cases = {Chat("slack", "main", "C01"): ("work", 0),
             Chat("slack", "main", "D01"): ("work", 0),
             Chat("telegram", "family", "42"): ("family", 1),
             Chat("telegram", "main", "-100555", is_group=True): ("family", 2),
             Chat("telegram", "main", "123456789"): ("work", 3),
             Chat("telegram", "main", "555"): ("default", None),
             Chat("webchat", "default", "4f2a"): ("default", None)}
    for chat, (agent, rule) in cases.items():
        match = bindings.match(chat)
        assert (match.agent, match.rule) == (agent, rule), chat
