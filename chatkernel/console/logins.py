"""A channel's login flow run for the console's Logins page, as ``chatkernel login`` runs
it for a terminal.

The flow (a plugin's :class:`~chatkernel.sdk.login.Login`) tells the page each step
through :attr:`LoginRequest.progress`: a QR code's modules to draw, ``waiting``,
``scanned``, ``confirmed``, ``expired`` (a new code follows). Once it worked, its keys
are written to the config file (comments and layout kept, mode 0600), the login time
is stamped in the store, and the gateway reloads its config, which starts the account:
the login ends ``live``. A reload that refuses the new file puts the old one back.
At most one login runs per account; the newest :data:`KEPT` are remembered.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from chatkernel.core.store.base import Store
    from chatkernel.sdk.login import Login, LoginStep

log = logging.getLogger("chatkernel.console")

KEPT = 20
#: The states a login ends in.
ENDED = ("live", "failed", "cancelled")


@dataclass
class LoginRun:
    """One login, as the page shows it."""

    id: str
    channel: str
    account: str
    state: str = "starting"
    message: str = ""
    qr_text: str | None = None
    qr_modules: list[list[int]] | None = None
    lines: list[str] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    scope: anyio.CancelScope | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "channel": self.channel, "account": self.account,
                "key": f"{self.channel}:{self.account}", "state": self.state,
                "message": self.message, "qr_text": self.qr_text, "qr": self.qr_modules,
                "lines": self.lines[-20:], "started_at": self.started_at,
                "ended": self.state in ENDED}


class Logins:
    """The logins the console started. ``flows()``: the login flows by channel;
    ``config_path()``: the file the credentials go to; ``store()``: where the login
    time is stamped; ``reload()``: the gateway's reload (raises on a refusal);
    ``redact``: for every line shown; ``changed()``: a page should look again."""

    def __init__(self, *, flows: Callable[[], Mapping[str, "Login"]],
                 config_path: Callable[[], Path], store: Callable[[], "Store"],
                 reload: Callable[[], Awaitable[dict[str, Any]]],
                 redact: Callable[[str], str], changed: Callable[[], None]) -> None:
        self._flows = flows
        self._config_path = config_path
        self._store = store
        self._reload = reload
        self._redact = redact
        self._changed = changed
        self.runs: OrderedDict[str, LoginRun] = OrderedDict()
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        """Cancel the logins still running (the gateway stops), and wait for them."""
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks)

    def start(self, channel: str, account: str, api_base: str | None = None) -> LoginRun:
        """Start a login (LookupError: no flow; ValueError: one runs for the account).
        ``api_base``: the platform's API host, when not the default (``--api-base``)."""
        flow = self._flows().get(channel)
        if flow is None:
            known = ", ".join(sorted(self._flows())) or "none installed"
            raise LookupError(f"channel {channel!r} has no login flow (channels with one: "
                              f"{known})")
        if not account or not all(c.isalnum() or c in "-_" for c in account):
            raise ValueError("the account name must be letters, digits, - or _")
        for run in self.runs.values():
            if (run.channel, run.account) == (channel, account) and run.state not in ENDED:
                raise ValueError(f"a login of {channel}:{account} is running already")
        run = LoginRun(id=str(next(self._ids)), channel=channel, account=account)
        self.runs[run.id] = run
        while len(self.runs) > KEPT:
            oldest = next(iter(self.runs.values()))
            if oldest.state not in ENDED:
                break
            self.runs.popitem(last=False)
        # A task of its own: the request that started it returns at once.
        task = asyncio.get_running_loop().create_task(self._run(flow, run, api_base),
                                                      name=f"login {channel}:{account}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self._changed()
        return run

    def cancel(self, run_id: str) -> LoginRun:
        run = self.runs.get(run_id)
        if run is None:
            raise LookupError(f"no login {run_id!r}")
        if run.scope is not None and run.state not in ENDED:
            run.scope.cancel()
        return run

    def _set(self, run: LoginRun, state: str, message: str = "") -> None:
        run.state = state
        run.message = self._redact(message)
        self._changed()

    def _progress(self, run: LoginRun) -> Callable[["LoginStep"], None]:
        def progress(step: "LoginStep") -> None:
            if step.qr_modules is not None:
                run.qr_text = self._redact(step.qr_text or "")
                run.qr_modules = [[1 if dark else 0 for dark in row] for row in step.qr_modules]
            self._set(run, step.state, step.message)
        return progress

    async def _run(self, flow: "Login", run: LoginRun, api_base: str | None) -> None:
        from chatkernel.core import config as cfg
        from chatkernel.sdk.login import LoginFailed, LoginRequest

        with anyio.CancelScope() as run.scope:
            try:
                path = self._config_path()
                document = cfg.read_document(path)
                try:
                    current = cfg.get_key(document.unwrap(),
                                          f"channels.{run.channel}.accounts.{run.account}",
                                          path=path)
                except KeyError:
                    current = {}

                def echo(line: str) -> None:
                    run.lines.append(self._redact(line))

                request = LoginRequest(channel=run.channel, account=run.account,
                                       api_base=api_base, current=dict(current) if isinstance(current, dict)
                                       else {}, echo=echo, progress=self._progress(run))
                result = await flow.run(request)
                self._set(run, "confirmed", result.detail and f"logged in: {result.detail}")
                await self._keep(run, result.config, path)
            except LoginFailed as exc:
                self._set(run, "failed", str(exc))
            except Exception as exc:  # the page says what; the log has the trace
                log.warning("login of %s:%s failed", run.channel, run.account, exc_info=True)
                self._set(run, "failed", f"{type(exc).__name__}: {exc}")
        if run.scope.cancelled_caught:
            self._set(run, "cancelled", "cancelled: nothing was stored")
        run.scope = None

    async def _keep(self, run: LoginRun, keys: dict[str, Any], path: Path) -> None:
        """Write the credentials, stamp the login, reload: the account goes live."""
        from chatkernel.core import config as cfg
        from chatkernel.sdk.channel import CREDENTIALS_KEY

        before = path.read_text(encoding="utf-8") if path.exists() else None
        document = cfg.read_document(path)
        where = f"channels.{run.channel}.accounts.{run.account}"
        for name, value in keys.items():
            if value is not None:
                cfg.set_key(document, f"{where}.{name}", value, path=path)
        cfg.parse(document.unwrap(), path=path, strict_env=False)
        cfg.write_raw(path, document)  # mode 0600 from the first byte
        await self._store().set_account_state(run.channel, run.account, CREDENTIALS_KEY,
                                              time.time())
        self._set(run, "reloading", f"credentials stored under {where}; starting the account")
        try:
            answer = await self._reload()
        except Exception as exc:
            if before is None:
                path.unlink(missing_ok=True)
            else:
                cfg.write_raw(path, _document(before))
            self._set(run, "failed", f"the gateway refused the new config, so the old one "
                                     f"is back: {exc}")
            return
        lines = answer.get("lines") or []
        self._set(run, "live", f"{run.channel}:{run.account} is logged in and running"
                               + (f" ({'; '.join(lines)})" if lines else ""))


def _document(text: str) -> Any:
    import tomlkit

    return tomlkit.parse(text)
