"""The dev server with ``chatkernel run`` and ``chatkernel login wechat`` as real
processes: a WeChat bot, offline."""

from __future__ import annotations

import os
import stat
import subprocess
import time
import tomllib

import pytest

from chatkernel.testing import (
    CHATKERNEL,
    gateway_home,
    gateway_process,
    post_json as post,
    wait_for_messages,
)
from chatkernel.testing.process import devserver as run_devserver

USER = "u1@im.wechat"


def devserver():
    return run_devserver("chatkernel_wechat.devserver")


@pytest.mark.slow
def test_chatkernel_run_answers_a_user_of_the_dev_server(tmp_path):
    with devserver() as fake:
        base = fake["base_url"]
        assert post(f"{base}/_fake/messages", {"user": USER})[0] == 400
        home = gateway_home(
            tmp_path / "home", "[channels.wechat.accounts.main]\n"
            f'bot_token = "{fake["token"]}"\napi_base = "{base}"\n'
            f'cdn_base = "{fake["cdn_base"]}"\nallow_from = ["*"]\n')
        with gateway_process(home):
            status, answer = post(f"{base}/_fake/messages", {"user": USER, "text": "hello"})
            assert status == 200 and answer["message_id"].isdigit()
            post(f"{base}/_fake/messages", {"user": USER, "text": "again"})
            messages = wait_for_messages(f"{base}/_fake/sent?user={USER}", 2, timeout=20)
            assert [(m["kind"], m["text"]) for m in messages] == [("text", "hello"),
                                                                ("text", "again")]


def qr(base, status, timeout=20.0):
    """POST /_fake/qr once the login has fetched a code (409 until then)."""
    deadline = time.monotonic() + timeout
    while True:
        code, answer = post(f"{base}/_fake/qr", {"status": status})
        if code != 409 or time.monotonic() > deadline:
            return code, answer
        time.sleep(0.05)  # real time: a `chatkernel login` process asks for its code when it will


@pytest.mark.slow
def test_chatkernel_login_against_the_dev_server_stores_the_token(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    environ = {**os.environ, "CHATKERNEL_HOME": str(home)}
    environ.pop("CHATKERNEL_CONFIG", None)
    with devserver() as fake:
        base = fake["base_url"]
        assert post(f"{base}/_fake/qr", {"status": "confirmed"})[0] == 409  # no code yet
        login = subprocess.Popen([CHATKERNEL, "login", "wechat", "--api-base", base],
                                 env=environ, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert qr(base, "scaned")[0] == 200
            assert post(f"{base}/_fake/qr", {"status": "nonsense"})[0] == 400
            assert post(f"{base}/_fake/qr", {"status": "confirmed"})[0] == 200
            out, err = login.communicate(timeout=30)
        finally:
            if login.poll() is None:
                login.kill()
                login.communicate()
    assert login.returncode == 0, out + err
    path = home / "config.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    account = tomllib.loads(path.read_text())["channels"]["wechat"]["accounts"]["main"]
    assert account["api_base"] == base and account["bot_id"].endswith("@im.bot")
    assert account["owner_user_id"].endswith("@im.wechat")
    token = account["bot_token"]
    assert token and token != fake["token"]  # a token issued by this login
    assert token not in out and token not in err
    assert token.split(":")[-1] not in out + err
