"""``chatkernel service``: the systemd unit it writes (checked by ``systemd-analyze
verify`` where the tool is installed), and install / uninstall through systemctl."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from chatkernel.cli import cli


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def home(chatkernel_home, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert invoke("config", "init").exit_code == 0
    return chatkernel_home


def settings(unit: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in unit.splitlines() if "=" in line
                and not line.startswith("#"))


@pytest.mark.parametrize("user", [False, True])
def test_the_dry_run_prints_the_unit(home, user):
    result = invoke("service", "install", "--dry-run", *(["--user"] if user else []))
    assert result.exit_code == 0
    unit = result.stdout
    found = settings(unit)
    assert found["ExecStart"].endswith(f"run --config {home.resolve() / 'config.toml'}")
    assert found["Environment"] == f"CHATKERNEL_HOME={home.resolve()}"
    assert found["Restart"] == "on-failure"
    assert found["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert int(found["TimeoutStopSec"]) > 10  # the gateway drains for 10 s
    assert found["NoNewPrivileges"] == "yes" and found["PrivateTmp"] == "yes"
    assert found["ProtectSystem"] == "strict"
    assert str(home.resolve()) in found["ReadWritePaths"].split()
    assert found["WantedBy"] == ("default.target" if user else "multi-user.target")
    assert ("User" in found) == (not user)  # a system unit runs as the installing user
    assert "would run: systemctl" in result.stderr
    assert not (home.parent / "xdg").exists()  # nothing written


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed (Debian's package systemd)")
@pytest.mark.parametrize("user", [False, True])
def test_the_unit_passes_systemd_analyze_verify(home, tmp_path, user):
    unit = invoke("service", "install", "--dry-run", *(["--user"] if user else [])).stdout
    path = tmp_path / "chatkernel.service"
    path.write_text(unit)
    done = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "chatkernel.service" not in done.stderr, done.stderr  # no warning about it


def test_install_and_uninstall_write_the_unit_and_call_systemctl(home, tmp_path,
                                                                 monkeypatch):
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    (bin_dir / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert invoke("service", "install", "--user").exit_code == 0
    unit = tmp_path / "xdg" / "systemd" / "user" / "chatkernel.service"
    assert settings(unit.read_text())["Restart"] == "on-failure"
    assert calls.read_text().splitlines() == ["--user daemon-reload",
                                              "--user enable --now chatkernel.service"]
    status = invoke("service", "status", "--user")
    assert status.exit_code == 0 and f"installed: {unit}" in status.output
    assert invoke("service", "uninstall", "--user").exit_code == 0
    assert not unit.exists()
    assert calls.read_text().splitlines()[-2:] == ["--user disable --now chatkernel.service",
                                                   "--user daemon-reload"]
    assert invoke("service", "status", "--user").exit_code == 3
