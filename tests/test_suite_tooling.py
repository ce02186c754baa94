"""How the suite runs (docs/testing.md, "Running this repository's suite"): in parallel with
fixtures that keep the workers apart, a guard naming slow tests not marked slow, and
property tests whose example count the ``deep`` profile raises."""

from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]
# Each test runs pytest itself as a process (a second or more each).
pytestmark = pytest.mark.slow

GUARD_CONFTEST = """
import pytest
from chatkernel.testing import slowtests


def pytest_configure(config):
    slowtests.register(config)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if "took_long" in item.name and report.when == "call":
        report.duration = 4.0  # what a test over the bound reports, without waiting 4 s
    return report
"""

GUARDED_TESTS = """
import pytest


def test_took_long_unmarked():
    pass


@pytest.mark.slow
def test_took_long_marked():
    pass


def test_quick():
    pass
"""


@pytest.fixture
def marked_project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nmarkers =\n    slow: takes seconds\n")
    return pytester


@pytest.mark.parametrize("workers", [
    pytest.param(["-n", "2"], id="parallel"), pytest.param(["-p", "no:xdist"], id="serial")])
def test_a_test_over_the_bound_not_marked_slow_is_named_after_the_run(marked_project,
                                                                       workers):
    marked_project.makeconftest(GUARD_CONFTEST)
    marked_project.makepyfile(test_guarded=GUARDED_TESTS)
    result = marked_project.runpytest_subprocess(*workers, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    section = result.stdout.str().split("tests over 3 s not marked slow", 1)
    assert len(section) == 2, result.stdout.str()
    named = [line.split() for line in section[1].splitlines() if "test_guarded.py::" in line]
    assert [name for _, name in named] == ["test_guarded.py::test_took_long_unmarked"]
    assert float(named[0][0].removesuffix("s")) >= 4.0  # its call, plus setup and teardown


def test_no_section_when_every_long_test_is_marked(marked_project):
    marked_project.makeconftest(GUARD_CONFTEST)
    marked_project.makepyfile(test_guarded=GUARDED_TESTS.replace(
        "def test_took_long_unmarked", "@pytest.mark.slow\ndef test_took_long_unmarked"))
    result = marked_project.runpytest_subprocess("-p", "no:xdist", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    assert "not marked slow" not in result.stdout.str()


def test_parallel_workers_have_their_own_redis_homes_and_prefixes(pytester, tmp_path):
    """Four tests on two workers: each worker runs its own redis-server, every test its own
    CHATKERNEL_HOME and key prefix."""
    out = tmp_path / "seen"
    out.mkdir()
    pytester.makepyfile(test_fixtures=f"""
import json, os
import pytest


@pytest.mark.parametrize("n", range(4))
def test_record(n, redis_server, redis_prefix, chatkernel_home):
    worker = os.environ["PYTEST_XDIST_WORKER"]
    (chatkernel_home / "mine").write_text(str(n))  # a home nobody else writes in
    with open({str(out)!r} + f"/{{worker}}-{{n}}.json", "w") as file:
        json.dump({{"worker": worker, "redis": redis_server, "prefix": redis_prefix,
                   "home": str(chatkernel_home)}}, file)
""")
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "each", "-p",
                                           "no:cacheprovider")
    result.assert_outcomes(passed=8)  # --dist each: every test on both workers
    seen = [json.loads(path.read_text()) for path in out.glob("*.json")]
    by_worker: dict[str, set[str]] = {}
    for record in seen:
        by_worker.setdefault(record["worker"], set()).add(record["redis"])
    assert len(by_worker) == 2 and all(len(urls) == 1 for urls in by_worker.values())
    first, second = by_worker.values()
    assert first != second  # a redis-server per worker, on ports of its own
    assert len({record["home"] for record in seen}) == len(seen) == 8
    assert len({record["prefix"] for record in seen}) == 8


@pytest.mark.parametrize(("profile", "examples"), [([], 6), (["--hypothesis-profile=deep"], 60)],
                         ids=["default", "deep"])
def test_the_deep_profile_runs_ten_times_the_examples(pytester, profile, examples):
    pytester.makepyfile(test_prop="""
from hypothesis import given, settings, strategies as st
from chatkernel.testing import fuzz_examples

RUN = []


@settings(max_examples=fuzz_examples(6), database=None)
@given(st.integers())
def test_counted(n):
    RUN.append(n)


def test_zz_count():
    print(f"EXAMPLES={len(RUN)}")
""")
    result = pytester.runpytest_subprocess("-p", "no:xdist", "-p", "no:cacheprovider", "-s",
                                           *profile)
    result.assert_outcomes(passed=2)
    assert f"EXAMPLES={examples}" in result.stdout.str()
