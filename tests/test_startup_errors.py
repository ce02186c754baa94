"""Start-up errors name the file, say why and what to do: one line, never a traceback.

A read-only home is a directory its user cannot write. Root ignores permission
bits, so when the tests run as root the gateway runs as ``nobody`` (subprocess's
``user=``); otherwise as the test's own user, with the directory's write bits off.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from chatkernel.core.store.sqlite import SQLiteStore
from chatkernel.testing.process import CHATKERNEL, chatkernel_for

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")

ROOT = os.geteuid() == 0
#: Who the gateway runs as in these tests.
USER = pwd.getpwnam("nobody") if ROOT else pwd.getpwuid(os.geteuid())


@pytest.fixture
def home() -> Iterator[Path]:
    """A directory the gateway's user can enter (under /tmp: pytest's own temporary
    directories are closed to other users), emptied and removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="chatkernel-ro-home-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        path.chmod(0o755)
        shutil.rmtree(path, ignore_errors=True)


def give(*paths: Path) -> None:
    """Make ``paths`` the gateway user's (nothing to do when that is us)."""
    if ROOT:
        for path in paths:
            os.chown(path, USER.pw_uid, USER.pw_gid)


def read_only(directory: Path) -> None:
    directory.chmod(0o555)  # root's, when running as root: nobody cannot write it either


def run_gateway(home: Path) -> subprocess.CompletedProcess[str]:
    cache = home / ".cache"  # stevedore's entry-point cache, outside the read-only part
    env = {**os.environ, "CHATKERNEL_HOME": str(home), "HOME": str(home),
           "XDG_CACHE_HOME": str(cache)}
    env.pop("CHATKERNEL_CONFIG", None)
    as_user = {"user": USER.pw_uid, "group": USER.pw_gid, "extra_groups": []} if ROOT else {}
    # As nobody, from a copy nobody can reach when the checkout is in a private folder.
    command = chatkernel_for(USER) if ROOT else CHATKERNEL
    return subprocess.run([command, "run", "--listen", "127.0.0.1:0"], env=env,
                          capture_output=True, text=True, timeout=60, **as_user)


def prepare(home: Path, *, database: bool, workspace: bool, config: str = "") -> None:
    cache = home / ".cache"
    cache.mkdir()
    give(cache)
    if database:
        async def create() -> None:
            async with SQLiteStore.at(home / "state.db"):
                pass

        anyio.run(create)
        assert not (home / "state.db-wal").exists()  # closing checkpointed it away
        give(home / "state.db")
    if workspace:
        (home / "workspace").mkdir()
        give(home / "workspace")
    if config:
        (home / "config.toml").write_text(config)
        give(home / "config.toml")
    read_only(home)


@pytest.mark.slow
def test_a_read_only_home_with_a_database_says_the_wal_cannot_be_created(home):
    prepare(home, database=True, workspace=True)
    result = run_gateway(home)
    db = home / "state.db"
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: cannot open the state database {db}: SQLite must create {db}-wal next to "
        f"it (its write-ahead log), and the directory {home} is not writable by "
        f"{USER.pw_name}. Make {home} writable for {USER.pw_name} (chown or chmod), or set "
        "store.path to a file in a writable directory.")


@pytest.fixture
def writable() -> Iterator[Path]:
    """A directory the gateway's user can write, for what a test moves out of the home."""
    path = Path(tempfile.mkdtemp(prefix="chatkernel-writable-"))
    path.chmod(0o755)
    give(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_a_read_only_home_without_a_database_says_it_cannot_be_created(home, writable):
    prepare(home, database=False, workspace=False,
            config=f'[gateway]\nworkspace = "{writable}"\n')
    result = run_gateway(home)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: cannot create the state database {home / 'state.db'}: the directory {home} "
        f"is not writable by {USER.pw_name}. Make {home} writable for {USER.pw_name} (chown "
        "or chmod), or set store.path to a file in a writable directory.")


@pytest.mark.slow
def test_a_workspace_that_cannot_be_created_is_named(home):
    prepare(home, database=False, workspace=False)
    result = run_gateway(home)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"Error: {home / 'config.toml'}: gateway.workspace: cannot create "
                           f"the workspace {home / 'workspace'}: Permission denied. ")
    assert "set gateway.workspace to a writable directory" in last


@pytest.mark.slow
def test_a_gateway_json_that_cannot_be_written_is_named(home, writable):
    prepare(home, database=False, workspace=False,
            config=f'[gateway]\nworkspace = "{writable / "workspace"}"\n'
                   f'[store]\npath = "{writable / "state.db"}"\n')
    result = run_gateway(home)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: cannot write {home / 'gateway.json'}: Permission denied. The chatkernel "
        "commands find the running gateway through it: make the directory writable for this "
        "user, or set CHATKERNEL_HOME to a writable one")
