"""The did-you-mean of a config error: the schema, its validation and the start-up
checks all word an unknown name with it, so it sits below them."""

from __future__ import annotations

import difflib
from typing import Any


def closest(name: str, known: Any) -> str | None:
    """The one of ``known`` closest to ``name``, or None when none is close."""
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return close[0] if close else None


def did_you_mean(name: str, known: Any) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known``, or an empty string."""
    close = closest(name, known)
    return f" (did you mean {close!r}?)" if close else ""
