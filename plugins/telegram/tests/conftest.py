"""chatkernel-telegram's tests: each gets a CHATKERNEL_HOME of its own (the kit's fixture)."""

import sys
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_home(chatkernel_home):
    """Nothing a test runs may touch ~/.chatkernel."""
    return chatkernel_home


@pytest.fixture
def anyio_backend():
    """chatkernel runs on asyncio (aiohttp needs it)."""
    return "asyncio"


# The contract's adapter (telegram_adapters.py) is shared by several test modules.
sys.path.insert(0, str(Path(__file__).parent))
