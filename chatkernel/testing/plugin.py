"""pytest fixtures for testing chatkernel and its plugins."""

from __future__ import annotations

import pytest

from chatkernel.testing.redis import redis_prefix, redis_server  # noqa: F401  (fixtures)

# Plain asserts in the contract suite report their values, as in the author's own tests.
pytest.register_assert_rewrite("chatkernel.testing.contract")


@pytest.fixture
def chatkernel_home(tmp_path, monkeypatch):
    """An empty ``CHATKERNEL_HOME`` for the test, with no config file."""
    home = tmp_path / "chatkernel-home"
    home.mkdir()
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
def anyio_backend():
    """chatkernel runs on asyncio (aiohttp needs it); plugin tests do too."""
    return "asyncio"
