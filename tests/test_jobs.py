"""Scheduled jobs on the fake clock (docs/jobs.md): cron across both DST changes, one-shots,
catch-up after a stop or a stall, and each failure of OpenClaw's cron that
shared/PITFALLS.md lists under "Scheduled jobs", reproduced and shown absent."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import anyio
import pytest

from chatkernel.core import config as cfg
from chatkernel.core.store.base import JobPosition
from chatkernel.testing import KernelHarness, ManualClock

pytestmark = pytest.mark.anyio

BERLIN = ZoneInfo("Europe/Berlin")
TARGET = "memory:main:chat-1"


def job(**keys):
    return {"prompt": "the overnight alerts", "deliver_to": [TARGET], **keys}


def berlin(*args) -> float:
    return datetime(*args, tzinfo=BERLIN).timestamp()


def local_times(runs) -> list[str]:
    """The runs' slots as Berlin wall-clock times with their offset, oldest first."""
    return sorted(datetime.fromtimestamp(run.due_at, BERLIN).isoformat() for run in runs)


async def walk(h, clock, until: float) -> None:
    """Advance the clock from one due slot to the next up to ``until``, letting the jobs
    act at each (a slot is met at its time, not late)."""
    while True:
        await h.jobs_settled()
        deadline = h.kernel.jobs.next_deadline()
        if deadline is None or deadline > until:
            clock.set(max(until, clock.now()))
            await h.jobs_settled()
            return
        clock.set(max(deadline, clock.now()))


# -- cron and daylight saving -----------------------------------------------------------------


async def test_a_cron_job_runs_at_its_local_time_when_spring_skips_its_hour(tmp_path):
    clock = ManualClock(berlin(2026, 3, 27, 12, 0))
    config = {"jobs": {"night": job(cron="30 2 * * *", tz="Europe/Berlin"),
                       "morning": job(cron="0 9 * * *", tz="Europe/Berlin")}}
    async with KernelHarness(tmp_path, config=config, heartbeat_clock=clock) as h:
        await walk(h, clock, berlin(2026, 3, 31, 0, 0))
        store = h.kernel.store
        # 02:30 does not exist on the 29th (02:00 -> 03:00): as Debian's cron, at 03:00.
        assert local_times(await store.job_runs("night")) == [
            "2026-03-28T02:30:00+01:00", "2026-03-29T03:00:00+02:00",
            "2026-03-30T02:30:00+02:00"]
        assert local_times(await store.job_runs("morning")) == [
            "2026-03-28T09:00:00+01:00", "2026-03-29T09:00:00+02:00",
            "2026-03-30T09:00:00+02:00"]
        assert len(h.channel.texts("chat-1")) == 6


async def test_a_cron_job_runs_once_when_autumn_repeats_its_hour(tmp_path):
    clock = ManualClock(berlin(2026, 10, 23, 12, 0))
    config = {"jobs": {"night": job(cron="30 2 * * *", tz="Europe/Berlin"),
                       "often": job(cron="*/30 2 * * *", tz="Europe/Berlin")}}
    async with KernelHarness(tmp_path, config=config, heartbeat_clock=clock) as h:
        await walk(h, clock, berlin(2026, 10, 27, 0, 0))
        store = h.kernel.store
        # 02:30 happens twice on the 25th (03:00 -> 02:00): a daily job runs once...
        assert local_times(await store.job_runs("night")) == [
            "2026-10-24T02:30:00+02:00", "2026-10-25T02:30:00+02:00",
            "2026-10-26T02:30:00+01:00"]
        # ...one that runs more often than hourly keeps its pattern through both hours.
        often = local_times(await store.job_runs("often", limit=50))
        assert [t for t in often if t.startswith("2026-10-25")] == [
            "2026-10-25T02:00:00+01:00", "2026-10-25T02:00:00+02:00",
            "2026-10-25T02:30:00+01:00", "2026-10-25T02:30:00+02:00"]
        assert len(often) == 8


async def test_a_one_shot_fires_once(tmp_path):
    clock = ManualClock(berlin(2026, 12, 24, 8, 0))
    config = {"jobs": {"xmas": job(at="2026-12-24T09:00+01:00")}}
    async with KernelHarness(tmp_path, config=config, heartbeat_clock=clock) as h:
        await walk(h, clock, berlin(2026, 12, 24, 8, 59))
        assert h.channel.texts() == []
        await walk(h, clock, berlin(2026, 12, 26, 0, 0))
        assert h.channel.texts() == ["the overnight alerts"]
        assert [run.status for run in await h.kernel.store.job_runs("xmas")] == ["done"]


async def test_nothing_to_report_sends_nothing(tmp_path):
    clock = ManualClock()
    config = {"jobs": {"quiet": {"every": "1h", "prompt": "HEARTBEAT_OK",
                                 "deliver_to": [TARGET]}}}
    async with KernelHarness(tmp_path, config=config, heartbeat_clock=clock) as h:
        await walk(h, clock, clock.now() + 3600)
        assert h.channel.texts() == []
        (run,) = await h.kernel.store.job_runs("quiet")
        assert (run.status, run.outcome) == ("done", "nothing to report")


# -- PITFALLS: Scheduled jobs --------------------------------------------------------------------


async def test_a_restart_does_not_run_a_slot_again(tmp_path):
    """openclaw#42640: the catch-up after a restart ran a job that had run before it."""
    clock = ManualClock()
    config = {"jobs": {"hourly": job(every="1h")}}
    async with KernelHarness(tmp_path, config=config, heartbeat_clock=clock) as h:
        await walk(h, clock, clock.now() + 3600)
        assert len(h.channel.texts()) == 1
        (run,) = await h.kernel.store.job_runs("hourly")
        # A crash between the claim and the position's move: the position is behind.
        store = h.kernel.store
        await store.set_job_position(JobPosition("hourly", "changed", run.due_at - 3600))
        await store.set_job_position(JobPosition(
            "hourly", h.kernel.jobs.book.jobs["hourly"].spec_hash, run.due_at - 3600))
    async with KernelHarness(tmp_path, config=config, heartbeat_clock=clock) as h:
        await h.jobs_settled()
        assert h.channel.texts() == []  # the slot's claim is in the store: not again
        assert len(await h.kernel.store.job_runs("hourly")) == 1
        await walk(h, clock, clock.now() + 3600)
        assert len(h.channel.texts()) == 1  # the next slot, once


async def test_two_timers_on_one_slot_run_it_once(tmp_path):
    """openclaw#1100, #16094: the same job fired twice seconds apart."""
    clock = ManualClock()
    config = {"jobs": {"hourly": job(every="1h")}}
    async with KernelHarness(tmp_path, config=config, heartbeat_clock=clock) as h:
        await h.jobs_settled()
        scheduler = h.kernel.jobs
        scheduler.book.jobs["hourly"].cursor -= 1  # a second timer's stale view
        clock.set(clock.now() + 3600)
        async with anyio.create_task_group() as tg:  # besides the scheduler's own loop
            tg.start_soon(scheduler.tick)
            tg.start_soon(scheduler.tick)
        await h.jobs_settled()
        assert len(await h.kernel.store.job_runs("hourly")) == 1
        assert len(h.channel.texts()) == 1


async def test_two_gateways_on_one_redis_run_a_slot_once(tmp_path, redis_server, redis_prefix):
    """The same, across processes: each runs the scheduler, the slot's claim decides."""
    clock = ManualClock()
    config = {"store": {"backend": "redis", "url": redis_server, "prefix": redis_prefix,
                        "lease_seconds": 30},
              "jobs": {"often": {"every": "1m", "prompt": "tick"}}}
    async with KernelHarness(tmp_path / "a", config=config, heartbeat_clock=clock) as a, \
            KernelHarness(tmp_path / "b", config=config, heartbeat_clock=clock) as b:
        for _ in range(10):
            clock.advance(60)
            await a.jobs_settled()
            await b.jobs_settled()
        runs = await a.kernel.store.job_runs("often", limit=100)
        slots = [run.due_at for run in runs]
        assert len(slots) == len(set(slots)) == 10
        assert {run.status for run in runs} == {"done"}


async def test_an_edited_schedule_fires_no_old_slot(tmp_path):
    """openclaw#71603: an edited job kept firing on its old expression."""
    clock = ManualClock(berlin(2026, 5, 4, 8, 0))
    config = {"jobs": {"daily": job(cron="0 9 * * *", tz="Europe/Berlin")}}
    async with KernelHarness(tmp_path, config=config, heartbeat_clock=clock) as h:
        await h.jobs_settled()
        edited = cfg.parse(h.config_data(
            {"jobs": {"daily": job(cron="0 10 * * *", tz="Europe/Berlin")}}),
            strict_env=False)
        await h.kernel.reload(edited)
        await walk(h, clock, berlin(2026, 5, 4, 9, 30))
        assert h.channel.texts() == []  # 09:00 was the old schedule's
        await walk(h, clock, berlin(2026, 5, 4, 10, 30))
        assert local_times(await h.kernel.store.job_runs("daily")) == [
            "2026-05-04T10:00:00+02:00"]


async def test_re_adding_a_job_replaces_it(tmp_path):
    """openclaw#86451: an update re-created jobs without dedupe (28 became 74)."""
    clock = ManualClock()
    async with KernelHarness(tmp_path, heartbeat_clock=clock) as h:
        scheduler = h.kernel.jobs
        for prompt in ("first", "second", "third"):
            await scheduler.add("digest", {"every": "1h", "prompt": prompt,
                                           "deliver_to": [TARGET]})
        assert [d.name for d in await h.kernel.store.list_jobs()] == ["digest"]
        await walk(h, clock, clock.now() + 3600)
        assert h.channel.texts() == ["third"]
    async with KernelHarness(tmp_path, heartbeat_clock=clock) as h:  # and after a restart
        await h.jobs_settled()
        assert list(h.kernel.jobs.book.jobs) == ["digest"]


async def test_a_run_is_delivered_once_to_each_target(tmp_path):
    """openclaw#27921: a result delivered twice, by the job and by the agent forwarding it."""
    clock = ManualClock()
    config = {"jobs": {"both": job(every="1h", session="target",
                                   deliver_to=[TARGET, "memory:main:chat-2"])}}
    async with KernelHarness(tmp_path, config=config, heartbeat_clock=clock) as h:
        await walk(h, clock, clock.now() + 3600)
        assert h.channel.texts("chat-1") == ["the overnight alerts"]
        assert h.channel.texts("chat-2") == ["the overnight alerts"]
        assert len(h.channel.sent) == 2
        # The turn ran in the first target's session; each chat logged its one answer.
        log = await h.session_log("memory:main:chat-1")
        assert [entry.role for entry in log] == ["job", "assistant"]


async def test_a_stalled_loop_runs_its_late_slot_once(tmp_path):
    """openclaw#2826: a job that never fired while the loop stalled, then 20 copies."""
    clock = ManualClock()
    config = {"jobs": {"minutely": job(every="1m")}}
    async with KernelHarness(tmp_path, config=config, heartbeat_clock=clock) as h:
        await h.jobs_settled()
        clock.set(clock.now() + 20 * 60 + 5)  # the loop wakes twenty minutes late
        await h.jobs_settled()
        assert len(h.channel.texts()) == 1
        (run,) = await h.kernel.store.job_runs("minutely")
        assert run.status == "done"


@pytest.mark.parametrize("catch_up,sent", [("once", 1), ("skip", 0)])
async def test_a_slot_missed_while_stopped_runs_once_or_is_skipped(tmp_path, catch_up, sent):
    clock = ManualClock()
    config = {"jobs": {"hourly": job(every="1h", catch_up=catch_up)}}
    async with KernelHarness(tmp_path, config=config, heartbeat_clock=clock) as h:
        await h.jobs_settled()
    clock.advance(5 * 3600 + 60)  # down for five slots
    async with KernelHarness(tmp_path, config=config, heartbeat_clock=clock) as h:
        await h.jobs_settled()
        assert len(h.channel.texts()) == sent
        runs = await h.kernel.store.job_runs("hourly")
        assert [run.status for run in runs] == ["done" if sent else "skipped"]
    async with KernelHarness(tmp_path, config=config, heartbeat_clock=clock) as h:
        await h.jobs_settled()  # and a second restart changes nothing
        assert h.channel.texts() == []


async def test_a_slot_outside_active_hours_is_skipped(tmp_path):
    clock = ManualClock(berlin(2026, 5, 4, 5, 30))
    config = {"jobs": {"h": job(every="1h", active_hours={
        "start": "07:00", "end": "22:00", "timezone": "Europe/Berlin"})}}
    async with KernelHarness(tmp_path, config=config, heartbeat_clock=clock) as h:
        await walk(h, clock, berlin(2026, 5, 4, 7, 45))
        statuses = [run.status for run in await h.kernel.store.job_runs("h")]
        assert statuses == ["done", "skipped"]  # 07:30 ran, 06:30 was outside


# -- reminders ------------------------------------------------------------------------------------


async def test_remind_sets_lists_cancels_and_fires_once(tmp_path):
    clock = ManualClock()
    async with KernelHarness(tmp_path, heartbeat_clock=clock) as h:
        await h.channel.receive("/remind 20m check the oven")
        await h.channel.receive("/remind 1h call mum")
        await h.settle()
        set_oven, set_mum = h.channel.texts()
        assert set_oven.startswith("Reminder ") and "in 20m, check the oven" in set_oven
        mum_id = set_mum.split()[1]
        await h.channel.receive("/remind list")
        await h.channel.receive(f"/remind cancel {mum_id}")
        await h.settle()
        listing, cancelled = h.channel.texts()[2:]
        assert "check the oven" in listing and "call mum" in listing
        assert cancelled == "Reminder cancelled."
        await walk(h, clock, clock.now() + 2 * 3600)
        assert h.channel.texts()[4:] == ["Reminder: check the oven"]
        assert await h.kernel.store.list_jobs() == []  # done: gone


async def test_a_chat_cannot_fill_the_store_with_reminders(tmp_path, monkeypatch):
    from chatkernel.core.jobs import scheduler

    monkeypatch.setattr(scheduler, "MAX_REMINDERS", 2)
    async with KernelHarness(tmp_path, heartbeat_clock=ManualClock()) as h:
        for _ in range(3):
            await h.channel.receive("/remind 1h stretch")
        await h.channel.receive("/remind 1h elsewhere", chat_id="chat-2")
        await h.settle()
        replies = h.channel.texts("chat-1")
        assert [r.startswith("Reminder ") for r in replies] == [True, True, False]
        assert "this chat has 2 reminders waiting" in replies[2]
        assert h.channel.texts("chat-2")[0].startswith("Reminder ")  # its own cap


# -- config errors ------------------------------------------------------------------------------


@pytest.mark.parametrize("table,key,words", [
    (job(cron="61 * * * *"), "jobs.j.cron", "not a cron expression"),
    (job(cron="0 9 * * *", tz="Mars/Olympus"), "jobs.j.tz", "unknown time zone"),
    (job(every="1h", deliver_to=["nochannel:main:1"]), "jobs.j.deliver_to[0]",
     "no installed plugin provides a channel named 'nochannel'"),
    (job(every="1h", deliver_to=["memory:other:1"]), "jobs.j.deliver_to[0]",
     "channel 'memory' has no account 'other'"),
    (job(every="1h", at="2026-01-01T00:00+00:00"), "jobs.j", "one schedule"),
    (job(at="2026-01-01T00:00"), "jobs.j.at", "has no offset"),
])
async def test_a_bad_job_is_refused_naming_the_key(tmp_path, table, key, words):
    with pytest.raises(cfg.ConfigError) as caught:
        async with KernelHarness(tmp_path, config={"jobs": {"j": table}}):
            pass
    assert caught.value.key == key and words in caught.value.message
