"""What ``chatkernel jobs``, ``chatkernel triggers`` and ``chatkernel status`` ask of the
jobs: answered over ``/control/jobs/*`` by the running gateway, or by a kernel of the
command's own when none runs (which schedules nothing: it runs a job only when asked).
Each action takes the request's JSON object and returns one; a request that cannot be
done raises :class:`~chatkernel.core.runtime.control.ControlError`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from chatkernel.core.config import KernelConfig
from chatkernel.core.jobs.book import JobError
from chatkernel.core.jobs.scheduler import TRIGGER_PREFIX, JobScheduler
from chatkernel.core.jobs.triggers import TriggerRefused, fill_prompt
from chatkernel.core.runtime.control import ControlError, strings
from chatkernel.core.store.base import Store

#: How long ``jobs run`` and ``triggers test`` wait for the run's end, at most.
RUN_WAIT_SECONDS = 300.0


class JobsControl:
    """The jobs' side of the control API."""

    def __init__(self, *, scheduler: Callable[[], JobScheduler],
                 config: Callable[[], KernelConfig], store: Callable[[], Store]) -> None:
        self._scheduler = scheduler
        self._config = config
        self._store = store

    def _name(self, body: dict[str, Any]) -> str:
        name = strings(body, "name")["name"]
        if not name:
            raise ControlError("give the job's name")
        return name

    async def list(self, body: dict[str, Any]) -> dict[str, Any]:
        scheduler = self._scheduler()
        now = scheduler.clock.now()
        jobs = [scheduler.describe(job) for job in scheduler.book.jobs.values()]
        for item in jobs:
            runs = await self._store().job_runs(item["name"], limit=1)
            item["last_run"] = runs[0].describe() if runs else None
        jobs.sort(key=lambda item: item["name"])
        return {"jobs": jobs, "now": now, "scheduled": scheduler.started}

    async def show(self, body: dict[str, Any]) -> dict[str, Any]:
        name = self._name(body)
        job = self._scheduler().book.jobs.get(name)
        if job is None:
            raise ControlError(f"no job {name!r} (chatkernel jobs list shows them)", 404)
        runs = await self._store().job_runs(name, limit=5)
        return {"job": self._scheduler().describe(job), "runs": [r.describe() for r in runs]}

    async def add(self, body: dict[str, Any]) -> dict[str, Any]:
        name = self._name(body)
        spec = body.get("spec")
        if not isinstance(spec, dict):
            raise ControlError("give the job's keys as an object: spec")
        try:
            job = await self._scheduler().add(name, spec)
        except JobError as exc:
            raise ControlError(str(exc)) from None
        return {"job": self._scheduler().describe(job)}

    async def remove(self, body: dict[str, Any]) -> dict[str, Any]:
        name = self._name(body)
        try:
            removed = await self._scheduler().remove(name)
        except JobError as exc:
            raise ControlError(str(exc)) from None
        if not removed:
            raise ControlError(f"no job {name!r} added at run time", 404)
        return {"removed": name}

    async def run(self, body: dict[str, Any]) -> dict[str, Any]:
        name = self._name(body)
        scheduler = self._scheduler()
        try:
            run = await scheduler.run_now(name)
        except JobError as exc:
            raise ControlError(str(exc), 404) from None
        run = await scheduler.wait_for(run, RUN_WAIT_SECONDS)
        return {"run": run.describe()}

    async def history(self, body: dict[str, Any]) -> dict[str, Any]:
        name = self._name(body)
        limit = body.get("limit", 20)
        if not isinstance(limit, int) or isinstance(limit, bool) or not 0 < limit <= 1000:
            raise ControlError("limit must be a whole number from 1 to 1000")
        runs = await self._store().job_runs(name, limit=limit)  # trigger:<name>: a trigger's
        return {"name": name, "runs": [run.describe() for run in runs]}

    async def status(self, body: dict[str, Any]) -> dict[str, Any]:
        """The next runs (soonest first) and the last failures, for ``chatkernel status``."""
        listed = await self.list(body)
        upcoming = sorted((item for item in listed["jobs"] if item["next_at"] is not None),
                          key=lambda item: item["next_at"])
        failures = await self._store().failed_job_runs(limit=5)
        return {"next": [{"name": item["name"], "next_at": item["next_at"],
                          "next_in_seconds": item["next_in_seconds"]}
                         for item in upcoming[:5]],
                "failures": [run.describe() for run in failures], "now": listed["now"],
                "scheduled": listed["scheduled"]}

    # -- triggers --------------------------------------------------------------------------

    async def triggers(self, body: dict[str, Any]) -> dict[str, Any]:
        found = []
        for name, table in sorted(self._config().triggers.items()):
            runs = await self._store().job_runs(TRIGGER_PREFIX + name, limit=1)
            found.append({"name": name, "path": f"/hooks/{name}",
                          "credential": "secret" if table.secret else "token",
                          "agent": table.agent, "deliver_to": list(table.deliver_to),
                          "last_run": runs[0].describe() if runs else None})
        return {"triggers": found}

    async def test_trigger(self, body: dict[str, Any]) -> dict[str, Any]:
        """Run a trigger as a request with ``body`` (JSON text) would, past its credential
        (the control token vouches for the caller), and wait for the run's end."""
        fields = strings(body, "name", "body")
        name = fields["name"] or ""
        settings = self._config().triggers.get(name)
        if settings is None:
            known = ", ".join(sorted(self._config().triggers)) or "none"
            raise ControlError(f"no trigger {name!r} (triggers: {known})", 404)
        try:
            prompt = fill_prompt(settings.prompt, (fields["body"] or "{}").encode())
        except TriggerRefused as exc:
            raise ControlError(str(exc), exc.status) from None
        scheduler = self._scheduler()
        run = await scheduler.submit(name, prompt)
        assert run is not None  # a slot of its own
        with anyio.move_on_after(RUN_WAIT_SECONDS):
            while True:
                current = await self._store().job_run(run.run_id)
                if current is not None and current.finished:
                    return {"run": current.describe()}
                await anyio.sleep(0.05)
        current = await self._store().job_run(run.run_id)
        return {"run": (current or run).describe()}
