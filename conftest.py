"""The whole suite's (tests/ and plugins/): the guard naming tests over a few seconds that
are not marked slow (chatkernel.testing.slowtests; docs/testing.md)."""

from chatkernel.testing import slowtests


def pytest_configure(config):
    slowtests.register(config)
