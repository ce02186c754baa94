"""`chatkernel reload` and SIGHUP: the running gateway takes an edited config without a
restart (a real `chatkernel run` against the fake Telegram Bot API)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

import anyio
import pytest

from chatkernel.testing.contract import wait_until
from chatkernel.testing.process import CHATKERNEL, running_gateway_process

pytestmark = pytest.mark.anyio

FRIEND, STRANGER = 111, 222
SECOND_TOKEN = "654321:second-bot-token-abcdefghijklmnop"


def run(home, *args, timeout=60):
    env = {**os.environ, "CHATKERNEL_HOME": str(home)}
    env.pop("CHATKERNEL_CONFIG", None)
    return subprocess.run([CHATKERNEL, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


async def cli(home, *args):
    """The CLI in a thread: the fake Bot API answers from this event loop meanwhile."""
    return await anyio.to_thread.run_sync(lambda: run(home, *args))


def account(name, token, api, allow_from, poll_timeout=1):
    return f"""
[channels.telegram.accounts.{name}]
bot_token = "{token}"
api_base = "{api.base_url}"
allow_from = {json.dumps([str(user) for user in allow_from])}
dm_policy = "allowlist"   # a stranger is told their id ("not allowed"), no pairing code
poll_timeout = {poll_timeout}
"""


def write_config(home, api, accounts, extra=""):
    (home / "config.toml").write_text(f"""
[queue]
debounce_ms = 0
mode = "followup"
{extra}

[channels.telegram.rate_limits]  # the fake has no limits: no waiting in the tests
chat = "1000/s"
account = "1000/s"
{accounts}""")


@pytest.fixture
async def bot_api():
    from chatkernel_telegram.fake import FakeBotAPI

    async with FakeBotAPI() as api:
        api.add_bot(SECOND_TOKEN, "second_bot")
        yield api


@pytest.fixture
def home(tmp_path, bot_api):
    home = tmp_path / "home"
    home.mkdir()
    write_config(home, bot_api, account("main", bot_api.token, bot_api, [FRIEND]))
    return home


async def answered(api, chat_id, want, token=None, timeout=15.0):
    """The texts sent to ``chat_id`` once there are ``want`` of them (or what there is)."""
    with contextlib.suppress(TimeoutError):
        await api.wait_until(lambda: len(api.texts(chat_id, token)) >= want, timeout)
    return api.texts(chat_id, token)


def polls_with(api, token):
    """The getUpdates calls the fake Bot API was sent with ``token``."""
    return [call for call in api.calls_to("getUpdates") if call.token == token]


def gateway_pid(home):
    return json.loads((home / "gateway.json").read_text())["pid"]


@pytest.mark.slow
async def test_an_added_user_is_answered_after_reload_without_a_restart(home, bot_api):
    async with running_gateway_process(home) as process:
        bot_api.inject_message(STRANGER, "hello?")
        refusal = await answered(bot_api, STRANGER, 1)
        assert "not allowed" in refusal[0]
        write_config(home, bot_api, account("main", bot_api.token, bot_api,
                                            [FRIEND, STRANGER]))
        result = await cli(home, "reload")
        assert result.returncode == 0, result.stderr
        assert "applied: channels.telegram.accounts.main.allow_from" in result.stdout
        assert "needs a restart" not in result.stdout
        bot_api.inject_message(STRANGER, "now?")
        assert (await answered(bot_api, STRANGER, 2))[1] == "now?"
        assert gateway_pid(home) == process.process.pid
        assert process.process.poll() is None


@pytest.mark.slow
async def test_messages_flowing_across_reloads_are_answered_once_each(home, bot_api):
    write_config(home, bot_api, account("main", bot_api.token, bot_api, [FRIEND]))
    async with running_gateway_process(home):
        sent: list[str] = []

        reloaded = anyio.Event()

        def waiting() -> int:  # sent, not answered yet
            return len(sent) - len(bot_api.texts(FRIEND))

        async def write():  # until the last reload is over, and a little after
            while not reloaded.is_set() or len(sent) % 50:
                # A slow machine slows the flow, rather than piling up messages to answer.
                await bot_api.wait_until(lambda: waiting() < 20, 30)
                text = f"message {len(sent)}"
                bot_api.inject_message(FRIEND, text)
                sent.append(text)
                await anyio.sleep(0.01)  # real time: a steady flow while a real process reloads

        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            # Each time a queue change, an allowlist change and, every other time, a
            # connection setting: that restarts the receive loop in mid-flow. The queue
            # cap changes far above any backlog: a slow machine lets a few dozen messages
            # wait behind a turn, and a cap they reach drops the oldest (drop = "old"),
            # which is the cap working, not a reload losing them.
            for number in range(4):
                write_config(home, bot_api, account("main", bot_api.token, bot_api,
                                                    [FRIEND, number], (1, 2, 2, 1)[number]),
                             extra=f"cap = {10_000 + number}")
                result = await cli(home, "reload", "--json")
                assert result.returncode == 0, result.stderr
                report = json.loads(result.stdout)
                assert "queue.cap" in report["applied"]
                assert report["restarted"] == (["telegram:main"] if number % 2 else [])
                assert report["restart_needed"] == []
            reloaded.set()
        texts = await answered(bot_api, FRIEND, len(sent))
        assert sorted(texts) == sorted(sent)  # every message answered, none twice
        assert len(texts) == len(set(texts)) >= 50


@pytest.mark.slow
async def test_sighup_reloads_the_running_gateway(home, bot_api):
    async with running_gateway_process(home) as process:
        bot_api.inject_message(FRIEND, "up?")
        assert await answered(bot_api, FRIEND, 1) == ["up?"]  # serving: SIGHUP is handled
        bot_api.inject_message(STRANGER, "hello?")
        assert "not allowed" in (await answered(bot_api, STRANGER, 1))[0]
        write_config(home, bot_api, account("main", bot_api.token, bot_api,
                                            [FRIEND, STRANGER]))
        process.process.send_signal(signal.SIGHUP)
        with anyio.fail_after(15):
            while not any("config reloaded" in line for line in process.lines):
                line = await anyio.to_thread.run_sync(process.process.stderr.readline)
                process.lines.append(line)
        logged = next(line for line in process.lines if "config reloaded" in line)
        assert "channels.telegram.accounts.main.allow_from" in logged
        bot_api.inject_message(STRANGER, "now?")
        assert (await answered(bot_api, STRANGER, 2))[1] == "now?"
        assert process.process.poll() is None
        assert gateway_pid(home) == process.process.pid


@pytest.mark.slow
async def test_accounts_added_and_removed_by_a_reload(home, bot_api):
    async with running_gateway_process(home):
        both = (account("main", bot_api.token, bot_api, [FRIEND])
                + account("second", SECOND_TOKEN, bot_api, [FRIEND]))
        write_config(home, bot_api, both)
        result = await cli(home, "reload", "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["added"] == ["telegram:second"]
        bot_api.inject_message(FRIEND, "to the second bot", token=SECOND_TOKEN)
        assert await answered(bot_api, FRIEND, 1, SECOND_TOKEN) == ["to the second bot"]

        write_config(home, bot_api, account("second", SECOND_TOKEN, bot_api, [FRIEND]))
        result = await cli(home, "reload", "--json")
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert report["removed"] == ["telegram:main"] and report["pending"] == []
        status = json.loads((await cli(home, "status", "--json")).stdout)
        assert list(status["channels"]["telegram"]["accounts"]) == ["second"]
        # The reload waited for the removed account's receive loop to end (nothing is
        # pending): no poll comes with its token from now on.
        polls = len(polls_with(bot_api, bot_api.token))
        bot_api.inject_message(FRIEND, "to the removed bot")
        bot_api.inject_message(FRIEND, "second still there", token=SECOND_TOKEN)
        assert (await answered(bot_api, FRIEND, 2, SECOND_TOKEN))[1] == "second still there"
        # The second bot's poll took its message after both were there: a receive loop
        # of the removed account, polling or held in a poll the inject woke, would have
        # taken its message as well. Nobody did.
        assert len(polls_with(bot_api, bot_api.token)) == polls
        assert bot_api.texts(FRIEND, bot_api.token) == []
        assert [u["message"]["text"] for u in bot_api.pending_updates(bot_api.token)] == [
            "to the removed bot"]  # still on the platform: the next start gets it


@pytest.mark.slow
async def test_a_new_token_restarts_the_account_on_it(home, bot_api):
    async with running_gateway_process(home) as process:
        write_config(home, bot_api, account("main", SECOND_TOKEN, bot_api, [FRIEND]))
        result = await cli(home, "reload")
        assert result.returncode == 0, result.stderr
        assert "accounts restarted (new connection settings): telegram:main" in result.stdout
        bot_api.inject_message(FRIEND, "on the new token", token=SECOND_TOKEN)
        assert await answered(bot_api, FRIEND, 1, SECOND_TOKEN) == ["on the new token"]
        assert bot_api.texts(FRIEND, bot_api.token) == []
        assert gateway_pid(home) == process.process.pid


@pytest.mark.parametrize("edit, key", [
    (lambda text: text.replace('mode = "followup"', 'mode = "sometimes"'), "queue.mode"),
    (lambda text: text.replace('bot_token = "', 'bot_token = "no-token'),  # the channel's own
     "channels.telegram.accounts.main.bot_token"),
    (lambda text: text + '\n[channels.telegramm.accounts.x]\n', "channels.telegramm"),
    # A channel's queue table and the store backend: checked by the models `run` uses.
    (lambda text: text + '\n[channels.telegram.queue]\ndebounce_ms = "abc"\n',
     "channels.telegram.queue.debounce_ms"),
    (lambda text: '[store]\nbackend = "mongo"\n' + text, "store.backend"),
])
@pytest.mark.slow
async def test_an_invalid_config_is_refused_and_the_old_one_stays(home, bot_api, edit, key):
    async with running_gateway_process(home):
        (home / "config.toml").write_text(edit((home / "config.toml").read_text()))
        validate = await cli(home, "config", "validate")
        result = await cli(home, "reload")
        assert result.returncode == 1
        assert validate.returncode == 1
        error = validate.stderr.strip().removeprefix("Error: ")
        assert key in error and error in result.stderr
        assert "nothing was applied" in result.stderr
        as_json = await cli(home, "reload", "--json")
        assert as_json.returncode == 1 and key in json.loads(as_json.stdout)["refused"]
        bot_api.inject_message(FRIEND, "still served")
        assert await answered(bot_api, FRIEND, 1) == ["still served"]


@pytest.mark.slow
async def test_a_listen_change_is_named_as_needing_a_restart(home, bot_api):
    async with running_gateway_process(home) as process:
        result = await cli(home, "reload")  # the command line's --listen is no change
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "nothing changed"
        config = (home / "config.toml").read_text()
        (home / "config.toml").write_text('[gateway]\nlisten = "127.0.0.1:9"\n'
                                          'control_token = "a-new-control-token-here"\n'
                                          + config)
        result = await cli(home, "reload", "--json")
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert report["restart_needed"] == ["gateway.control_token", "gateway.listen"]
        assert report["applied"] == []
        again = await cli(home, "reload", "--json")  # still not in effect: named again
        assert json.loads(again.stdout)["restart_needed"] == report["restart_needed"]
        bot_api.inject_message(FRIEND, "same gateway")
        assert await answered(bot_api, FRIEND, 1) == ["same gateway"]
        assert gateway_pid(home) == process.process.pid


def test_reload_with_no_gateway_says_so(tmp_path):
    result = run(tmp_path, "reload")
    assert result.returncode == 3
    assert "no gateway is running" in result.stderr


# -- in-process: what a reload changes inside the kernel ---------------------------------------


def edited(config, **sections):
    """``config`` with some sections replaced (a dict shaped like config.toml): the
    tables it sets, as its file would have them, and the new ones."""
    from chatkernel.core.config import KernelConfig

    return KernelConfig.model_validate({**config.model_dump(exclude_unset=True), **sections})


def test_each_changed_key_is_live_or_needs_a_restart():
    from chatkernel.core.runtime.reload import changed_keys, is_live

    old = {"queue": {"mode": "collect", "max_concurrent": 4}, "store": {"path": "a"},
           "agent": {"kind": "echo", "heartbeat": None},
           "channels": {"t": {"retry": None, "queue": {}, "accounts": {"a": {"x": 1}}}}}
    new = {"queue": {"mode": "steer", "max_concurrent": 8}, "store": {"path": "b"},
           "agent": {"kind": "echo", "heartbeat": {"every": "1h"}},
           "channels": {"t": {"retry": {"attempts": 2}, "queue": {"cap": 2},
                              "accounts": {"a": {"x": 2}}}, "u": {}}}
    verdicts = {".".join(path): is_live(path) for path in changed_keys(old, new)}
    assert verdicts == {"queue.mode": True, "queue.max_concurrent": False,
                        "store.path": False, "agent.heartbeat": True,
                        "channels.t.retry": False, "channels.t.queue.cap": True,
                        "channels.t.accounts.a.x": None, "channels.u": None}


async def test_queue_settings_follow_a_reload(tmp_path):
    from chatkernel.testing.memory import KernelHarness

    async with KernelHarness(tmp_path, config={"queue": {"mode": "collect"}}) as h:
        kernel = h.kernel
        assert kernel.queue_settings("memory:main:chat-1").mode == "collect"  # now cached
        channels = kernel.config.model_dump()["channels"]
        channels["memory"]["queue"] = {"cap": 3}
        report = await kernel.reload(edited(kernel.config, channels=channels,
                                            queue={"mode": "interrupt", "debounce_ms": 0}))
        assert report.applied == ["channels.memory.queue.cap", "queue.mode"]
        settings = kernel.queue_settings("memory:main:chat-1")
        assert (settings.mode, settings.cap) == ("interrupt", 3)


async def test_a_heartbeat_turned_on_by_a_reload_runs_on_schedule(tmp_path):
    from chatkernel.testing.agents import agent_plugin, scripted_agent
    from chatkernel.testing.clock import ManualClock
    from chatkernel.testing.memory import KernelHarness

    agent = scripted_agent()
    clock = ManualClock()
    async with KernelHarness(tmp_path, config={"agent": {"kind": agent.name},
                                               "heartbeat": {"every": "0"}},
                             plugins=[("test-agent", agent_plugin(agent))],
                             heartbeat_clock=clock) as h:
        assert not h.kernel.heartbeats.status()["loop"]
        report = await h.kernel.reload(edited(h.kernel.config, heartbeat={"every": "1h"}))
        assert report.applied == ["heartbeat.every"]
        clock.advance(3600)
        await h.heartbeats_settled()
        assert [r.heartbeat for r in agent.requests] == [True]


async def test_the_send_policy_follows_a_reload(tmp_path):
    from chatkernel.testing.memory import KernelHarness

    async with KernelHarness(tmp_path) as h:
        await h.channel.receive("one")
        await h.settle()
        await h.kernel.reload(edited(h.kernel.config, send_policy={"default": "deny"}))
        await h.channel.receive("two")
        await h.settle()
        assert h.channel.texts() == ["one"]


async def test_a_removed_account_finishes_its_turn_before_it_goes(tmp_path, monkeypatch):
    from chatkernel.core.runtime import reload
    from chatkernel.testing.agents import agent_plugin, scripted_agent
    from chatkernel.testing.memory import KernelHarness

    monkeypatch.setattr(reload, "SETTLE_SECONDS", 0.2)
    agent = scripted_agent(gate=True)
    config = {"agent": {"kind": agent.name},
              "channels": {"memory": {"accounts": {"main": {"allow_from": ["*"]},
                                                   "other": {"allow_from": ["*"]}}}}}
    async with KernelHarness(tmp_path, config=config,
                             plugins=[("test-agent", agent_plugin(agent))]) as h:
        kernel, channel = h.kernel, h.channel
        await channel.receive("in flight")
        await wait_until(lambda: agent.running, timeout=5, what="the turn in flight")
        channels = kernel.config.model_dump()["channels"]
        del channels["memory"]["accounts"]["main"]
        report = await kernel.reload(edited(kernel.config, channels=channels))
        assert report.removed == ["memory:main"]
        assert report.pending == ["memory:main (in-flight turns and sends)"]
        assert "memory:main" in kernel.accounts  # still answering its turn
        with pytest.raises(reload.ReloadBusy, match="still finishing with memory:main"):
            await kernel.reload(edited(kernel.config, queue={"mode": "steer", "debounce_ms": 0}))
        agent.gate.set()
        await wait_until(lambda: "memory:main" not in kernel.accounts, timeout=5,
                         what="the account removed")
        assert channel.texts() == ["re: in flight"]
        assert list(kernel.accounts) == ["memory:other"]
        report = await kernel.reload(edited(kernel.config, queue={"mode": "steer", "debounce_ms": 0}))
        assert report.applied == ["queue.mode"]


async def test_an_account_with_http_routes_changes_only_with_a_restart(tmp_path):
    from chatkernel.testing.memory import KernelHarness

    config = {"channels": {"memory": {"accounts": {"main": {"allow_from": ["*"]}}},
                           "webchat": {"accounts": {"default": {}}}}}
    async with KernelHarness(tmp_path, config=config) as h:
        kernel = h.kernel
        channels = kernel.config.model_dump()["channels"]
        channels["webchat"]["accounts"] = {"other": {}}  # one removed, one added
        report = await kernel.reload(edited(kernel.config, channels=channels))
        assert report.restart_needed == ["channels.webchat.accounts.default",
                                         "channels.webchat.accounts.other"]
        assert (report.added, report.removed) == ([], [])
        assert sorted(kernel.accounts) == ["memory:main", "webchat:default"]
        # Its kernel settings still apply at once.
        channels["webchat"]["accounts"] = {"default": {"allow_from": ["someone"]}}
        report = await kernel.reload(edited(kernel.config, channels=channels))
        assert report.applied == ["channels.webchat.accounts.default.allow_from"]
        assert kernel.accounts["webchat:default"].config.allow_from == ["someone"]


@pytest.mark.slow
async def test_reload_with_another_config_file_is_refused_not_switched(home, bot_api):
    other = home / "other.toml"
    other.write_text((home / "config.toml").read_text())
    async with running_gateway_process(home):
        result = await cli(home, "reload", "--config", str(other))
        assert result.returncode == 1
        assert f"reads {home / 'config.toml'}, not {other}" in result.stderr
        same = await cli(home, "reload", "--config", str(home / "config.toml"))
        assert same.returncode == 0, same.stderr


def label_agent(name: str) -> str:
    """A command agent answering ``<name>: <the message>``: a real program per turn."""
    script = f"import sys; print('{name}: ' + sys.stdin.read().splitlines()[-1])"
    return f"kind = \"command\"\ncommand = {json.dumps([sys.executable, '-c', script])}\n"


@pytest.mark.slow
async def test_a_rebinding_moves_a_chat_to_its_new_agent_after_chatkernel_reload(home,
                                                                                   bot_api):
    agents = (f"[agent]\n{label_agent('default')}\n[agents.work]\n{label_agent('work')}\n")
    write_config(home, bot_api, account("main", bot_api.token, bot_api, [FRIEND, STRANGER]),
                 agents)
    async with running_gateway_process(home):
        bot_api.inject_message(FRIEND, "one")
        bot_api.inject_message(STRANGER, "two")
        assert await answered(bot_api, FRIEND, 1) == ["default: one"]
        assert await answered(bot_api, STRANGER, 1) == ["default: two"]
        write_config(home, bot_api, account("main", bot_api.token, bot_api,
                                            [FRIEND, STRANGER]),
                     agents + f'\n[[bindings]]\nagent = "work"\nchat = "{FRIEND}"\n')
        result = await cli(home, "reload")
        assert result.returncode == 0, result.stderr
        assert "applied: bindings" in result.stdout
        bot_api.inject_message(FRIEND, "three")
        bot_api.inject_message(STRANGER, "four")
        assert (await answered(bot_api, FRIEND, 2))[1] == "work: three"
        assert (await answered(bot_api, STRANGER, 2))[1] == "default: four"
        listed = await cli(home, "sessions", "list", "--json")
    sessions = {s["key"]: (s["agent"], s["session_id"]) for s in json.loads(listed.stdout)}
    assert set(sessions) == {f"telegram:main:{FRIEND}", f"telegram:main:{FRIEND}#work",
                             f"telegram:main:{STRANGER}"}
    assert sessions[f"telegram:main:{FRIEND}#work"][0] == "work"
