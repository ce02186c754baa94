"""The gateway's routes for jobs and triggers (docs/jobs.md).

* ``POST /hooks/<name>``: a trigger's request. Refused with a 4xx saying why, and nothing
  run, when the trigger is unknown (404), the body is over its cap (413), the credential
  is missing, wrong or stale (401/403), the trigger is over its rate (429), the body is
  not a JSON object or lacks a field the prompt needs (400, naming them), or the request
  was taken before (409: a replay). Otherwise its run is journaled, then answered 202
  with the run's id, and runs behind.
* ``GET /hooks/<name>/runs/<id>``: how that run went, with the same credential (a signed
  GET signs an empty body).
* ``POST /control/jobs/*`` and ``/control/triggers/*``: what the CLI asks (control token).

A body is never logged: a request is logged by its trigger, size and run id.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from chatkernel.core.jobs.scheduler import TRIGGER_PREFIX
from chatkernel.core.jobs.triggers import (
    RateLimits,
    TriggerRefused,
    fill_prompt,
    replay_key,
    verify,
)
from chatkernel.sdk.errors import StoreError

if TYPE_CHECKING:
    from chatkernel.core.config import KernelConfig
    from chatkernel.core.jobs.control import JobsControl
    from chatkernel.core.jobs.scheduler import JobScheduler

log = logging.getLogger("chatkernel.triggers")

#: The route paths exempt from the Host and content-type checks, as a platform's webhook
#: is: callers are other systems, and the credential is the check.
HOOK_PATHS = ("/hooks/{name}", "/hooks/{name}/runs/{run_id}")


def _refusal(name: str, exc: TriggerRefused) -> web.Response:
    log.warning("trigger %s: request refused (%d): %s", name, exc.status, exc)
    headers = {} if exc.retry_after is None else {"Retry-After": f"{exc.retry_after:.0f}"}
    return web.json_response({"error": str(exc)}, status=exc.status, headers=headers)


async def _read_capped(request: web.Request, cap: int) -> bytes:
    length = request.content_length
    if length is not None and length > cap:
        raise TriggerRefused(413, f"the body is over {cap} bytes")
    parts, size = [], 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > cap:
            raise TriggerRefused(413, f"the body is over {cap} bytes")
        parts.append(chunk)
    return b"".join(parts)


def hook_routes(scheduler: Callable[[], "JobScheduler"],
                config: Callable[[], "KernelConfig"],
                clock: Callable[[], float] = time.time) -> list[tuple[str, str, Any]]:
    """``/hooks/<name>`` and its runs (``clock``: the signatures' time)."""
    limits = RateLimits()

    def settings_of(name: str) -> Any:
        settings = config().triggers.get(name)
        if settings is None:
            raise TriggerRefused(404, f"no trigger {name!r}")
        return settings

    async def take(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        try:
            settings = settings_of(name)
            body = await _read_capped(request, settings.max_body_bytes)
            verify(settings, request.headers, body, clock)
            limits.take(name, settings.per_minute)
            prompt = fill_prompt(settings.prompt, body)
            run = await scheduler().submit(name, prompt, replay_key(settings,
                                                                    request.headers))
            if run is None:
                raise TriggerRefused(409, "this request was taken before (a replay): "
                                          "sign each request anew")
        except TriggerRefused as exc:
            return _refusal(name, exc)
        except StoreError as exc:  # not journaled: the caller sends it again later
            log.warning("trigger %s: the request could not be journaled: %s", name, exc)
            return web.json_response({"error": "the gateway cannot journal the request "
                                               "now: try again"}, status=503,
                                     headers={"Retry-After": "5"})
        log.info("trigger %s: request of %d bytes taken as run %s", name, len(body),
                 run.run_id)
        return web.json_response({"run_id": run.run_id, "status": "queued",
                                  "status_url": f"/hooks/{name}/runs/{run.run_id}"},
                                 status=202)

    async def status(request: web.Request) -> web.Response:
        name, run_id = request.match_info["name"], request.match_info["run_id"]
        try:
            settings = settings_of(name)
            verify(settings, request.headers, b"", clock)
        except TriggerRefused as exc:
            return _refusal(name, exc)
        run = await scheduler().run_of(run_id)
        if run is None or run.job != TRIGGER_PREFIX + name:
            return web.json_response({"error": f"no run {run_id!r} of trigger {name!r}"},
                                     status=404)
        return web.json_response(run.describe())

    return [("POST", HOOK_PATHS[0], take), ("GET", HOOK_PATHS[1], status)]


def control_routes(jobs: "JobsControl", token: str) -> list[tuple[str, str, Any]]:
    """The CLI's ``/control/jobs/*`` and ``/control/triggers/*`` (the control token)."""
    from chatkernel.core.gateway.control import MAX_BODY_BYTES
    from chatkernel.core.gateway.endpoints import bearer_ok
    from chatkernel.core.gateway.http_guard import RequestError, read_json_object
    from chatkernel.core.runtime.control import ControlError

    def handler(action: Callable[[dict[str, Any]], Any]) -> Any:
        async def handle(request: web.Request) -> web.Response:
            if not bearer_ok(request, token):
                return web.json_response({"error": "missing or wrong control token"},
                                         status=401)
            try:
                body = (await read_json_object(request, limit=MAX_BODY_BYTES)
                        if request.can_read_body else {})
                return web.json_response(await action(body))
            except RequestError as exc:
                return web.json_response({"error": str(exc)}, status=exc.status)
            except ControlError as exc:
                return web.json_response({"error": str(exc)}, status=exc.status)
        return handle

    actions = {"jobs/list": jobs.list, "jobs/show": jobs.show, "jobs/add": jobs.add,
               "jobs/remove": jobs.remove, "jobs/run": jobs.run, "jobs/history": jobs.history,
               "jobs/status": jobs.status, "triggers/list": jobs.triggers,
               "triggers/test": jobs.test_trigger}
    return [("POST", f"/control/{path}", handler(action)) for path, action in actions.items()]
