"""The did-you-mean of a config error: the schema, its validation and the start-up
checks all word an unknown name with it, so it sits below them."""

from __future__ import annotations

import difflib
from typing import Any


def did_you_mean(name: str, known: Any) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known``, or an empty string."""
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
