"""The built-in agents: echo, command (a real child process) and openai (a real fake server)."""

from __future__ import annotations

import json
import os
import socket
import sys
import textwrap
from contextlib import aclosing
from pathlib import Path

import anyio
import pytest

from chatkernel.core import config as cfg
from chatkernel.builtin.agents.command import CommandAgent
from chatkernel.builtin.agents.echo import EchoAgent
from chatkernel.builtin.agents.openai import OpenAIAgent
from chatkernel.core.turns.agents import (
    SAFE_ENV,
    Agent,
    AgentEvent,
    TurnRequest,
    agent_environment,
    collect_agents,
)
from chatkernel.core.config import AgentConfig
from chatkernel.sdk.models import MediaRef
from chatkernel.core.plugins import PluginManager
from chatkernel.core.store.base import LogEntry
from chatkernel.hookspecs import hookimpl
from chatkernel.testing.fakes.openai import FakeOpenAI, FakeReply
from chatkernel.testing.contract import wait_until


@pytest.fixture
def anyio_backend():
    return "asyncio"


ENVELOPE = "[channel: webchat | user: 42]"


def request(text: str = "hello", **kwargs) -> TurnRequest:
    kwargs.setdefault("session_key", "webchat:default:42")
    kwargs.setdefault("session_id", "sid-1")
    kwargs.setdefault("envelope", ENVELOPE)
    return TurnRequest(text=text, **kwargs)


async def run(agent: Agent, req: TurnRequest) -> list[AgentEvent]:
    async with aclosing(agent.turn(req)) as events:
        return [event async for event in events]


async def answer(agent: Agent, req: TurnRequest) -> list[AgentEvent]:
    """The events a reply is made of: a turn's events without the text it streamed on
    the way (non-final text events, which only a live reply shows)."""
    return [e for e in await run(agent, req) if e.kind != "text" or e.final]


def finals(events: list[AgentEvent]) -> list[str]:
    return [e.text for e in events if e.kind == "text" and e.final]


def errors(events: list[AgentEvent]) -> list[str]:
    return [e.text for e in events if e.kind == "error"]


def is_gone(pid: int) -> bool:
    """True once ``pid`` no longer exists (a zombie counts as not reaped: still there)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def is_dead(pid: int) -> bool:
    """Gone or a zombie: for grandchildren, reaped by whoever adopted them."""
    if is_gone(pid):
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return is_gone(pid)
    return stat.rpartition(")")[2].split()[0] == "Z"


async def wait_for_file(path: Path, timeout: float = 10.0) -> str:
    await wait_until(lambda: path.exists() and path.read_text().strip(), timeout=timeout,
                     what=f"{path} written")
    return path.read_text().strip()


# -- registry -------------------------------------------------------------------------------


def test_collect_agents_from_the_builtin_plugin():
    import chatkernel.builtin.agents as builtin

    pm = PluginManager()
    pm.register(builtin, name="chatkernel.builtin.agents")
    assert collect_agents(pm) == {"echo": EchoAgent, "command": CommandAgent,
                                  "openai": OpenAIAgent}


def test_a_plugin_kind_replaces_the_builtin_one_and_bad_ones_are_refused():
    import chatkernel.builtin.agents as builtin

    class LoudEcho(EchoAgent):
        name = "echo"

    class Plugin:
        @hookimpl
        def register_agents(self, register):
            register(LoudEcho)

    pm = PluginManager()
    pm.register(Plugin(), name="loud")
    pm.register(builtin, name="chatkernel.builtin.agents")  # registered later, still called last
    assert collect_agents(pm)["echo"] is LoudEcho

    class Nameless(Agent):
        pass

    for bad in (Nameless, object, "echo"):
        class BadPlugin:
            @hookimpl
            def register_agents(self, register, bad=bad):
                register(bad)

        pm = PluginManager()
        pm.register(BadPlugin(), name="bad")
        with pytest.raises(TypeError):
            collect_agents(pm)


# -- echo -------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_echo_replies_with_the_clean_text():
    events = await run(EchoAgent(AgentConfig(), None), request("hi there"))
    assert events == [AgentEvent.reply("hi there")]


@pytest.mark.anyio
async def test_echo_describes_media_when_there_is_no_text(tmp_path):
    agent = EchoAgent(AgentConfig(), None)
    one = request("", media=[MediaRef("image", path=tmp_path / "cat.jpg")])
    assert finals(await run(agent, one)) == ["received 1 image: cat.jpg"]
    two = request("  ", media=[MediaRef("image", filename="a.jpg"),
                               MediaRef("document", filename="b.pdf")])
    assert finals(await run(agent, two)) == ["received 2 files: a.jpg (image), b.pdf (document)"]
    with_text = request("look", media=[MediaRef("image", filename="a.jpg")])
    assert finals(await run(agent, with_text)) == ["look"]


# -- command ----------------------------------------------------------------------------------


def command_agent(tmp_path: Path, source: str, timeout: float = 10.0) -> CommandAgent:
    script = tmp_path / "bot.py"
    script.write_text(textwrap.dedent(source))
    return CommandAgent(AgentConfig(kind="command", command=[sys.executable, str(script)],
                                    timeout=timeout), None)


@pytest.mark.anyio
async def test_command_reads_the_prompt_and_replies(tmp_path):
    agent = command_agent(tmp_path, """
        import json, os, sys
        data = sys.stdin.read()
        print(json.dumps({"stdin": data, "env": {k: v for k, v in os.environ.items()
                                                 if k.startswith("CHATKERNEL_")}}))
    """)
    events = await answer(agent, request("what time is it?", heartbeat=True))
    assert len(events) == 1 and events[0].kind == "text" and events[0].final
    got = json.loads(events[0].text)  # the trailing newline is gone
    assert got["stdin"] == f"{ENVELOPE}\nwhat time is it?"
    assert got["env"]["CHATKERNEL_SESSION"] == "webchat:default:42"
    assert got["env"]["CHATKERNEL_SESSION_ID"] == "sid-1"
    assert got["env"]["CHATKERNEL_HEARTBEAT"] == "1"
    events = await answer(agent, request("again"))
    assert json.loads(events[0].text)["env"]["CHATKERNEL_HEARTBEAT"] == "0"


@pytest.mark.anyio
async def test_command_exit_status_is_an_error_with_the_stderr_tail(tmp_path):
    agent = command_agent(tmp_path, """
        import sys
        print("partial reply")
        sys.stderr.write("x" * 2000 + "THE END\\n")
        sys.exit(3)
    """)
    [event] = await answer(agent, request())
    assert event.kind == "error"
    prefix = ("The agent's program exited with status 3 instead of answering. Its error "
              "output ends with: ")
    advice = " Run agent.command by hand with a message on its input to see why."
    assert event.text.startswith(prefix)
    assert event.text.endswith("THE END" + advice)
    assert len(event.text) == len(prefix) + 500 + len(advice)


@pytest.mark.slow
@pytest.mark.anyio
async def test_command_timeout_kills_and_reaps_the_process(tmp_path):
    pid_file = tmp_path / "pid"
    agent = command_agent(tmp_path, f"""
        import os, sys, time
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        sys.stderr.write("thinking hard\\n"); sys.stderr.flush()
        time.sleep(60)  # real time: the agent's timeout kills it first
    """, timeout=1.0)
    [event] = await answer(agent, request())
    assert event.kind == "error"
    assert event.text == ("The agent did not answer within 1 s and was stopped. Its error "
                          "output ends with: thinking hard If it needs longer, raise "
                          "agent.timeout.")
    assert is_gone(int(pid_file.read_text()))


@pytest.mark.slow
@pytest.mark.anyio
async def test_command_timeout_kills_grandchildren_too(tmp_path):
    pid_file = tmp_path / "pid"
    agent = command_agent(tmp_path, f"""
        import subprocess, sys, time
        # real time: the grandchild and the child wait for the agent's timeout to kill them
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        time.sleep(60)  # real time: as above
    """, timeout=1.0)
    [event] = await answer(agent, request())
    assert event.kind == "error" and "did not answer within 1 s" in event.text
    grandchild = int(pid_file.read_text())
    await wait_until(lambda: is_dead(grandchild), timeout=5, what="the grandchild dead",
                     interval=0.05)


@pytest.mark.anyio
async def test_cancelling_the_turn_kills_the_process(tmp_path):
    pid_file = tmp_path / "pid"
    agent = command_agent(tmp_path, f"""
        import os, time
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        time.sleep(60)  # real time: cancelling the turn kills it first
    """)
    events: list[AgentEvent] = []

    async def consume():
        async with aclosing(agent.turn(request())) as turn:
            async for event in turn:
                events.append(event)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        pid = int(await wait_for_file(pid_file))
        assert not is_gone(pid)
        tg.cancel_scope.cancel()
    assert events == []
    assert is_gone(pid)


@pytest.mark.anyio
async def test_command_that_cannot_start(tmp_path):
    missing = str(tmp_path / "no-such-program")
    agent = CommandAgent(AgentConfig(kind="command", command=[missing]), None)
    [event] = await answer(agent, request())
    assert event.kind == "error" and missing in event.text and "not found" in event.text

    not_executable = tmp_path / "script.sh"
    not_executable.write_text("#!/bin/sh\necho hi\n")
    not_executable.chmod(0o644)
    agent = CommandAgent(AgentConfig(kind="command", command=[str(not_executable)]), None)
    [event] = await answer(agent, request())
    assert event.kind == "error" and str(not_executable) in event.text
    assert "permission denied" in event.text


@pytest.mark.anyio
async def test_command_not_configured():
    [event] = await run(CommandAgent(AgentConfig(kind="command"), None), request())
    assert event.kind == "error" and "agent.command is not set" in event.text
    assert 'command = ["python", "bot.py"]' in event.text


PRINTS_ENVIRONMENT = """
    import json, os, sys
    sys.stdin.read()
    print(json.dumps(dict(os.environ)))
"""


@pytest.mark.anyio
async def test_the_command_agent_gets_an_explicit_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123456789:AAbbCCddEEffGGhhIIjjKKllMMnnOOppQQ")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("TZ", "Europe/Berlin")
    monkeypatch.setenv("MODEL_DIR", "/srv/models")
    monkeypatch.setenv("UPSTREAM_KEY", "up-123")
    script = tmp_path / "bot.py"
    script.write_text(textwrap.dedent(PRINTS_ENVIRONMENT))
    config = cfg.parse({"agent": {"kind": "command", "command": [sys.executable, str(script)],
                                  "pass_env": ["MODEL_DIR", "NOT_SET_ANYWHERE"],
                                  "env": {"MODE": "test", "API_KEY": "${UPSTREAM_KEY}"}}})
    [event] = await answer(CommandAgent(config.agent, None), request())
    env = json.loads(event.text)
    assert "TELEGRAM_BOT_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["PATH"] == os.environ["PATH"] and env["HOME"] == os.environ["HOME"]
    assert env["LC_ALL"] == "C.UTF-8" and env["TZ"] == "Europe/Berlin"
    assert env["MODEL_DIR"] == "/srv/models" and "NOT_SET_ANYWHERE" not in env
    assert env["MODE"] == "test" and env["API_KEY"] == "up-123"
    assert env["CHATKERNEL_SESSION"] == "webchat:default:42"
    extra = set(env) - set(SAFE_ENV) - {"MODEL_DIR", "MODE", "API_KEY", "CHATKERNEL_SESSION",
                                       "CHATKERNEL_SESSION_ID", "CHATKERNEL_HEARTBEAT"}
    assert {name for name in extra if not name.startswith("LC_")} <= {"PWD"}  # the shell's


def test_agent_environment_settings_are_checked():
    with pytest.raises(cfg.ConfigError, match=r"agent\.env: .*'BAD-NAME' is not an environment"):
        cfg.parse({"agent": {"env": {"BAD-NAME": "x"}}})
    with pytest.raises(cfg.ConfigError, match=r"agent\.pass_env: .*'A=B' is not an environment"):
        cfg.parse({"agent": {"pass_env": ["A=B"]}})
    with pytest.raises(cfg.ConfigError, match=r"environment variable NOPE is not set"):
        cfg.parse({"agent": {"env": {"X": "${NOPE}"}}}, environ={})
    assert agent_environment(cfg.AgentConfig(pass_env=["A"], env={"B": "2", "PATH": "/x"}),
                             {"A": "1", "PATH": "/bin", "LC_TIME": "C", "SECRET": "s"}) == {
        "A": "1", "B": "2", "PATH": "/x", "LC_TIME": "C"}


@pytest.mark.anyio
async def test_a_lone_surrogate_in_a_message_does_not_break_the_turn(tmp_path):
    agent = command_agent(tmp_path, """
        import sys
        data = sys.stdin.buffer.read().decode("utf-8")  # strict: what was sent is UTF-8
        print(data.splitlines()[-1])
    """)
    [event] = await answer(agent, request("broken \ud800 pair \ud83d\ude00",
                                       session_key="webchat:default:\udc00\x00"))
    assert event.kind == "text" and event.text == "broken \ufffd pair \U0001f600"


@pytest.mark.anyio
async def test_an_internal_failure_reads_as_a_sentence(tmp_path, monkeypatch):
    async def broken(stream, into, keep):
        raise ValueError("the pipe broke")

    monkeypatch.setattr(CommandAgent, "_drain", staticmethod(broken))
    agent = command_agent(tmp_path, "print('hi')")
    [event] = await answer(agent, request())
    assert event.kind == "error"
    assert event.text == ("The agent's turn failed inside the gateway (ValueError: the pipe "
                          "broke). This is a bug in chatkernel; the gateway's log has the "
                          "details.")


@pytest.mark.anyio
async def test_command_large_output_does_not_deadlock(tmp_path):
    agent = command_agent(tmp_path, """
        import sys
        sys.stderr.write("e" * 1_000_000); sys.stderr.flush()
        sys.stdout.write("o" * 1_000_000 + "!\\n")
        sys.stdin.read()
    """)
    [event] = await answer(agent, request("x" * 300_000))
    assert event.kind == "text" and event.final
    assert len(event.text) == 1_000_001 and event.text.endswith("!")


@pytest.mark.anyio
async def test_command_ignoring_stdin_is_fine(tmp_path):
    agent = command_agent(tmp_path, 'print("done without reading")')
    assert finals(await answer(agent, request("y" * 1_000_000))) == ["done without reading"]


# -- openai ------------------------------------------------------------------------------------


class MemoryLog:
    """A store double: only ``read_log``, with the real interface's filters."""

    def __init__(self, entries: list[tuple[str, str, str]] = ()) -> None:
        self.entries = [LogEntry(seq, "webchat:default:42", sid, role, text, float(seq))
                        for seq, (sid, role, text) in enumerate(entries, start=1)]
        self.calls: list[dict] = []

    async def read_log(self, session_key, *, session_id=None, limit=None, roles=None,
                       before_seq=None):
        self.calls.append(dict(session_key=session_key, session_id=session_id, limit=limit,
                               roles=roles, before_seq=before_seq))
        found = [e for e in self.entries if e.session_key == session_key
                 and (session_id is None or e.session_id == session_id)
                 and (roles is None or e.role in roles)
                 and (before_seq is None or e.seq < before_seq)]
        return found[-limit:] if limit else found


def openai_agent(base_url: str, store=None, **config) -> OpenAIAgent:
    config.setdefault("api_key_env", "CHATKERNEL_TEST_OPENAI_KEY")
    return OpenAIAgent(AgentConfig(kind="openai", base_url=base_url, model="test-model",
                                   **config), store if store is not None else MemoryLog())


@pytest.fixture(autouse=True)
def _no_key(monkeypatch):
    monkeypatch.delenv("CHATKERNEL_TEST_OPENAI_KEY", raising=False)


@pytest.mark.anyio
async def test_openai_streamed_reply_is_one_final_event():
    async with FakeOpenAI(replies=["Hello there, how are you today?"]) as fake:
        agent = openai_agent(fake.base_url)
        try:
            events = await run(agent, request("hi"))
        finally:
            await agent.aclose()
    assert finals(events) == ["Hello there, how are you today?"]
    partial = [e.text for e in events if e.kind == "text" and not e.final]
    assert len(partial) > 1 and "".join(partial) == "Hello there, how are you today?"
    assert events[-1] == AgentEvent.reply("Hello there, how are you today?")
    [sent] = fake.chat_requests
    assert sent.path == "/v1/chat/completions"
    assert sent.json["model"] == "test-model" and sent.json["stream"] is True
    assert sent.json["messages"] == [{"role": "user", "content": f"{ENVELOPE}\nhi"}]
    assert "Authorization" not in sent.headers


@pytest.mark.anyio
async def test_openai_sends_the_key_from_the_environment(monkeypatch):
    monkeypatch.setenv("CHATKERNEL_TEST_OPENAI_KEY", "sk-test-123")
    async with FakeOpenAI(api_key="sk-test-123") as fake:
        agent = openai_agent(fake.base_url + "/")  # a trailing slash is fine
        try:
            events = await run(agent, request("ping"))
            assert finals(events) == [f"{ENVELOPE}\nping"]  # the default reply echoes
            await run(agent, request("again"))
        finally:
            await agent.aclose()
        assert agent._http is None
    assert [r.headers["Authorization"] for r in fake.chat_requests] == ["Bearer sk-test-123"] * 2


@pytest.mark.anyio
async def test_openai_messages_system_prompt_history_then_prompt():
    store = MemoryLog([
        ("sid-0", "user", "from an old session"),       # 1: another session_id
        ("sid-1", "user", "first question"),             # 2
        ("sid-1", "system", "a system note"),            # 3: not a chat role
        ("sid-1", "assistant", "first answer"),          # 4
        ("sid-1", "user", "second question"),            # 5
        ("sid-1", "assistant", "second answer"),         # 6
        ("sid-1", "user", "this turn, already logged"),  # 7: the turn's own entry
    ])
    async with FakeOpenAI() as fake:
        agent = openai_agent(fake.base_url, store, system_prompt="Be brief.", history_limit=3)
        try:
            await run(agent, request("now", log_seq=7))
        finally:
            await agent.aclose()
    assert store.calls == [dict(session_key="webchat:default:42", session_id="sid-1", limit=3,
                                roles=("user", "assistant"), before_seq=7)]
    assert fake.chat_requests[0].json["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "second question"},
        {"role": "assistant", "content": "second answer"},
        {"role": "user", "content": f"{ENVELOPE}\nnow"},
    ]


@pytest.mark.anyio
async def test_openai_history_limit_zero_reads_no_history():
    store = MemoryLog([("sid-1", "user", "old")])
    async with FakeOpenAI() as fake:
        agent = openai_agent(fake.base_url, store, history_limit=0)
        try:
            await run(agent, request("now"))
        finally:
            await agent.aclose()
    assert store.calls == []
    assert len(fake.chat_requests[0].json["messages"]) == 1


@pytest.mark.anyio
async def test_openai_401_does_not_leak_the_key(monkeypatch, caplog):
    secret = "sk-wrong-secret-value-42"
    monkeypatch.setenv("CHATKERNEL_TEST_OPENAI_KEY", secret)
    async with FakeOpenAI(api_key="sk-right") as fake:
        agent = openai_agent(fake.base_url)
        try:
            [event] = await run(agent, request())
        finally:
            await agent.aclose()
    assert event.kind == "error"
    assert "401" in event.text and "Incorrect API key provided" in event.text
    assert secret not in event.text
    # A server quoting the key back is redacted too.
    async with FakeOpenAI(error_status=401,
                          error_message=f"Incorrect API key provided: {secret}") as fake:
        agent = openai_agent(fake.base_url)
        try:
            [event] = await run(agent, request())
        finally:
            await agent.aclose()
    assert secret not in event.text and "Incorrect API key provided: ***" in event.text
    assert event.text.endswith("Check the API key in $CHATKERNEL_TEST_OPENAI_KEY "
                               "(agent.api_key_env).")
    assert "HTTP 401" in caplog.text and secret not in caplog.text


@pytest.mark.anyio
async def test_openai_server_error():
    async with FakeOpenAI(error_status=500) as fake:
        agent = openai_agent(fake.base_url)
        try:
            events = await run(agent, request())
        finally:
            await agent.aclose()
    assert finals(events) == []
    [text] = errors(events)
    assert "HTTP 500" in text and "The server had an error" in text
    assert fake.base_url in text


@pytest.mark.anyio
async def test_openai_connection_refused():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"
    agent = openai_agent(base_url)
    try:
        [event] = await run(agent, request())
    finally:
        await agent.aclose()
    assert event.kind == "error" and event.text.startswith(
        f"Cannot connect to the model endpoint {base_url}: ")
    assert event.text.endswith("Check agent.base_url and that the server runs.")


@pytest.mark.anyio
async def test_openai_timeout_before_the_answer():
    async with FakeOpenAI(delay=5) as fake:
        agent = openai_agent(fake.base_url, timeout=0.3)
        try:
            [event] = await run(agent, request())
        finally:
            await agent.aclose()
    assert event.kind == "error" and event.text == (
        f"The model endpoint {fake.base_url} did not answer within 0.3 s. If it needs "
        "longer, raise agent.timeout.")


@pytest.mark.anyio
async def test_openai_timeout_in_the_middle_of_the_stream():
    async with FakeOpenAI(replies=["one two three four five six"], chunk_delay=0.1) as fake:
        agent = openai_agent(fake.base_url, timeout=0.35)
        try:
            events = await run(agent, request())
        finally:
            await agent.aclose()
    assert finals(events) == []
    assert [e.kind for e in events][-1] == "error" and "within 0.35 s" in events[-1].text


@pytest.mark.anyio
async def test_openai_accepts_a_json_answer():
    reply = FakeReply("plain answer", reasoning="hmm",
                      tool_calls=[{"name": "lookup", "arguments": '{"q": 1}'}])
    async with FakeOpenAI(replies=[reply], streaming=False) as fake:
        agent = openai_agent(fake.base_url)
        try:
            events = await run(agent, request())
        finally:
            await agent.aclose()
    assert events == [AgentEvent("thinking", "hmm"), AgentEvent("tool", 'lookup({"q": 1})'),
                      AgentEvent.usage(model="test-model", input_tokens=6, output_tokens=2),
                      AgentEvent.reply("plain answer")]


@pytest.mark.anyio
async def test_openai_thinking_and_tool_deltas():
    reply = FakeReply("It is sunny.", reasoning="The user wants the weather.",
                      tool_calls=[{"name": "get_weather", "arguments": '{"city": "Paris"}'}])
    async with FakeOpenAI(replies=[reply]) as fake:
        agent = openai_agent(fake.base_url)
        try:
            events = await run(agent, request())
        finally:
            await agent.aclose()
    thinking = [e.text for e in events if e.kind == "thinking"]
    assert len(thinking) > 1 and "".join(thinking) == "The user wants the weather."
    tools = [e for e in events if e.kind == "tool"]
    assert tools[0] == AgentEvent("tool", "calling get_weather", False)
    assert tools[-1] == AgentEvent("tool", 'get_weather({"city": "Paris"})', True)
    assert finals(events) == ["It is sunny."]
    assert events[-1].kind == "text" and events[-1].final


@pytest.mark.anyio
async def test_openai_consumer_stopping_early_releases_the_stream():
    async with FakeOpenAI(replies=["a b c d e f g h"], chunk_delay=0.05) as fake:
        agent = openai_agent(fake.base_url)
        try:
            async with aclosing(agent.turn(request())) as turn:
                async for event in turn:
                    if event.kind == "text":
                        break
            # The agent still works afterwards, on the same client session.
            assert finals(await run(agent, request("next"))) == [f"{ENVELOPE}\nnext"]
        finally:
            await agent.aclose()


@pytest.mark.anyio
async def test_fake_openai_models_and_bad_requests():
    import aiohttp

    async with FakeOpenAI(model="m1", api_key="k") as fake:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{fake.base_url}/models",
                                headers={"Authorization": "Bearer k"}) as resp:
                assert resp.status == 200
                assert (await resp.json())["data"][0]["id"] == "m1"
            async with http.get(f"{fake.base_url}/models") as resp:
                assert resp.status == 401
                assert "didn't provide an API key" in (await resp.json())["error"]["message"]
            async with http.post(f"{fake.base_url}/chat/completions", json={"model": "m1"},
                                 headers={"Authorization": "Bearer k"}) as resp:
                assert resp.status == 400
            async with http.post(f"{fake.base_url}/chat/completions",
                                 json={"model": "m1", "messages": [
                                     {"role": "user", "content": "yo"}]},
                                 headers={"Authorization": "Bearer k"}) as resp:
                body = await resp.json()
                assert body["object"] == "chat.completion"
                assert body["choices"][0]["message"] == {"role": "assistant", "content": "yo"}
    assert len(fake.requests) == 4



@pytest.mark.anyio
async def test_openai_parses_awkward_event_streams():
    """CRLF line ends, comments, multi-line data, events split across reads, an error chunk."""
    from aiohttp import web

    bodies = {
        "/ok/chat/completions": [
            b": keep-alive\r\n\r\n",
            b'data: {"choices": [{"index": 0, "delta": {"content": "Hel"}}]}\r\n\r',
            b'\ndata: {"choices": [{"index": 0,\r\ndata:  "delta": {"content": "lo"}}]}\r\n\r\n',
            b'event: ignored\ndata: {"choices": [], "usage": {"total_tokens": 3}}\n\n',
            b"data: [DONE]\n\n",
        ],
        "/broken/chat/completions": [
            b'data: {"choices": [{"index": 0, "delta": {"content": "Hel"}}]}\n\n',
            b'data: {"error": {"message": "upstream model crashed"}}\n\n',
        ],
    }

    async def handler(req: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(req)
        for piece in bodies[req.path]:
            await response.write(piece)
            await anyio.sleep(0.01)  # real time: each piece reaches the client on its own
        return response

    app = web.Application()
    app.router.add_post("/{name}/chat/completions", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        agent = openai_agent(f"{url}/ok")
        try:
            events = await run(agent, request())
            assert finals(events) == ["Hello"]
            agent.config.base_url = f"{url}/broken/chat/completions"  # a full URL works too
            events = await run(agent, request())
            assert finals(events) == []
            assert errors(events) == [f"The model endpoint {url}/broken/chat/completions "
                                      "reported an error: upstream model crashed."]
        finally:
            await agent.aclose()
    finally:
        await runner.cleanup()


@pytest.mark.anyio
async def test_no_secret_reaches_the_chat_or_the_session_log(tmp_path, monkeypatch):
    from chatkernel.testing.memory import KernelHarness

    bot_token = "123456789:AAbbCCddEEffGGhhIIjjKKllMMnnOOppQQ"
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", bot_token)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-api-key-0001")
    script = tmp_path / "bot.py"
    script.write_text(textwrap.dedent("""
        import json, os, sys
        text = sys.stdin.read().splitlines()[-1]
        if text == "env":  # an agent that prints its environment
            print(json.dumps(dict(os.environ)))
        elif text == "secrets":  # one that found them elsewhere
            print("token", sys.argv[1], "key", sys.argv[2], "service", os.environ["SERVICE_TOKEN"])
        else:
            sys.exit("failed with " + sys.argv[1])
    """))
    config = {"agent": {"kind": "command", "command": [
                  sys.executable, str(script), bot_token, "sk-the-api-key-0001"],
                        "env": {"SERVICE_TOKEN": "service-secret-0002"}},
              "gateway": {"control_token": "control-secret-0003",
                          "workspace": str(tmp_path / "workspace")}}
    async with KernelHarness(tmp_path, config=config) as h:
        for text in ("env", "secrets", "fail"):
            await h.channel.receive(text, message_id=text)
            await h.settle(timeout=15)
        sent = "\n".join(h.channel.texts())
        logged = "\n".join(entry.text for entry in await h.kernel.store.read_log(
            "memory:main:chat-1"))
    for where in (sent, logged):
        assert "TELEGRAM_BOT_TOKEN" not in where  # not even the name: never in its env
        for secret in (bot_token, "sk-the-api-key-0001", "service-secret-0002"):
            assert secret not in where
        assert "token *** key *** service ***" in where
        assert "failed with ***" in where


@pytest.mark.anyio
async def test_command_streams_its_output_as_it_arrives(tmp_path):
    """Each line the program writes is a non-final text event before the program has
    written the next one (it waits for a file the test writes once it saw the first)."""
    go = tmp_path / "go"
    agent = command_agent(tmp_path, f"""
        import os, sys, time
        sys.stdout.write("first line\\n"); sys.stdout.flush()
        while not os.path.exists({str(go)!r}):
            time.sleep(0.01)  # real time: a program of its own, waiting for the test's file
        sys.stdout.write("second line\\n")
    """, timeout=10)
    seen: list[AgentEvent] = []
    async with aclosing(agent.turn(request())) as events:
        async for event in events:
            seen.append(event)
            if event.text == "first line\n":
                assert not event.final
                go.write_text("")
    streamed = "".join(e.text for e in seen if e.kind == "text" and not e.final)
    assert streamed == "first line\nsecond line\n"
    assert finals(seen) == ["first line\nsecond line"]


@pytest.mark.anyio
async def test_echo_types_its_answer_word_by_word_when_asked():
    agent = EchoAgent(AgentConfig(echo_typing_ms=1), None)
    events = await run(agent, request("one two  three"))
    assert [e.text for e in events if not e.final] == ["one ", "two  ", "three"]
    assert finals(events) == ["one two  three"]
    assert len(await run(EchoAgent(AgentConfig(), None), request("one two"))) == 1
