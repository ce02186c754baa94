"""Reloading the config while the gateway runs (``chatkernel reload``, SIGHUP).

A reload reads the config file again, checks it exactly as a start does
(:func:`chatkernel.core.gateway.process.check_startup`: what ``config validate`` runs)
and refuses it as a whole when anything is wrong: the running config stays.
Otherwise it applies what can change live and names every changed key it did
not apply (those need a restart). Live:

- an account's kernel settings (``allow_from``, ``require_mention``,
  ``access_level``, ``direct_only_commands``, ``max_inbound_media_mb``,
  ``heartbeat``): swapped in place, the next message is judged by them;
- an account's own channel settings (a token, an API base, a poll timeout): the
  account gets a new channel instance and its receive loop is restarted on it;
- accounts added (built, their receive loop started) and removed (their loop
  stopped, their in-flight turns and sends finish before the account goes);
- ``[queue]`` (but ``max_concurrent``) and a channel's ``queue`` table;
- ``[heartbeat]``, ``[agent.heartbeat]``, a channel's ``heartbeat`` table
  (rescheduled);
- ``[send_policy]``;
- ``[jobs.*]`` (a changed schedule starts again from the reload) and ``[triggers.*]``;
- ``[agent]``, ``[agents.*]`` and ``[[bindings]]``: a changed agent gets a new instance
  for the next turns (a turn running on the old one finishes on it, which is then
  closed), and the next message of a chat goes to the agent its bindings name now (a
  session of its own: see docs/agents.md).

An account whose channel serves HTTP routes (webhooks, the web chat) is added,
removed or rebuilt only by a restart: the routes of a running aiohttp
application are fixed. Its kernel settings still apply live.

Keys not applied keep their running value (:attr:`Kernel.config` is the
config in effect), so every later reload names them again until a restart.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from chatkernel.core import config as cfg
from chatkernel.core.accounts import make_channel
from chatkernel.core.config.listen import check_listen, parse_listen
from chatkernel.sdk.models import Account

if TYPE_CHECKING:
    from chatkernel.core.kernel import Kernel

log = logging.getLogger("chatkernel.reload")

#: How long a reload waits for a removed account's in-flight work (and for a
#: restarted account's old receive loop to end) before it answers; what is not done
#: by then finishes in the background.
SETTLE_SECONDS = 10.0
#: Account settings the kernel reads on every use: they change in place.
IN_PLACE_ACCOUNT_KEYS = frozenset(cfg.AccountConfig.model_fields) - {"enabled",
                                                                     "health_monitor"}


class ReloadBusy(Exception):
    """An earlier reload is still finishing (an account's in-flight work): try again."""


#: Per kernel, the accounts an earlier reload is still removing or restarting.
_finishing: "weakref.WeakKeyDictionary[Kernel, set[str]]" = weakref.WeakKeyDictionary()


class ReceiveLoops(Protocol):
    """What a reload starts and stops receive loops with (the gateway's)."""

    def start(self, account: Account) -> None: ...

    def stop(self, key: str) -> anyio.Event | None:
        """Cancel the account's loop; the event is set once it ended (None: none ran)."""


@dataclass(slots=True)
class ReloadReport:
    """What a reload did. Keys are dotted config keys, accounts ``channel:account``."""

    #: Changed keys now in effect.
    applied: list[str] = field(default_factory=list)
    #: Changed keys not applied: a restart applies them.
    restart_needed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    #: Accounts whose receive loop restarted on new connection settings.
    restarted: list[str] = field(default_factory=list)
    #: Work a reload left running in the background, in words.
    pending: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any((self.applied, self.restart_needed, self.added, self.removed,
                    self.restarted))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """The report in words, a line per part (what ``chatkernel reload`` prints)."""
        parts = [("applied", self.applied), ("accounts added", self.added),
                 ("accounts removed", self.removed),
                 ("accounts restarted (new connection settings)", self.restarted),
                 ("still finishing", self.pending),
                 ("needs a restart (not applied)", self.restart_needed)]
        found = [f"{title}: {', '.join(items)}" for title, items in parts if items]
        return found or ["nothing changed"]


# -- what changed ----------------------------------------------------------------------------


def changed_keys(old: Any, new: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The paths where two config dumps differ: tables are compared key by key,
    anything else as one value."""
    if isinstance(old, dict) and isinstance(new, dict):
        found: list[tuple[str, ...]] = []
        for key in sorted(old.keys() | new.keys()):
            if key not in old or key not in new:
                found.append((*prefix, key))
            else:
                found += changed_keys(old[key], new[key], (*prefix, key))
        return found
    return [] if old == new else [prefix]


#: The tables whose presence decides something, whatever they hold: a `[heartbeat]` (or
#: an agent's `heartbeat`) table turns that heartbeat on, with its defaults.
PRESENCE_MATTERS = frozenset({"heartbeat"})


def tables_added_or_removed(old: dict[str, Any], new: dict[str, Any],
                            prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The :data:`PRESENCE_MATTERS` tables one config sets and the other does not, from
    dumps of what each config sets: :func:`changed_keys` compares values, and an empty
    table's values are its defaults, the same as no table's."""
    found: list[tuple[str, ...]] = []
    for key in sorted(old.keys() | new.keys()):
        here, before, after = (*prefix, key), old.get(key), new.get(key)
        if key in PRESENCE_MATTERS and (before is None) != (after is None):
            found.append(here)
        elif isinstance(before, dict) and isinstance(after, dict):
            found += tables_added_or_removed(before, after, here)
    return found


def is_live(path: tuple[str, ...]) -> bool | None:
    """Whether a reload applies a changed key: True, False (a restart does), or None
    for the accounts' keys, which are decided per account."""
    head, rest = path[0], path[1:]
    if head == "channels":
        if len(rest) < 2 or rest[1] in ("accounts", "enabled"):
            return None
        return rest[1] in ("queue", "heartbeat")
    if head == "queue":
        return not rest or rest[0] != "max_concurrent"
    return head in ("heartbeat", "send_policy", "agent", "agents", "bindings", "jobs",
                    "triggers")


def dotted(path: tuple[str, ...]) -> str:
    return ".".join(path)


def _restore(data: dict[str, Any], old: dict[str, Any], path: tuple[str, ...]) -> None:
    """Put ``old``'s value at ``path`` back into ``data`` (remove it where ``old`` has none)."""
    source: Any = old
    for part in path[:-1]:
        source = source.get(part, {}) if isinstance(source, dict) else {}
    if isinstance(source, dict) and path[-1] in source:
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = source[path[-1]]
        return
    node = data  # `old` has none: take it out, making no table on the way
    for part in path[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return
    if isinstance(node, dict):
        node.pop(path[-1], None)


# -- applying --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Plan:
    effective: dict[str, Any]
    report: ReloadReport
    in_place: list[tuple[Account, Any]] = field(default_factory=list)
    rebuilt: list[tuple[Account, Any]] = field(default_factory=list)
    added: list[Account] = field(default_factory=list)
    removed: list[Account] = field(default_factory=list)


async def apply_config(kernel: "Kernel", new: cfg.KernelConfig, *,
                       loops: ReceiveLoops | None = None, listen: str | None = None
                       ) -> ReloadReport:
    """Apply ``new`` to a running kernel (see the module's docstring); what
    :meth:`Kernel.reload` runs. Raises ConfigError, changing nothing, when ``new``
    fails the start-up checks, and ReloadBusy while an earlier reload is still
    finishing with an account. ``loops``: the gateway's receive loops (None: accounts
    are added and removed without one); ``listen``: the address in use, for the
    control-token check."""
    from chatkernel.core import logs

    finishing = _finishing.setdefault(kernel, set())
    if finishing:
        raise ReloadBusy(f"an earlier reload is still finishing with {', '.join(sorted(finishing))}"
                         " (in-flight turns and sends): reload again once it is done")

    # What a start checks (gateway.process.check_startup), on a scratch kernel of the
    # running one's class: the reload is the kernel's own operation, below the process.
    check_listen(new, parse_listen(listen or new.gateway.listen)[0],
                 config_path=kernel.config_path)
    checked = type(kernel)(new, config_path=kernel.config_path, pm=kernel.pm)
    checked.check()
    plan = _plan(kernel, new, checked.accounts)
    effective = cfg.KernelConfig.model_validate(plan.effective)
    kernel.make_agent_workspaces(effective)  # refused here, nothing has changed yet
    # Everything up to the accounts' loops happens at once (no await): a message is
    # judged by the old settings or the new ones, never by a mix.
    logs.secret_filter.add(*cfg.kernel_secrets(effective))  # new tokens stay out of the log
    replaced = kernel.replace_agents(effective)  # first: an agent that cannot be built
    kernel.use_config(effective)                # refuses the reload, changing nothing
    for account, settings in plan.in_place:
        account.config, account.access_level = settings, settings.access_level
    kernel.heartbeats.reschedule()
    kernel.jobs.reschedule()  # a changed schedule starts afresh: no old slot fires
    for account in plan.added:
        _build_channel(kernel, account)
        kernel.accounts[account.key] = account
        kernel.outbox.limits.prepare(account)
        if loops is not None:
            loops.start(account)
    await kernel.roster.retire(replaced)  # the agents replaced that no turn runs on
    jobs = [(account.key, _replace(kernel, loops, account, settings))
            for account, settings in plan.rebuilt]
    jobs += [(account.key, _remove(kernel, loops, account)) for account in plan.removed]
    report = plan.report
    if jobs:
        report.pending += await _settle(kernel, jobs, finishing)
    log.info("config reloaded: %s%s", "; ".join(report.lines()),
             " (a restart applies the rest: systemctl restart chatkernel under the "
             "service, else stop and start chatkernel run)" if report.restart_needed else "")
    return report


def _plan(kernel: "Kernel", new: cfg.KernelConfig, built: dict[str, Account]) -> _Plan:
    # Values are compared whole; the effective config is built from what each config
    # sets, since a table's presence means something (a `[heartbeat]` table turns the
    # config heartbeat on): a reload must arrive where a start on `new` arrives.
    old_data, new_data = kernel.config.model_dump(), new.model_dump()
    old_set = kernel.config.model_dump(exclude_unset=True)
    plan = _Plan(effective=new.model_dump(exclude_unset=True), report=ReloadReport())
    report = plan.report
    changed = changed_keys(old_data, new_data)
    for path in changed + [path for path in tables_added_or_removed(old_set, plan.effective)
                           if path not in changed]:
        live = is_live(path)
        if live:
            report.applied.append(dotted(path))
        elif live is False:
            report.restart_needed.append(dotted(path))
            _restore(plan.effective, old_set, path)
    running = kernel.accounts
    for key in sorted(built.keys() | running.keys()):
        old, wanted = running.get(key), built.get(key)
        if old is not None and wanted is not None:
            _plan_changed(plan, old_set, old, wanted)
            continue
        account = old or wanted
        assert account is not None
        if serves_http(account):
            report.restart_needed.append(_where(account))
            _keep(plan.effective, old_set, account)
        elif wanted is not None:
            plan.added.append(wanted)
            report.added.append(key)
        else:
            plan.removed.append(account)
            report.removed.append(key)
    return plan


def _plan_changed(plan: _Plan, old_set: dict[str, Any], account: Account,
                  wanted: Account) -> None:
    """An account in both configs: its kernel settings change in place; its channel's
    own settings make a new channel, unless the channel serves HTTP routes. A changed
    ``health_monitor`` needs a restart, as ``[health_monitor]`` does."""
    settings = wanted.config
    keys = {name for name in type(settings).model_fields
            if getattr(account.config, name, None) != getattr(settings, name)}
    if not keys:
        return
    own = keys - IN_PLACE_ACCOUNT_KEYS
    kept = {"health_monitor"} & own
    if own and (serves_http(account) or serves_http(wanted)):
        kept = own
    if kept:  # these keep their running values
        settings = settings.model_copy(update={name: getattr(account.config, name)
                                               for name in kept})
        for name in sorted(kept):
            plan.report.restart_needed.append(f"{_where(account)}.{name}")
            _keep(plan.effective, old_set, account, name)
    if own - kept:
        plan.rebuilt.append((account, settings))
        plan.report.restarted.append(account.key)
    elif keys - kept:
        plan.in_place.append((account, settings))
        plan.report.applied += [f"{_where(account)}.{name}" for name in sorted(keys - kept)]


def _where(account: Account) -> str:
    return f"channels.{account.channel_name}.accounts.{account.name}"


def serves_http(account: Account) -> bool:
    """Whether the account's channel mounts routes on the gateway's HTTP server."""
    return account.transport is not None and bool(account.transport.http_routes())


def _keep(effective: dict[str, Any], old: dict[str, Any], account: Account,
          name: str | None = None) -> None:
    """Leave an account's table (or one key of it) in the effective config as it runs."""
    channels = effective.setdefault("channels", {})
    old_section = old.get("channels", {}).get(account.channel_name)
    if old_section is None:  # an implied account (the embedded web chat's): no table
        return
    section = channels.get(account.channel_name)
    if section is None:
        section = channels[account.channel_name] = {**old_section, "accounts": {}}
    path = ("accounts", account.name) + ((name,) if name else ())
    _restore(section, old_section, path)


def _build_channel(kernel: "Kernel", account: Account) -> None:
    """The account's channel made from the config in effect, with the kernel's workspace."""
    account.workspace = kernel.workspace
    section = kernel.config.channels.get(account.channel_name)
    make_channel(kernel.channel_types[account.channel_name], account, section,
                 kernel.channel_context)


async def _replace(kernel: "Kernel", loops: ReceiveLoops | None, account: Account,
                   settings: Any) -> None:
    """New connection settings: the old loop ends, then one starts on a new channel.
    Sends go on meanwhile (through the new channel once it is there); the old
    channel is closed when the account has nothing left in flight."""
    ended = loops.stop(account.key) if loops is not None else None
    if ended is not None:
        await ended.wait()  # two loops of one account never run at once
    old_channel = account.channel
    account.config, account.access_level = settings, settings.access_level
    _build_channel(kernel, account)
    if loops is not None:
        loops.start(account)
    log.info("%s: receive loop restarted on its new settings", account.key)
    if old_channel is not None:
        await wait_idle(kernel, account.key)
        await old_channel.aclose()


async def _remove(kernel: "Kernel", loops: ReceiveLoops | None, account: Account) -> None:
    """Stop receiving, let what was received and what is queued to send finish, then
    drop the account and close its channel."""
    ended = loops.stop(account.key) if loops is not None else None
    if ended is not None:
        await ended.wait()
    await wait_idle(kernel, account.key)
    del kernel.accounts[account.key]
    if account.channel is not None:
        await account.channel.aclose()
    log.info("%s: removed", account.key)


async def _settle(kernel: "Kernel", jobs: list[tuple[str, Awaitable[None]]],
                  running: set[str]) -> list[str]:
    """Run each account's job in the kernel's task group and wait up to
    :data:`SETTLE_SECONDS` for them all. Returns a note per job still running (it
    goes on in the background, its account in ``running`` until it is done)."""
    running.update(name for name, _ in jobs)
    done = anyio.Event()

    async def run(name: str, job: Awaitable[None]) -> None:
        try:
            await job
        except Exception:
            log.exception("reload: %s failed", name)
        finally:
            running.discard(name)
            if not running:
                done.set()

    for name, job in jobs:
        kernel.task_group.start_soon(run, name, job, name=f"reload {name}")
    with anyio.move_on_after(SETTLE_SECONDS):
        await done.wait()
    return [f"{name} (in-flight turns and sends)" for name in sorted(running)]


async def wait_idle(kernel: "Kernel", key: str, poll: float = 0.05) -> None:
    """Return once :meth:`Kernel.account_busy` is False."""
    while kernel.account_busy(key):
        await anyio.sleep(poll)


# -- the gateway's side ----------------------------------------------------------------------


class ConfigReloader:
    """Reloads a running gateway from its config file, one reload at a time, through
    ``apply`` (:meth:`Kernel.reload <chatkernel.core.kernel.Kernel.reload>`).

    The listen address given on the command line stands as long as the file's
    ``gateway.listen`` is what it was at start; a change there needs a restart."""

    def __init__(self, apply: Callable[..., Awaitable[ReloadReport]],
                 loops: ReceiveLoops | None, *, listen_in_effect: Callable[[], str],
                 config_path: Path | None, listen: str) -> None:
        self._apply = apply  # Kernel.reload
        self._listen_in_effect = listen_in_effect  # the running config's gateway.listen
        self.loops = loops
        self.path = cfg.config_path(config_path)
        self.listen = listen
        try:
            self._file_listen: str | None = cfg.load(self.path).gateway.listen
        except cfg.ConfigError:
            self._file_listen = None
        self._lock = anyio.Lock()

    async def reload(self) -> ReloadReport:
        """Read the file and apply it; ConfigError (nothing applied) when it is invalid."""
        async with self._lock:
            new = self._read()
            if new.gateway.listen == self._file_listen:  # the command line's stands
                new.gateway.listen = self._listen_in_effect()
            return await self._apply(new, loops=self.loops, listen=self.listen)

    def _read(self) -> cfg.KernelConfig:
        """The config file, its references resolved in this process's environment, with
        the env file read again (what changed there applies; the real environment wins)."""
        env_file = cfg.env_file_path()
        cfg.load_env_file()
        try:
            return cfg.load(self.path)
        except cfg.EnvNotSet as exc:  # the reload's shell has no say: say whose it is
            raise cfg.EnvNotSet(
                exc.missing, path=exc.path, where=" in the running gateway's environment",
                hint=f"add it to {env_file}, which a reload reads again, or restart the "
                     "gateway with it set") from None

    async def reload_and_log(self) -> None:
        """What SIGHUP runs: the outcome goes to the log."""
        try:
            await self.reload()  # apply_config logs what it did
        except (cfg.ConfigError, ReloadBusy) as exc:
            log.error("config reload refused, the running config stays: %s (chatkernel "
                      "config validate shows the problems; fix them and reload again)", exc)
        except Exception:
            log.exception("config reload failed")
