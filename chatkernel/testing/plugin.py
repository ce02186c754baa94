"""pytest fixtures for testing chatkernel and its plugins, loaded through the ``pytest11``
entry point wherever chatkernel is installed: a plugin's suite needs no conftest for them.

- ``chatkernel_home`` (autouse): every test runs with an empty ``CHATKERNEL_HOME`` of its
  own and no ``CHATKERNEL_CONFIG``, so nothing a test runs touches ``~/.chatkernel``;
- ``anyio_backend``: asyncio (aiohttp needs it);
- ``chatkernel_kernel``: a running in-process kernel with a MemoryChannel account;
- ``redis_server`` and ``redis_prefix``: a real redis-server (chatkernel.testing.redis);
- ``small_disk``: a 4 MiB file system of the test's own to fill (chatkernel.testing.fakes.
  disk), the test skipped where none can be mounted;
- the hypothesis profile ``deep`` (chatkernel.testing.fuzz).
"""

from __future__ import annotations

import pytest

from chatkernel.testing.fuzz import register_profiles
from chatkernel.testing.redis import redis_prefix, redis_server  # noqa: F401  (fixtures)

# Plain asserts in the contract suite report their values, as in the author's own tests.
pytest.register_assert_rewrite("chatkernel.testing.contract")
# `--hypothesis-profile=deep` (more examples for every property test) is known before
# hypothesis's plugin loads the profile it names.
register_profiles()


@pytest.fixture(autouse=True)
def chatkernel_home(tmp_path_factory, monkeypatch):
    """An empty ``CHATKERNEL_HOME`` for the test, with no config file (every test gets
    one: nothing a test runs may touch ``~/.chatkernel``). It is not under ``tmp_path``,
    which stays the test's own."""
    home = tmp_path_factory.mktemp("chatkernel-home")
    monkeypatch.setenv("CHATKERNEL_HOME", str(home))
    monkeypatch.delenv("CHATKERNEL_CONFIG", raising=False)
    return home


@pytest.fixture
async def chatkernel_kernel(tmp_path):
    """A running in-process kernel with a MemoryChannel account ``memory:main``.

    Needs an anyio test (``@pytest.mark.anyio``). Inject with
    ``await h.channel.receive("hi")``; read ``h.channel.sent``.
    """
    from chatkernel.testing.memory import KernelHarness

    async with KernelHarness(tmp_path) as harness:
        yield harness


@pytest.fixture
def small_disk(tmp_path):
    """A mounted 4 MiB :class:`~chatkernel.testing.fakes.disk.SmallDisk` at
    ``tmp_path / "disk"``, unmounted after the test; the test is skipped where no small
    file system can be mounted (not root, not Linux), saying why."""
    from chatkernel.testing.fakes.disk import DiskUnavailable, SmallDisk

    disk = SmallDisk(tmp_path / "disk", size_mb=4)
    try:
        disk.mount()
    except DiskUnavailable as exc:
        pytest.skip(f"no small file system to fill here: {exc}")
    try:
        yield disk
    finally:
        disk.unmount()


class _LateFixtures:
    """Fixtures that must override another plugin's: registered once every installed
    plugin is, since of two plugins' fixtures of one name the later one wins."""

    @pytest.fixture
    def anyio_backend(self):
        """chatkernel runs on asyncio (aiohttp needs it); plugin tests do too (anyio's
        own fixture would also run each test on trio where trio is installed)."""
        return "asyncio"


def pytest_configure(config):
    config.pluginmanager.register(_LateFixtures(), "chatkernel-late-fixtures")
