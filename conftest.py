"""The whole suite's (tests/ and plugins/): the guard naming tests over a few seconds that
are not marked slow (chatkernel.testing.slowtests; docs/testing.md), and the root logger
put back after each test."""

import logging

import pytest

from chatkernel.testing import slowtests


def pytest_configure(config):
    slowtests.register(config)


@pytest.fixture(autouse=True)
def _root_logger_put_back():
    """A command run in the test's process (``CliRunner``) sets the process's logging up
    as a command does (chatkernel.core.logs.configure: a stderr handler with the secret
    filter, the root at ``error``). Left behind, it would decide what the next tests'
    ``caplog`` sees: their outcome would hang on the order tests run in."""
    from chatkernel.core.logs import secret_filter

    root = logging.getLogger()
    level, access = root.level, logging.getLogger("aiohttp.access").level
    yield
    for handler in list(root.handlers):
        if secret_filter in handler.filters:
            root.removeHandler(handler)
    root.setLevel(level)
    logging.getLogger("aiohttp.access").setLevel(access)
