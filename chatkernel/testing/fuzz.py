"""How many examples a property test runs: bounded by default, more under ``deep``.

A fuzz test that starts a kernel for each example costs seconds per hundred examples, so
its default count is what a change's run can afford; ``pytest --hypothesis-profile=deep``
(the profile the kit's pytest plugin registers) runs :data:`DEEP_FACTOR` times as many,
for a change to a parser or a fuzzed path::

    @settings(max_examples=fuzz_examples(60), deadline=None)
    @given(batch=updates)
    def test_any_update_is_read_or_skipped(batch): ...

A test with no ``max_examples`` of its own takes the profile's (hypothesis's 100, or the
deep profile's :data:`DEEP_EXAMPLES`).
"""

from __future__ import annotations

#: The hypothesis profile that runs more examples.
DEEP_PROFILE = "deep"
#: How many times a test's own count the deep profile runs.
DEEP_FACTOR = 10
#: The deep profile's count for a test that names none (hypothesis's default times ten).
DEEP_EXAMPLES = 100 * DEEP_FACTOR


def register_profiles() -> None:
    """Register the ``deep`` profile with hypothesis (the kit's pytest plugin does, at
    start-up, so that ``--hypothesis-profile=deep`` finds it); without hypothesis, nothing."""
    try:
        from hypothesis import settings
    except ImportError:
        return
    settings.register_profile(DEEP_PROFILE, max_examples=DEEP_EXAMPLES)


def fuzz_examples(count: int) -> int:
    """``count`` under the default profile; :data:`DEEP_FACTOR` times it under ``deep``."""
    from hypothesis import settings

    deep = settings.get_current_profile_name() == DEEP_PROFILE
    return count * DEEP_FACTOR if deep else count
