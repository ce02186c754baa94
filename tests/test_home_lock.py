"""One gateway per home: the second `chatkernel run` stops, the first keeps its home."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from chatkernel.core.gateway.homelock import HomeInUse, HomeLock
from chatkernel.testing.process import CHATKERNEL, gateway_process


def run(home, *args, timeout=60):
    env = {**os.environ, "CHATKERNEL_HOME": str(home)}
    env.pop("CHATKERNEL_CONFIG", None)
    return subprocess.run([CHATKERNEL, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_a_second_gateway_on_the_same_home_exits_and_leaves_the_first_alone(tmp_path):
    home = tmp_path / "home"
    with gateway_process(home) as first:
        state = json.loads((home / "gateway.json").read_text())
        second = run(home, "run", "--listen", "127.0.0.1:0", timeout=30)
        assert second.returncode == 1, second.stderr
        assert (f"home in use by gateway pid {first.process.pid} at {first.url}"
                in second.stderr)
        assert "Traceback" not in second.stderr
        # The first gateway still owns its home: gateway.json is its own, status finds it.
        assert json.loads((home / "gateway.json").read_text()) == state
        status = run(home, "status", "--json")
        assert status.returncode == 0, status.stderr
        gateway = json.loads(status.stdout)["gateway"]
        assert gateway["reachable"] is True and gateway["pid"] == first.process.pid
        assert first.process.poll() is None
        assert first.stop() == 0
    assert not (home / "gateway.json").exists()
    # Once the first is gone, the home is free again.
    with gateway_process(home) as again:
        assert json.loads((home / "gateway.json").read_text())["pid"] == again.process.pid


def test_the_lock_names_its_holder_and_is_released(tmp_path):
    home = tmp_path / "home"
    with HomeLock(home, "chatkernel send"):
        with pytest.raises(HomeInUse) as caught:
            HomeLock(home).acquire()
        assert caught.value.pid == os.getpid()
        assert f"home in use by chatkernel send pid {os.getpid()}" in str(caught.value)
    with HomeLock(home) as lock:  # released: free again
        assert lock.held
    assert oct((home / "gateway.lock").stat().st_mode & 0o777) == "0o600"


@pytest.mark.slow
def test_two_homes_sharing_one_state_database_cannot_both_run(tmp_path):
    shared = tmp_path / "shared" / "state.db"
    first_home, second_home = tmp_path / "one", tmp_path / "two"
    for home in (first_home, second_home):
        home.mkdir()
        (home / "config.toml").write_text(f'[store]\npath = "{shared}"\n')
    with gateway_process(first_home) as first:
        second = run(second_home, "run", "--listen", "127.0.0.1:0", timeout=30)
        assert second.returncode == 1, second.stderr
        [line] = second.stderr.strip().splitlines()  # one line, no traceback
        assert (f"the state database {shared} is in use by gateway pid {first.process.pid} "
                f"(home {first_home}, at {first.url}): one process per database") in line
        assert "give each home its own store.path" in line
        # A command that sends from a kernel of its own is refused the same way.
        send = run(second_home, "send", "--channel", "webchat", "--to", "c1", "x")
        assert send.returncode == 1 and "is in use by gateway pid" in send.stderr
        assert first.process.poll() is None
        assert first.stop() == 0
    # Once the first is gone, the other home may use the database.
    with gateway_process(second_home) as second_gateway:  # it started: it listens
        assert second_gateway.process.poll() is None
