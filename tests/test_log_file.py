"""The gateway's log file in ``$CHATKERNEL_HOME/logs/``: JSON lines, 0600, secrets
redacted as on stderr, rotated by size and age; its reader (``read_lines``, ``follow``)
and ``chatkernel logs``; a real gateway writes it, and ``[logging] file = false`` stops it."""

from __future__ import annotations

import json
import logging
import os
import stat
import time
import urllib.request

import pytest
from click.testing import CliRunner

from chatkernel.cli import cli
from chatkernel.core import logs
from chatkernel.testing.process import gateway_home, gateway_process

SECRET = "sekrit-0123456789abcdef"


@pytest.fixture
def logger(chatkernel_home):
    """A logger writing to the home's log file only (as the gateway's root logger does)."""
    logs.secret_filter.add(SECRET)
    handler = logs.LogFile(chatkernel_home, max_bytes=10_000, backups=3).handler()
    log = logging.getLogger("chatkernel.test-log-file")
    log.propagate, log.level = False, logging.DEBUG
    log.addHandler(handler)
    yield log
    log.removeHandler(handler)
    handler.close()


def lines(home, **filters):
    return list(logs.read_lines(home, **filters))


def test_json_lines_0600_with_secrets_redacted_and_the_extra_fields(chatkernel_home, logger):
    logger.info("token %s in a URL", SECRET, extra={"channel": "telegram",
                                                    "account": "telegram:main"})
    try:
        raise ValueError(f"bad {SECRET}")
    except ValueError:
        logger.exception("failed")
    path = chatkernel_home / "logs" / "gateway.log"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert SECRET not in path.read_text()
    first, second = lines(chatkernel_home)
    assert first["message"] == "token *** in a URL" and first["level"] == "info"
    assert (first["channel"], first["account"]) == ("telegram", "telegram:main")
    assert first["logger"] == "chatkernel.test-log-file"
    assert second["level"] == "error" and "ValueError: bad ***" in second["exc"]


def test_rotated_by_size_read_oldest_first_and_backups_past_their_age_removed(
        chatkernel_home, logger):
    for number in range(200):
        logger.info("line %03d %s", number, "x" * 100)
    directory = chatkernel_home / "logs"
    names = sorted(path.name for path in directory.iterdir())
    assert names == ["gateway.log", "gateway.log.1", "gateway.log.2", "gateway.log.3"]
    assert all(stat.S_IMODE((directory / name).stat().st_mode) == 0o600 for name in names)
    numbers = [int(line["message"].split()[1]) for line in lines(chatkernel_home)]
    assert numbers == sorted(numbers) and numbers[-1] == 199  # the oldest went first
    old = time.time() - 30 * 86400
    os.utime(directory / "gateway.log.3", (old, old))
    logs.LogFile(chatkernel_home, max_age_days=14).handler().close()
    assert not (directory / "gateway.log.3").exists()
    assert (directory / "gateway.log.2").exists()


def test_the_reader_filters_by_time_level_and_channel(chatkernel_home, logger):
    logger.debug("detail")
    logger.info("telegram:main: message from 42 refused")
    logger.warning("slack:work: delivery failed", extra={"channel": "slack",
                                                         "account": "slack:work"})
    logger.error("store down")
    assert [line["message"] for line in lines(chatkernel_home, level="warning")] == [
        "slack:work: delivery failed", "store down"]
    assert [line["message"] for line in lines(chatkernel_home, channel="telegram")] == [
        "telegram:main: message from 42 refused"]
    assert len(lines(chatkernel_home, channel="slack")) == 1
    assert lines(chatkernel_home, since=time.time() + 60) == []
    assert len(lines(chatkernel_home, since=time.time() - 60)) == 4


def test_follow_yields_new_lines_across_a_rotation(chatkernel_home, logger):
    logger.info("before")
    written = iter(["after 1", "after 2", *(["filler " + "y" * 200] * 60), "rotated"])
    seen: list[str] = []

    def sleep(_seconds: float) -> None:  # the writer's turn, no wall-clock wait
        logger.info(next(written))

    for line in logs.follow(chatkernel_home, sleep=sleep, stop=lambda: "rotated" in seen):
        seen.append(line["message"])
    assert (chatkernel_home / "logs" / "gateway.log.1").exists()
    assert [text for text in seen if not text.startswith("filler")] == [
        "before", "after 1", "after 2", "rotated"]
    assert seen.count("filler " + "y" * 200) == 60


def test_chatkernel_logs_says_when_there_is_no_log(chatkernel_home):
    missing = CliRunner().invoke(cli, ["logs"])
    assert missing.exit_code == 1 and "no log at" in missing.output


def test_chatkernel_logs_prints_and_filters(chatkernel_home, logger):
    runner = CliRunner()
    logger.info("hello")
    logger.error("telegram:main: broken")
    text = runner.invoke(cli, ["logs", "--since", "1h"])
    assert text.exit_code == 0
    assert "INFO    chatkernel.test-log-file: hello" in text.output
    found = runner.invoke(cli, ["logs", "--level", "error", "--json"])
    assert [json.loads(line)["message"] for line in found.output.splitlines()] == [
        "telegram:main: broken"]
    assert runner.invoke(cli, ["logs", "--channel", "slack"]).output == ""
    assert runner.invoke(cli, ["logs", "--since", "soon"]).exit_code == 2


@pytest.mark.slow
@pytest.mark.parametrize("file", [True, False])
def test_a_running_gateway_writes_its_log_file_unless_told_not_to(tmp_path, file):
    home = gateway_home(tmp_path / "home", f"[logging]\nfile = {str(file).lower()}\n")
    with gateway_process(home) as gateway:
        with urllib.request.urlopen(f"{gateway.url}/healthz", timeout=5):
            pass
    path = home / "logs" / "gateway.log"
    if not file:
        assert not path.exists()
        return
    messages = [line["message"] for line in logs.read_lines(home)]
    assert any(message.startswith("chatkernel listening on") for message in messages)
    assert messages[-1] == "stopped"


@pytest.mark.anyio
async def test_a_refused_stranger_and_a_failed_send_say_what_to_run_next(tmp_path, caplog):
    from chatkernel.channels import SendError
    from chatkernel.testing import KernelHarness

    config = {"channels": {"memory": {"retry": {"attempts": 1},
                                      "accounts": {"main": {"allow_from": ["7"]}}}}}
    caplog.set_level(logging.INFO)
    async with KernelHarness(tmp_path, config=config) as h:
        await h.channel.receive("hi", sender_id="666", chat_id="666")
        h.channel.fail_next.append(SendError("the chat is gone"))
        await h.send_text("memory", "chat-2", "hello")
        await h.settle()
    refused = next(r for r in caplog.records if "message from 666 refused" in r.message)
    assert "add 666 to channels.memory.accounts.main.allow_from, then chatkernel reload" \
        in refused.message
    assert (refused.channel, refused.account) == ("memory", "memory:main")
    failed = next(r for r in caplog.records if "delivery failed" in r.message)
    assert "chatkernel status" in failed.message
    assert "chatkernel channels probe memory:main" in failed.message
    assert failed.channel == "memory"


@pytest.mark.anyio
async def test_a_refused_reload_says_what_to_run_next(tmp_path, caplog):
    from chatkernel.core.runtime.reload import ConfigReloader

    path = tmp_path / "config.toml"
    path.write_text("[queue]\nmode = \"nonsense\"\n")

    async def refuse(*args, **kwargs):
        from chatkernel.core.config import load

        load(path)

    reloader = ConfigReloader.__new__(ConfigReloader)
    reloader.reload = refuse
    caplog.set_level(logging.INFO)
    await reloader.reload_and_log()
    [line] = [r.message for r in caplog.records if "reload refused" in r.message]
    assert "chatkernel config validate" in line and "nonsense" in line
