"""pytest fixtures for testing chatkernel and its plugins."""

from __future__ import annotations

import pytest


@pytest.fixture
def chatkernel_home(tmp_path, monkeypatch):
    """An empty ``CHATKERNEL_HOME`` for the test, with no config file."""
    home = tmp_path / "chatkernel-home"
    home.mkdir()
    monkeypatch.setenv("CHATKERNEL_HOME", str(home))
    monkeypatch.delenv("CHATKERNEL_CONFIG", raising=False)
    return home
