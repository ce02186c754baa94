"""Serve a fake platform from the command line: a plugin's dev server in a few lines.

A dev server lets a person try a channel offline: the fake platform on 127.0.0.1,
``chatkernel run`` pointed at it, and the fake's developer routes
(:meth:`~chatkernel.testing.fake_platform.FakePlatform.developer_routes`, ``/_fake/*``,
which the real platform does not have) to write as a user and read what the bot sent.
The fake owns those routes (built with this module's helpers), what the first line
tells and the config snippet::

    from chatkernel.testing.devserver import fields, json_body, listing

    class MyChatPlatform(FakePlatform):
        def developer_routes(self):
            async def messages(request):
                body = fields(await json_body(request), {"chat_id": str, "text": str},
                              required=("chat_id", "text"))
                return web.json_response(self.inject(body["chat_id"], body["text"]))

            async def sent(request):
                sent = await listing(request, self, lambda: self.sent_messages)
                return web.json_response({"messages": [vars(m) for m in sent]})

            return [web.post("/_fake/messages", messages), web.get("/_fake/sent", sent)]

        def developer_info(self):  # the first line's JSON
            return {**super().developer_info(), "token": self.token}

        def config_snippet(self):  # on stderr: an account pointed at the fake
            return f'[channels.mychat.accounts.main]\\napi_base = "{self.base_url}"'

and the plugin's ``devserver.py`` is a declaration::

    server = DevServer(
        prog="python -m chatkernel_mychat.devserver", port=8090,
        platform=lambda args: MyChatPlatform(token=args.token),
        options={"--token": {"default": "dev-token"}})
    main = server.main

What every dev server then does alike:

- ``--port N`` (the plugin's default; ``0`` picks a free port), ``--latency SECONDS``
  (added to every API call the fake serves, as real round trips); the plugin's options.
- Its **first line on stdout is JSON** (the fake's ``developer_info()``), printed only
  once the server listens: a script or a test reads it to know the URL and the tokens.
  Nothing else goes to stdout. The config snippet (the fake's ``config_snippet()``) and
  any log go to stderr.
- ``GET /_fake/ready`` answers the same JSON, so a shell can wait for the server
  (``curl --retry-connrefused``). With ``?pid=N`` (the shell's ``$!``) it answers
  409 unless it is that process (or a process that one started): a shell whose dev
  server could not listen, because another process has the port, is told so by the
  process that has it, rather than carrying on against it (``curl --fail``).
- ``?wait=SECONDS`` on a developer route that uses :func:`wait_until` (or
  :func:`listing`) holds the answer until there is something to show (at most that
  long, at most :data:`MAX_WAIT`); ``?after=N`` on a :func:`listing` route leaves out
  the first N records.
- What the fake tells through its ``narrate`` (what the bot sent, what was refused)
  goes to stderr, a line each.
- A port already taken is one line on stderr and exit status 1, never a traceback.
- SIGINT and SIGTERM stop it cleanly (the fake's long polls are answered, its
  background work cancelled), with exit status 0.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import signal
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO, TypeVar

import anyio
from aiohttp import web

from chatkernel.testing.fake_platform import FakePlatform

T = TypeVar("T")

#: The longest ``?wait=`` a developer route honours, in seconds.
MAX_WAIT = 60.0

Routes = Callable[[Any], list[web.RouteDef]]
#: A plugin's own options: a function adding them to the parser, or option name →
#: :meth:`argparse.ArgumentParser.add_argument` keywords.
Options = Callable[[argparse.ArgumentParser], Any] | Mapping[str, Mapping[str, Any]]


def bad_request(reason: str) -> web.HTTPBadRequest:
    """A 400 whose JSON body is ``{"error": reason}``, to raise from a developer route."""
    return web.HTTPBadRequest(text=json.dumps({"error": reason}),
                              content_type="application/json")


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object, or :func:`bad_request` naming what is wrong with it."""
    try:
        body = await request.json()
    except ValueError:
        raise bad_request("the body must be JSON") from None
    if not isinstance(body, dict):
        raise bad_request("the body must be a JSON object")
    return body


def fields(body: dict[str, Any], kinds: dict[str, type], *,
           required: Iterable[str] = ()) -> dict[str, Any]:
    """``body`` checked against ``kinds`` (field name → type): every required field
    present, no unknown field, each value of its type (``true`` is not a number).
    Returns ``body``; raises :func:`bad_request` naming the first wrong field."""
    for name in required:
        if name not in body:
            raise bad_request(f"{name} is required (fields: {', '.join(kinds)})")
    for name, value in body.items():
        kind = kinds.get(name)
        if kind is None:
            raise bad_request(f"unknown field {name!r} (fields: {', '.join(kinds)})")
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise bad_request(f"{name} must be a {kind.__name__}, not {value!r}")
    return body


async def wait_until(request: web.Request, platform: FakePlatform,
                     ready: Callable[[], bool]) -> bool:
    """Honour the request's ``?wait=SECONDS``: hold the answer until ``ready()``, the
    time is up or the server stops (no ``wait``: answer at once). Returns ``ready()``."""
    raw = request.query.get("wait")
    if raw is None:
        return ready()
    try:
        seconds = float(raw)
    except ValueError:
        raise bad_request(f"wait must be a number of seconds, not {raw!r}") from None
    if not 0 <= seconds <= MAX_WAIT:
        raise bad_request(f"wait must be between 0 and {MAX_WAIT:g} seconds, not {raw}")
    return await platform.hold(ready, seconds)


async def listing(request: web.Request, platform: FakePlatform,
                  records: Callable[[], Sequence[T]]) -> Sequence[T]:
    """What a listing route (``/_fake/sent``) answers: ``records()`` after the first
    ``?after=N`` (0 without it), so a poller asks only for what is new, held by
    ``?wait=SECONDS`` (see :func:`wait_until`) until there is one."""
    raw = request.query.get("after", "0")
    if not raw.isdigit():
        raise bad_request(f"after must be a count (0 or more), not {raw!r}")
    after = int(raw)
    await wait_until(request, platform, lambda: len(records()) > after)
    return records()[after:]


@dataclass
class DevServer:
    """One plugin's dev server: what differs between plugins, the rest done alike.

    ``platform`` makes the fake (not started) from the parsed arguments; ``options``
    are the plugin's own options (``--port`` and ``--latency`` are there already). The
    first line's JSON is the started fake's
    :meth:`~chatkernel.testing.fake_platform.FakePlatform.developer_info` and the config
    snippet its :meth:`~chatkernel.testing.fake_platform.FakePlatform.config_snippet`,
    unless ``announce`` or ``snippet`` (given the fake and the arguments) say otherwise.
    The fake's :meth:`~chatkernel.testing.fake_platform.FakePlatform.developer_routes`
    are served, and ``routes``, more routes of the dev server's own, beside them.
    """

    prog: str
    port: int
    platform: Callable[[argparse.Namespace], FakePlatform]
    announce: Callable[[Any, argparse.Namespace], dict[str, Any]] | None = None
    snippet: Callable[[Any, argparse.Namespace], str | None] | None = None
    routes: Routes | None = None
    options: Options | None = None
    description: str | None = None

    def parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog=self.prog, description=self.description)
        parser.add_argument("--port", type=int, default=self.port,
                            help=f"the port on 127.0.0.1 (default {self.port}; 0 picks a "
                                 "free one)")
        parser.add_argument("--latency", type=float, default=0.0,
                            help="seconds added to every API call the fake serves (as real "
                                 "round trips)")
        if isinstance(self.options, Mapping):
            for name, keywords in self.options.items():
                parser.add_argument(name, **keywords)
        elif self.options is not None:
            self.options(parser)
        return parser

    def main(self, argv: list[str] | None = None) -> None:
        """Parse ``argv`` and serve until SIGINT or SIGTERM."""
        args = self.parser().parse_args(argv)
        try:
            anyio.run(self.serve, args)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            print(f"{self.prog}: cannot listen on 127.0.0.1:{args.port}: the port is taken "
                  "(another dev server? --port 0 picks a free one)", file=sys.stderr)
            sys.exit(1)

    async def serve(self, args: argparse.Namespace, *, stop: anyio.Event | None = None,
                    stdout: TextIO | None = None, stderr: TextIO | None = None) -> None:
        """Serve until SIGINT or SIGTERM; with ``stop``, until it is set instead (signals
        are then left alone: for a test running the server in its own event loop)."""
        stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
        fake = self.platform(args)
        fake.port = args.port
        fake.latency = getattr(args, "latency", fake.latency)  # a test's own Namespace: none
        fake.narrator = lambda line: print(line, file=stderr, flush=True)
        announced: dict[str, Any] = {}
        fake.extra_routes = self._routes(announced)
        # Caught before the server starts: a signal right after the first line still
        # stops it cleanly.
        signals = (contextlib.nullcontext() if stop is not None
                   else anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM))
        with signals as received:
            async with fake:  # listening once entered: only then the first line
                announced.update(fake.developer_info() if self.announce is None
                                 else self.announce(fake, args))
                print(json.dumps(announced), file=stdout, flush=True)
                snippet = (fake.config_snippet() if self.snippet is None
                           else self.snippet(fake, args))
                if snippet is not None:
                    print(snippet, file=stderr, flush=True)
                if stop is not None:
                    await stop.wait()
                    return
                async for _ in received:
                    return

    def _routes(self, announced: dict[str, Any]) -> Routes:
        async def ready(request: web.Request) -> web.Response:
            raw = request.query.get("pid")
            if raw is None:
                return web.json_response(announced)
            if not raw.isdigit():
                raise bad_request(f"pid must be a process id, not {raw!r}")
            if int(raw) not in (os.getpid(), os.getppid()):
                return web.json_response(
                    {"error": f"this is {self.prog} with pid {os.getpid()}, not process "
                              f"{raw}: another process has the port"}, status=409)
            return web.json_response(announced)

        def make(fake: FakePlatform) -> list[web.RouteDef]:
            own = self.routes(fake) if self.routes is not None else []
            return [web.get("/_fake/ready", ready), *fake.developer_routes(), *own]

        return make
