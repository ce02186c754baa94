"""Key parts and script arguments of the Redis store: names that never run into each
other, numbers as exact text."""

from __future__ import annotations


def _part(text: str) -> str:
    """A key part that is not the last one: ``%`` and ``:`` escaped, so parts never run
    into each other (a channel name has neither, and keeps its own text)."""
    if ":" in text or "%" in text:
        return text.replace("%", "%25").replace(":", "%3A")
    return text


def _acct(channel: str, account: str) -> str:
    """The key part of an account: ``<channel>:<account>``."""
    return f"{_part(channel)}:{account}"


def _num(value: float) -> str:
    """A number as exact text for a script (``repr`` keeps every digit of a float)."""
    return repr(float(value))


def _bound(value: float) -> str:
    if value == float("inf"):
        return "+inf"
    if value == float("-inf"):
        return "-inf"
    return _num(value)
