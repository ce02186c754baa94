"""Several ``chatkernel run`` processes side by side, from an async test or benchmark.

Each instance has a home of its own (the home lock allows one gateway per home) with a
``config.toml`` written from a dict, logs to a file there (a pipe nobody reads would
fill and stall it), and listens on a free port of 127.0.0.1::

    async with GatewayInstances(tmp_path, config) as instances:
        first = await instances.start()
        second = await instances.start()
        first.kill()  # SIGKILL: nothing is given back, its leases run out

The fake platforms run in the test's own event loop, so nothing here blocks it.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import tomlkit
from anyio.abc import Process

from chatkernel.testing.process import CHATKERNEL

__all__ = ["GatewayInstance", "GatewayInstances", "RoundRobin", "holder_pid", "wait_for_owner"]


def holder_pid(holder: str) -> int:
    """The process id in a lease holder's name (``<instance>/<pid>/<random>``, see
    chatkernel.core.runtime.cluster)."""
    return int(holder.split("/")[-2])


async def wait_for_owner(store: Any, lease: str, *, not_held_by: Any = (),
                         timeout: float) -> tuple[str, int]:
    """``(holder, token)`` of ``lease`` (``account:<channel>:<account>``) in ``store``
    (a RedisStore) once a holder not in ``not_held_by`` has it; TimeoutError after
    ``timeout`` seconds."""
    with anyio.fail_after(timeout):
        while True:
            held = (await store.leases()).get(lease)
            if held is not None and held[0] not in not_held_by:
                return held[0], held[1]
            await anyio.sleep(0.05)


@dataclass
class GatewayInstance:
    """One running gateway process."""

    name: str
    home: Path
    process: Process
    url: str = ""
    started_at: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def log_path(self) -> Path:
        return self.home / "gateway.log"

    def log(self) -> str:
        """What the gateway logged so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    def kill(self) -> None:
        """SIGKILL: the process ends at once, giving nothing back."""
        if self.alive:
            self.process.send_signal(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP: the process stops running (its leases run out) but lives on."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    async def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, and wait for it (SIGKILL after ``timeout`` seconds)."""
        if self.alive:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)
        with anyio.move_on_after(timeout):
            return await self.process.wait()
        self.kill()
        return await self.process.wait()


class GatewayInstances:
    """Starts gateway processes sharing one config (each in its own home) and stops
    whatever is left of them at the end."""

    def __init__(self, root: Path, config: dict[str, Any], *,
                 env: dict[str, str] | None = None) -> None:
        self.root = root
        self.config = config
        self.env = env or {}
        self.instances: list[GatewayInstance] = []

    async def __aenter__(self) -> "GatewayInstances":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        with anyio.CancelScope(shield=True):
            for instance in self.instances:
                await instance.stop()

    @property
    def alive(self) -> list[GatewayInstance]:
        return [instance for instance in self.instances if instance.alive]

    def by_pid(self, pid: int) -> GatewayInstance | None:
        return next((i for i in self.instances if i.pid == pid), None)

    def owner(self, holder: str) -> GatewayInstance | None:
        """The instance a lease holder's name names."""
        return self.by_pid(holder_pid(holder))

    async def start(self, *, timeout: float = 30.0,
                    config: dict[str, Any] | None = None) -> GatewayInstance:
        """Start one more instance and return once it listens."""
        name = f"gateway-{len(self.instances) + 1}"
        home = self.root / name
        home.mkdir(parents=True, exist_ok=True)
        settings = config if config is not None else self.config
        (home / "config.toml").write_text(tomlkit.dumps(settings))
        environ = {**os.environ, "CHATKERNEL_HOME": str(home), **self.env}
        environ.pop("CHATKERNEL_CONFIG", None)
        log_file = (home / "gateway.log").open("ab")
        try:
            process = await anyio.open_process(
                [CHATKERNEL, "run", "--listen", "127.0.0.1:0", "--config",
                 str(home / "config.toml")],
                env=environ, stdin=None, stdout=log_file, stderr=log_file)
        finally:
            log_file.close()
        instance = GatewayInstance(name, home, process)
        self.instances.append(instance)
        with anyio.move_on_after(timeout):
            while instance.alive:
                match = re.search(r"listening on (http://\S+)", instance.log())
                if match:
                    instance.url = match[1]
                    return instance
                await anyio.sleep(0.05)
        raise RuntimeError(f"{name} did not start:\n{instance.log()}")


class RoundRobin:
    """An HTTP front on 127.0.0.1 that hands each request to the next of several
    gateways, as a load balancer does for webhooks: ``async with RoundRobin() as lb``,
    then point the platform at ``lb.url`` and set :attr:`backends`. A backend that does
    not answer (killed) is skipped for the next one; with none left the answer is 502.
    """

    def __init__(self) -> None:
        self.backends: list[str] = []
        self.url = ""
        #: Requests forwarded, per backend URL.
        self.forwarded: collections.Counter[str] = collections.Counter()
        self._next = 0
        self._runner: Any = None
        self._http: Any = None

    async def __aenter__(self) -> "RoundRobin":
        import aiohttp
        from aiohttp import web

        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = "http://127.0.0.1:{}".format(self._runner.addresses[0][1])
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._http.close()
        await self._runner.cleanup()

    async def _forward(self, request: Any) -> Any:
        import aiohttp
        from aiohttp import web

        body = await request.read()
        headers = {key: value for key, value in request.headers.items()
                   if key.lower() not in ("host", "content-length", "transfer-encoding")}
        for _ in range(len(self.backends)):
            backend = self.backends[self._next % len(self.backends)]
            self._next += 1
            # The gateways check Host against their listen address, as a proxy would set.
            headers["Host"] = backend.split("://", 1)[1]
            try:
                async with self._http.request(request.method, backend + request.path_qs,
                                              data=body, headers=headers) as answer:
                    payload = await answer.read()
                    self.forwarded[backend] += 1
                    return web.Response(status=answer.status, body=payload,
                                        content_type=answer.content_type)
            except aiohttp.ClientConnectionError:
                continue
        return web.Response(status=502, text="no gateway answered")
