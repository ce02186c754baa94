"""``chatkernel doctor`` probes a Telegram account live, against the dev server: a token
the platform accepts passes and its answer's Date header measures the clock; a token it
refuses fails the run, naming the account."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chatkernel.testing.process import devserver as run_devserver

CHATKERNEL = str(Path(sys.executable).with_name("chatkernel"))


def doctor(home: Path) -> tuple[int, dict[str, dict]]:
    done = subprocess.run([CHATKERNEL, "doctor", "--json"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "CHATKERNEL_HOME": str(home)})
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
