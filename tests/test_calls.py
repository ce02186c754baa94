"""Health follows the account's calls as they go: a call that hangs turns it red within
seconds, and a call that works again turns it green at once, whatever failed before."""

from __future__ import annotations

from chatkernel.sdk.calls import HUNG_AFTER_SECONDS, Calls
from chatkernel.core.health.snapshot import account_problems
from chatkernel.sdk.models import AccountRuntime, ProbeResult
from chatkernel.testing.clock import ManualClock


def runtime_on(clock: ManualClock) -> AccountRuntime:
    runtime = AccountRuntime(calls=Calls(clock.now))
    runtime.set_state("running", clock.now())
    return runtime


def test_a_call_out_past_its_patience_with_nothing_answered_since_is_a_hang():
    clock = ManualClock()
    runtime = runtime_on(clock)
    calls = runtime.calls
    calls.succeeded()
    send = calls.begin("a send")
    clock.advance(HUNG_AFTER_SECONDS - 1)
    assert calls.hanging() is None and account_problems("running", runtime, None,
                                                        clock.now()) == []
    clock.advance(2)
    hang = calls.hanging()
    assert hang is not None and hang.what == "a send"
    assert account_problems("running", runtime, None, clock.now()) == [
        "platform hangs: no answer from the platform for 6s (a send)"]
    # Another call works (a poll answered): the platform answers, nothing hangs.
    calls.succeeded()
    assert calls.hanging() is None
    clock.advance(30)
    assert calls.hanging() is None  # it left before that success
    calls.end(send, True)
    assert calls.outstanding == 0


def test_a_file_has_more_patience_and_a_cancelled_call_says_nothing():
    clock = ManualClock()
    calls = Calls(clock.now)
    upload = calls.begin("a send", patience=60)
    clock.advance(30)
    assert calls.hanging() is None
    clock.advance(31)
    assert calls.hanging() is not None
    calls.end(upload, None)
    assert calls.hanging() is None and calls.last_ok_at is None and calls.last_failed_at is None


def test_a_failed_probe_and_an_unreachable_poll_end_with_the_next_call_that_works():
    clock = ManualClock()
    runtime = runtime_on(clock)
    runtime.record_probe(ProbeResult(ok=False, detail="no answer within 10 s"), clock.now())
    runtime.set_problem("poll failed: no answer within 45s", clock.now(), unreachable=True)
    assert account_problems("running", runtime, runtime.last_probe, clock.now()) == [
        "receiving: poll failed: no answer within 45s",
        "probe failed: no answer within 10 s"]
    clock.advance(1)
    runtime.calls.succeeded()  # a send went out: the platform answers again
    assert runtime.probe_superseded and runtime.problem_superseded
    assert account_problems("running", runtime, runtime.last_probe, clock.now()) == []
    # A poll that fails again later counts again.
    clock.advance(1)
    runtime.set_problem("poll failed: no answer within 45s", clock.now(), unreachable=True)
    assert not runtime.problem_superseded


def test_what_a_call_that_works_cannot_end_still_counts():
    clock = ManualClock()
    runtime = runtime_on(clock)
    # Another instance polls the token: sends work, receiving does not.
    problem = "another instance polls this token"
    runtime.set_problem(problem, clock.now(), restartable=False)
    runtime.record_probe(ProbeResult(ok=False, detail=problem, restartable=False),
                         clock.now())
    clock.advance(1)
    runtime.calls.succeeded()
    assert not runtime.probe_superseded and not runtime.problem_superseded
    assert account_problems("running", runtime, runtime.last_probe, clock.now()) == [
        f"probe failed: {problem}"]
