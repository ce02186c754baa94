"""``chatkernel doctor`` probes a Telegram account live, against the dev server: a token
the platform accepts passes and its answer's Date header measures the clock; a token it
refuses fails the run, naming the account. A webhook account's webhook is checked
(``getWebhookInfo``), and ``doctor --fix`` registers it again when Telegram posts
nowhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from chatkernel.testing import free_port
from chatkernel.testing.process import devserver as run_devserver

CHATKERNEL = str(Path(sys.executable).with_name("chatkernel"))


def doctor(home: Path, *args: str) -> tuple[int, dict[str, dict]]:
    done = subprocess.run([CHATKERNEL, "doctor", "--json", *args], capture_output=True,
                          text=True, timeout=60,
                          env={**os.environ, "CHATKERNEL_HOME": str(home)})
    answer = json.loads(done.stdout)
    return done.returncode, {check["id"]: check for check in answer["checks"]}


@pytest.mark.slow
def test_doctor_probes_the_account_and_reads_the_platform_s_clock(tmp_path):
    with run_devserver("chatkernel_telegram.devserver") as fake:
        home = tmp_path / "home"
        home.mkdir()
        config = home / "config.toml"
        account = (f'[channels.telegram.accounts.main]\napi_base = "{fake["base_url"]}"\n'
                   'allow_from = ["42"]\n')
        config.write_text(account + f'bot_token = "{fake["token"]}"\n')
        config.chmod(0o600)
        code, checks = doctor(home)
        assert code == 0, checks
        assert checks["account.telegram:main"]["status"] == "ok"
        assert checks["clock"]["status"] == "ok"
        assert checks["clock"]["message"].startswith("clock within")  # measured
        config.write_text(account + 'bot_token = "999:not-a-token-the-fake-knows"\n')
        code, checks = doctor(home)
        assert code == 1
        assert checks["account.telegram:main"]["status"] == "fail"
        assert "not-a-token" not in json.dumps(checks)


def bot_api(fake: dict, method: str, **params: object) -> object:
    """A Bot API call to the dev server, as any client makes it; its ``result``."""
    request = urllib.request.Request(
        f"{fake['base_url']}/bot{fake['token']}/{method}", data=json.dumps(params).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)["result"]


@pytest.mark.slow
def test_doctor_checks_the_webhook_and_fix_registers_it_again(tmp_path):
    with run_devserver("chatkernel_telegram.devserver") as fake:
        home = tmp_path / "home"
        home.mkdir()
        # Where the reverse proxy in front of the gateway would take Telegram's posts.
        url = f"http://127.0.0.1:{free_port()}/telegram/main/webhook"
        config = home / "config.toml"
        config.write_text(f'[channels.telegram.accounts.main]\napi_base = "{fake["base_url"]}"\n'
                          f'bot_token = "{fake["token"]}"\nallow_from = ["42"]\n'
                          f'mode = "webhook"\nwebhook_url = "{url}"\n'
                          'secret_token = "s3cret"\n')
        config.chmod(0o600)
        bot_api(fake, "setWebhook", url=url, secret_token="s3cret")  # as a start leaves it
        code, checks = doctor(home)
        assert code == 0, checks
        registered = checks["webhook.telegram:main"]
        assert registered["status"] == "ok" and url in registered["message"]
        # No gateway runs: whether the URL reaches it cannot be told.
        assert checks["webhook.telegram:main.url"]["status"] == "warn"

        bot_api(fake, "deleteWebhook")  # Telegram posts nowhere now
        code, checks = doctor(home)
        assert code == 1
        gone = checks["webhook.telegram:main"]
        assert gone["status"] == "fail" and "no webhook" in gone["message"]
        assert "chatkernel doctor --fix" in gone["fix"]
        assert bot_api(fake, "getWebhookInfo")["url"] == ""  # doctor alone changes nothing

        code, checks = doctor(home, "--fix")
        assert code == 0, checks
        assert checks["webhook.telegram:main"]["status"] == "ok"
        assert checks["fixed"]["message"] == "webhook: telegram:main registered again"
        assert bot_api(fake, "getWebhookInfo")["url"] == url
