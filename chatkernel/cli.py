"""The ``chatkernel`` command line.

Only click is imported at start-up, so ``--help`` always works and stays fast;
each command imports what it needs when it runs.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

import click

from chatkernel import __version__


class KernelGroup(click.Group):
    """Turns the kernel's user-facing errors into one clear line, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        from chatkernel.sdk.errors import ConfigError

        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None


#: Where the ``--config`` given nearest the command is kept (``Context.meta`` is shared
#: by a command's context and its groups').
_CONFIG_FILE = "chatkernel.config_file"


def _remember_config(ctx: click.Context, param: click.Parameter, value: str | None
                     ) -> str | None:
    if value is not None:
        ctx.meta[_CONFIG_FILE] = value
    return ctx.meta.get(_CONFIG_FILE)


def config_option(command=None, *, may_be_missing: bool = False):
    """``--config PATH``, accepted alike by ``chatkernel``, by a group and by each of its
    commands: ``chatkernel --config X config validate``, ``chatkernel config --config X
    validate`` and ``chatkernel config validate --config X`` are one command. The one
    given nearest the command wins; a function with a ``config_file`` parameter gets it.

    A file named so (or by ``CHATKERNEL_CONFIG``) must exist, unless the command
    ``may_be_missing`` (``config init`` writes it): a typo in a service file would
    otherwise run a gateway on the defaults, without its channels."""
    import functools
    import inspect

    if command is None:
        return functools.partial(config_option, may_be_missing=may_be_missing)
    takes_it = "config_file" in inspect.signature(command).parameters
    if takes_it and not may_be_missing:
        inner = command

        @functools.wraps(inner)
        def command(*args: Any, **kwargs: Any) -> Any:
            _require_named_file(kwargs.get("config_file"))
            return inner(*args, **kwargs)
    return click.option("--config", "config_file", metavar="PATH", envvar="CHATKERNEL_CONFIG",
                        expose_value=takes_it, callback=_remember_config,
                        help="The config file (default $CHATKERNEL_CONFIG, else "
                             "$CHATKERNEL_HOME/config.toml).")(command)


def _require_named_file(config_file: str | None) -> None:
    """Refuse a config file named explicitly that does not exist (one line, no start)."""
    import os
    from pathlib import Path

    if not config_file:
        return
    path = Path(config_file).expanduser()
    if path.exists():
        return
    named = "CHATKERNEL_CONFIG" if os.environ.get("CHATKERNEL_CONFIG") == config_file \
        else "--config"
    raise click.ClickException(f"{path}: no such config file (named by {named}); "
                               f"`chatkernel config init --config {path}` writes a starter")


@click.group(cls=KernelGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="chatkernel")
@config_option
def cli() -> None:
    """chatkernel: a gateway between chat platforms and a bot or AI agent.

    Channels are plugins: `pip install chatkernel-telegram` enables Telegram.
    """


#: Set when chatkernel runs as its own program (not as a library, in a test's
#: process): only then may ``run`` execute itself again (chatkernel.core.gateway.secret_env).
_OWN_PROCESS = False


def main() -> None:
    global _OWN_PROCESS
    _OWN_PROCESS = True
    cli(prog_name="chatkernel")


def _plugin_manager():
    from chatkernel.core.plugins import get_plugin_manager

    pm = get_plugin_manager()
    for name, reason in sorted(pm.load_errors.items()):
        click.echo(f"warning: plugin {name!r} failed to load: {reason}", err=True)
    return pm


# -- plugins ------------------------------------------------------------------------


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@click.option("--all", "show_all", is_flag=True, help="Include the built-in plugins.")
@click.option("--hook", "hook_name", metavar="NAME", help="Only plugins implementing this hook.")
def plugins(as_json: bool, show_all: bool, hook_name: str | None) -> None:
    """List installed plugins, their hooks, and any that failed to load or that the
    environment leaves out."""
    from chatkernel.core.plugins import BUILTIN_PLUGINS

    pm = _plugin_manager()
    if hook_name is not None and not hasattr(pm.hook, hook_name):
        known = ", ".join(sorted(name for name in vars(pm.hook) if not name.startswith("_")))
        raise click.BadParameter(f"no hook named {hook_name!r}; hooks: {known}",
                                 param_hint="--hook")
    infos = pm.plugin_infos(include_builtins=show_all)
    if hook_name is not None:
        infos = [info for info in infos if hook_name in info.hooks]
    if as_json:
        click.echo(json.dumps([info.as_dict() for info in infos], indent=2))
        return
    left_out = {name: why for name, why in pm.left_out().items()
                if show_all or name not in BUILTIN_PLUGINS}
    if not infos:
        if left_out:
            click.echo(f"No plugins loaded: {len(left_out)} installed, left out by the "
                       "environment:")
        else:
            click.echo("No plugins installed." + ("" if show_all else
                                                  " (--all shows built-ins)"))
    else:
        rows = [("NAME", "VERSION", "DISTRIBUTION", "HOOKS")]
        for info in infos:
            hooks = ", ".join(info.hooks) if info.error is None else f"FAILED: {info.error}"
            rows.append((info.name, info.version or "-", info.distribution or "-", hooks))
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        for row in rows:
            click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  "
                       + row[3])
        if left_out:
            click.echo("Installed but not loaded:")
    by_reason: dict[str, list[str]] = {}
    for name, why in left_out.items():
        by_reason.setdefault(why, []).append(name)
    for why, names in by_reason.items():
        click.echo(f"  {', '.join(names)}: {why}")


# -- run -------------------------------------------------------------------------------


@cli.command()
@config_option
@click.option("--listen", metavar="HOST:PORT",
              help="Where the HTTP server listens (default gateway.listen, 127.0.0.1:8787; "
                   "port 0 picks a free one).")
@click.option("--log-json", is_flag=True, help="Log JSON lines instead of readable lines.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              help="Default gateway.log_level (info).")
def run(config_file: str | None, listen: str | None, log_json: bool,
        log_level: str | None) -> None:
    """Run the gateway: every configured account, the web chat, the agent.

    With no config at all it serves the built-in web chat on 127.0.0.1:8787,
    answered by the echo agent, with state in SQLite under $CHATKERNEL_HOME.
    """
    import anyio

    from chatkernel.core import config as cfg
    from chatkernel.core import logs
    from chatkernel.core.gateway.process import run_gateway

    path = cfg.config_path(config_file)
    raw = cfg.read_raw(path)
    moved = _secrets_out_of_the_environment(raw)
    config = cfg.parse(raw, path=path)
    if listen is not None:
        from pydantic import ValidationError

        try:
            config.gateway.listen = listen
        except ValidationError as exc:
            message = exc.errors()[0]["msg"].removeprefix("Value error, ")
            raise click.BadParameter(message, param_hint="--listen") from None
    logs.configure("json" if log_json else config.gateway.log_format,
                   log_level or config.gateway.log_level,
                   secrets=cfg.secret_values(cfg.resolve_env(raw, strict=False)))
    if moved:
        logging.getLogger("chatkernel.gateway").info(
            "kept out of the process's environment block (in memory only): %s",
            ", ".join(moved))
    _plugin_manager()
    from chatkernel.core.gateway.homelock import HomeInUse

    if listen is not None:
        origin = "--listen on the command line"
    elif "listen" in (raw.get("gateway") or {}):
        origin = f"gateway.listen in {path}"
    else:
        origin = "the built-in default"
    try:
        anyio.run(lambda: run_gateway(config, config_path=path, listen_origin=origin))
    except HomeInUse as exc:
        raise click.ClickException(str(exc)) from None


def _secrets_out_of_the_environment(raw: dict) -> list[str]:
    """Start again without the secrets in the environment block, then make the process
    non-dumpable (chatkernel.core.gateway.secret_env); the names moved."""
    from chatkernel.core.gateway import secret_env

    try:
        moved = secret_env.take_over()
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    if not moved and _OWN_PROCESS:
        secret_env.exec_without_secrets(secret_env.secret_names(raw, os.environ))
    if _OWN_PROCESS:
        secret_env.make_non_dumpable()
    return moved


# -- proactive sends and sessions -----------------------------------------------------------


def _load_config(config_file: str | None):
    from chatkernel.core import config as cfg

    path = cfg.config_path(config_file)
    return cfg.parse(cfg.read_raw(path), path=path), path


def _running_gateway():
    from chatkernel.core import config as cfg
    from chatkernel.core.gateway_state import read_state

    return read_state(cfg.home_dir())


#: ``chatkernel send`` / ``sessions send`` exit codes by outcome (docs/outbound.md).
SEND_EXIT_CODES = {"sent": 0, "accepted": 0, "delivered": 0, "queued": 0, "nothing": 0,
                   "failed": 1, "unknown": 3, "pending": 4, "unconfirmed": 5}
EXIT_SEND_UNKNOWN = 3


def _control_or_direct(config_file: str | None, path: str, body: dict[str, Any],
                       direct, *, timeout: float = 30.0,
                       unanswered: str | None = None) -> dict[str, Any]:
    """Ask the running gateway; with none, do it here with a kernel of our own (which
    holds the home's lock meanwhile).

    ``unanswered``: what it means when the gateway took the request and gave no answer
    in time (then the exit status is 3); without it, that is an error like any other."""
    from chatkernel.core.gateway.control import call

    info = _running_gateway()
    if info is not None:
        import urllib.error

        try:
            status, answer = call(info, path, body, timeout=timeout)
        except urllib.error.URLError as exc:  # refused, or no connection: nothing was sent
            raise click.ClickException(f"the gateway at {info.url} did not answer "
                                       f"({exc.reason})") from None
        except (TimeoutError, OSError, ValueError) as exc:  # it took the request
            error = click.ClickException(
                f"the gateway at {info.url} took the request but gave no answer "
                f"({type(exc).__name__}: {exc})" + (f": {unanswered}" if unanswered else ""))
            if unanswered:
                error.exit_code = EXIT_SEND_UNKNOWN
            raise error from None
        if status >= 400:
            raise click.ClickException(answer.get("error", f"the gateway answered {status}"))
        answer["via"] = "gateway"
        return answer
    import anyio

    from chatkernel.core import logs

    config, config_path = _load_config(config_file)
    logs.configure(config.gateway.log_format, "error")  # failures are reported below
    _plugin_manager()
    role = click.get_current_context().command_path
    return anyio.run(lambda: _direct(config, config_path, direct, body, role))


async def _direct(config, config_path, action, body, role: str) -> dict[str, Any]:
    from chatkernel.core import config as cfg
    from chatkernel.core.gateway.control import ControlError
    from chatkernel.core.gateway.homelock import HomeInUse, HomeLock
    from chatkernel.core.kernel import Kernel

    try:
        lock = HomeLock(cfg.home_dir(), role).acquire()  # no gateway may start meanwhile
    except HomeInUse as exc:
        raise click.ClickException(str(exc)) from None
    with lock:
        async with Kernel(config, config_path=config_path, recover=False) as kernel:
            try:
                answer = await action(kernel, body)
            except ControlError as exc:
                raise click.ClickException(str(exc)) from None
    answer["via"] = "direct"
    return answer


def _send(config_file: str | None, body: dict[str, Any], wait: float, no_wait: bool,
          as_json: bool, wait_delivery: float | None = None) -> None:
    """Send through the running gateway (or directly), report the outcome, exit with it."""
    if no_wait and wait_delivery:
        raise click.UsageError("--no-wait and --wait-delivery contradict each other")
    # Without a gateway this command is the sender: it always waits.
    gateway = _running_gateway() is not None
    body = {**body, "wait": 0 if no_wait and gateway else wait,
            "wait_delivery": wait_delivery or 0}
    answer = _control_or_direct(
        config_file, "/control/send", body, lambda kernel, body: kernel.control.send(body),
        timeout=wait + (wait_delivery or 0) + 30,
        unanswered="the message may have been queued; it is not sent again")
    _report_send(answer, wait, as_json, wait_delivery)


def _report_send(answer: dict[str, Any], wait: float, as_json: bool,
                 wait_delivery: float | None = None) -> None:
    from chatkernel.core.runtime.control import send_outcome

    outcome = answer.get("outcome") or send_outcome(answer.get("parts"))
    code = SEND_EXIT_CODES.get(outcome, 1)
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        sys.exit(code)
    parts = answer.get("parts") or []
    where = f"{answer.get('account')} → {answer.get('chat_id')}"
    reply = f"reply {answer.get('reply_id')}"
    history = f"see `chatkernel sessions history {answer.get('session')}`"
    if outcome == "nothing":
        click.echo(f"nothing to send to {where}")
    elif outcome == "queued":
        click.echo(f"queued by the running gateway for {where} ({reply}; not waiting for "
                   "the outcome)")
    elif outcome == "sent":
        click.echo(f"sent to {where} ({len(parts)} part(s))")
    elif outcome == "accepted":
        click.echo(f"accepted by the platform for {where} ({len(parts)} part(s)); delivery "
                   f"is reported later: {history} (or wait for it with --wait-delivery)")
    elif outcome == "delivered":
        read = all(part.get("delivery") == "read" for part in parts)
        click.echo(f"delivered to {where} ({len(parts)} part(s){', read' if read else ''})")
    elif outcome == "unconfirmed":
        click.echo(f"accepted by the platform for {where} ({reply}), but no delivery was "
                   f"reported within {wait_delivery:g} s: {history} for what becomes of it",
                   err=True)
        for index, part in enumerate(parts, start=1):
            click.echo(f"  part {index}/{len(parts)}: {part.get('delivery', 'pending')}",
                       err=True)
    elif outcome == "failed" and any(part.get("delivery") == "failed" for part in parts):
        click.echo(f"not delivered to {where} ({reply}): the platform accepted it, then "
                   "reported:", err=True)
        for index, part in enumerate(parts, start=1):
            detail = f": {part['error']}" if part.get("delivery") == "failed" else ""
            click.echo(f"  part {index}/{len(parts)}: {part.get('delivery', 'pending')}"
                       f"{detail}", err=True)
    else:
        later = ("the gateway keeps it queued and sends it when it can"
                 if answer.get("via") == "gateway" else
                 "it stays queued in the state database and goes out when the gateway "
                 "starts")
        headline = {
            "failed": f"not sent to {where} ({reply}):",
            "unknown": f"delivery unknown to {where} ({reply}): the platform did not answer "
                       "after it went out, so it may have arrived; it is not sent again:",
            "pending": f"not sent yet to {where} after {wait:g} s ({reply}): {later}:",
        }.get(outcome, f"{outcome}: {where}")
        click.echo(headline, err=True)
        for index, part in enumerate(parts, start=1):
            detail = f": {part['error']}" if part.get("error") else ""
            click.echo(f"  part {index}/{len(parts)}: {part['status']}{detail}", err=True)
        if not parts:
            click.echo("  the reply was not stored (a commit of the state database failed)",
                       err=True)
    sys.exit(code)


_WAIT_HELP = ("Seconds to wait for the outcome (sent, failed with the platform's reason, "
              "delivery unknown).")
_NO_WAIT_HELP = ("Only queue it with the running gateway, exit 0 once queued (without a "
                 "gateway this command sends, so it waits).")
_WAIT_DELIVERY_HELP = ("On a channel that reports delivery later (WhatsApp): also wait up "
                       "to SECONDS for the platform's report (exit 1 if it failed, 5 if "
                       "none came in time). Needs the running gateway.")


@cli.command()
@click.option("--channel", required=True, help="The channel to send on (telegram, ...).")
@click.option("--account", help="The account, when the channel has several.")
@click.option("--to", "to", required=True, metavar="CHAT|last",
              help="A chat id, or 'last' for the account's last active chat.")
@click.option("--thread", help="A thread / topic id within the chat.")
@click.option("--media", multiple=True, type=click.Path(dir_okay=False),
              help="A file to send after the text (repeatable).")
@config_option
@click.option("--wait", type=click.FloatRange(min=0, min_open=True), default=60.0,
              show_default=True, metavar="SECONDS", help=_WAIT_HELP)
@click.option("--no-wait", is_flag=True, help=_NO_WAIT_HELP)
@click.option("--wait-delivery", type=click.FloatRange(min=0, min_open=True),
              metavar="SECONDS", help=_WAIT_DELIVERY_HELP)
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@click.argument("text", default="")
def send(channel: str, account: str | None, to: str, thread: str | None, media: tuple[str],
         config_file: str | None, wait: float, no_wait: bool, wait_delivery: float | None,
         as_json: bool, text: str) -> None:
    """Send TEXT (and files) through the same pipeline as replies, and report what
    became of it.

    Talks to the running gateway; when none runs, sends directly. Exit status: 0 sent
    (or queued, with --no-wait; or accepted, on a channel that reports delivery later);
    1 not sent (the platform's reason, the send policy, a bad target...) or, with
    --wait-delivery, reported failed; 3 delivery unknown; 4 not sent yet when --wait
    ran out; 5 no delivery report within --wait-delivery.
    """
    import os

    body = {"channel": channel, "account": account, "to": to, "thread": thread, "text": text,
            "media": [os.path.abspath(path) for path in media]}
    _send(config_file, body, wait, no_wait, as_json, wait_delivery)


@cli.group()
@config_option
def sessions() -> None:
    """List sessions, read their history, send into them."""


def _with_store(config_file: str | None, action):
    import anyio

    from chatkernel.core.store import open_store

    config, path = _load_config(config_file)

    async def run():
        store = open_store(config, config_path=path)
        await store.open()
        try:
            return await action(store)
        finally:
            await store.close()

    return anyio.run(run)


def _ago(ts: float) -> str:
    import time

    seconds = max(0, int(time.time() - ts))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


@sessions.command("list")
@click.option("--active-minutes", type=float, metavar="N",
              help="Only sessions active in the last N minutes.")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def sessions_list(config_file: str | None, active_minutes: float | None, as_json: bool) -> None:
    """Sessions, most recently active first."""
    import time

    since = None if active_minutes is None else time.time() - active_minutes * 60
    records = _with_store(config_file, lambda store: store.list_sessions(active_since=since))
    if as_json:
        click.echo(json.dumps([{"key": r.key, "session_id": r.session_id, "channel": r.channel,
                                "account": r.account, "chat_id": r.chat_id,
                                "thread_id": r.thread_id, "created_at": r.created_at,
                                "last_active_at": r.last_active_at, "settings": r.settings,
                                "agent": r.agent}
                               for r in records], indent=2))
        return
    if not records:
        click.echo("No sessions" + ("" if since is None else " active in that time") + ".")
        return
    width = max(len(r.key) for r in records)
    agents = max(len("AGENT"), *(len(r.agent) for r in records))
    click.echo(f"{'KEY'.ljust(width)}  {'AGENT'.ljust(agents)}  {'LAST ACTIVE':<12}  SESSION")
    for r in records:
        click.echo(f"{r.key.ljust(width)}  {r.agent.ljust(agents)}  "
                   f"{_ago(r.last_active_at):<12}  {r.session_id}")


@sessions.command("history")
@click.argument("key")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True,
              help="How many of the newest entries.")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def sessions_history(config_file: str | None, key: str, limit: int, as_json: bool) -> None:
    """The newest entries of a session's log: messages, replies, notifications."""
    import datetime

    async def read(store):
        entries = await store.read_log(key, limit=limit)
        # A log with no session record is a heartbeat's own (heartbeat:main): shown too.
        if not entries and await store.get_session(key) is None:
            raise click.ClickException(f"no session {key!r} (chatkernel sessions list shows "
                                       "them)")
        return entries

    entries = _with_store(config_file, read)
    if as_json:
        click.echo(json.dumps([{"seq": e.seq, "session_id": e.session_id, "role": e.role,
                                "text": e.text, "ts": e.ts, "meta": e.meta}
                               for e in entries], indent=2))
        return
    for e in entries:
        when = datetime.datetime.fromtimestamp(e.ts).strftime("%Y-%m-%d %H:%M:%S")
        click.echo(f"{when}  {e.role:<12}  {e.text}")


@sessions.command("send")
@click.argument("key")
@click.argument("text")
@click.option("--wait", type=click.FloatRange(min=0, min_open=True), default=60.0,
              show_default=True, metavar="SECONDS", help=_WAIT_HELP)
@click.option("--no-wait", is_flag=True, help=_NO_WAIT_HELP)
@click.option("--wait-delivery", type=click.FloatRange(min=0, min_open=True),
              metavar="SECONDS", help=_WAIT_DELIVERY_HELP)
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def sessions_send(config_file: str | None, key: str, text: str, wait: float, no_wait: bool,
                  wait_delivery: float | None, as_json: bool) -> None:
    """Send TEXT into a session (to its current reply route); exit status as `send`'s."""
    _send(config_file, {"session": key, "text": text}, wait, no_wait, as_json, wait_delivery)


@sessions.command("policy")
@click.argument("key")
@click.argument("policy", type=click.Choice(["allow", "deny", "inherit"]))
@config_option
def sessions_policy(config_file: str | None, key: str, policy: str) -> None:
    """Override the send policy for one session (inherit: back to the rules)."""
    answer = _control_or_direct(
        config_file, "/control/sessions/policy", {"session": key, "policy": policy},
        lambda kernel, body: kernel.control.set_session_policy(key, policy))
    click.echo(f"{answer['session']}: send policy {answer['policy']}")


# -- status, health, channels ----------------------------------------------------------

#: ``chatkernel health`` exit codes besides 0 (healthy).
EXIT_UNHEALTHY = 1
EXIT_UNREACHABLE = 3


def _client(reason: str) -> dict[str, Any]:
    """Who this CLI is, for the gateway's presence table (a stable id, no file)."""
    import os
    import platform
    import socket

    host = socket.gethostname()
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return {"instance_id": f"cli-{host}-{uid}", "mode": "cli", "reason": reason,
            "host": host, "version": __version__,
            "platform": f"{platform.system()} {platform.machine()}"}


def _ask_gateway(path: str, body: dict[str, Any], timeout: float):
    """``(gateway info, answer, error)``: the answer of the running gateway, or why none."""
    from chatkernel.core.gateway.control import call

    info = _running_gateway()
    if info is None:
        return None, None, "no gateway is running"
    try:
        status, answer = call(info, path, body, timeout=timeout)
    except (OSError, ValueError) as exc:  # refused, timed out, not JSON
        reason = getattr(exc, "reason", None) or exc
        return info, None, f"the gateway at {info.url} did not answer ({reason})"
    if status >= 400:
        return info, None, f"the gateway answered {status}: {answer.get('error', '?')}"
    return info, answer, None


def _read_config_quietly(config_file: str | None):
    """``(path, raw, config or None, error or None)``: never raises for a bad file."""
    from chatkernel.core import config as cfg

    path = cfg.config_path(config_file)
    try:
        raw = cfg.read_raw(path)
        return path, raw, cfg.parse(raw, path=path, strict_env=False), None
    except cfg.ConfigError as exc:
        return path, {}, None, str(exc)


def _redactor(raw: dict[str, Any], info=None):
    from chatkernel.core.plugins import collect_channels
    from chatkernel.core.plugins import get_plugin_manager
    from chatkernel.core.health.report import Redactor, config_secrets

    collect_channels(get_plugin_manager())  # their secret patterns join the redaction
    return Redactor(config_secrets(raw, extra=[info.token] if info is not None else []))


def _local_snapshot(config, *, with_store_counts: bool = False):
    """The snapshot from the config and the state database, opened read-only."""
    import anyio

    from chatkernel.core.health.probes import local_snapshot
    from chatkernel.core.store import open_store

    async def read():
        counts: dict[str, Any] = {}
        store = None
        try:
            store = open_store(config, read_only=True)
            await store.open()
        except Exception as exc:  # no database yet, or one we cannot read: say so
            counts["state"] = str(exc)
            store = None
        try:
            snapshot = await local_snapshot(config, store)
            if store is not None and with_store_counts:
                counts["unfinished inbound messages"] = len(await store.unfinished_inbound())
                counts["unsent outbox entries"] = len(await store.outbox_unfinished())
        finally:
            if store is not None:
                await store.close()
        return snapshot.model_dump(mode="json"), counts

    return anyio.run(read)


def _print(data: Any, text: str | None, redact, as_json: bool) -> None:
    out = json.dumps(data, indent=2, ensure_ascii=False, default=str) if as_json else text
    click.echo(redact(out or ""))


@cli.command()
@click.option("--all", "show_all", is_flag=True,
              help="A full read-only diagnosis (versions, plugins, config, state), secrets "
                   "redacted: safe to paste.")
@click.option("--deep", is_flag=True, help="Ask the running gateway for live probes.")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@click.option("--timeout", "timeout_ms", type=click.IntRange(min=1), default=10_000,
              show_default=True, metavar="MS", help="Probe timeout with --deep.")
@config_option
def status(show_all: bool, deep: bool, as_json: bool, timeout_ms: int,
           config_file: str | None) -> None:
    """Gateway, channels and accounts, sessions and recent activity.

    Asks the running gateway; when none runs, shows what the config and the state
    database say (read-only). Never changes anything.
    """
    path, raw, config, config_error = _read_config_quietly(config_file)
    info, answer, error = _ask_gateway(
        "/control/status", {"live": deep, "timeout_ms": timeout_ms,
                            "client": _client("status --all" if show_all else "status")},
        timeout_ms / 1000 + 5)
    redact = _redactor(raw, info)
    counts: dict[str, Any] = {}
    if answer is not None:
        snapshot = answer
    elif config is None:
        if not show_all:
            raise click.ClickException(redact(config_error or "the config cannot be read"))
        snapshot = {"ok": None, "gateway": {"reachable": False, "error": error},
                    "channels": {}, "sessions": {}, "problems": []}
    else:
        snapshot, counts = _local_snapshot(config, with_store_counts=show_all)
        snapshot["gateway"]["error"] = error if info is not None else None
    for key in ("pid", "accounts", "started_at"):  # the control API's older fields
        snapshot.pop(key, None)
    if show_all:
        diagnosis = _diagnosis(path, raw, config, config_error, snapshot, counts)
        from chatkernel.core.health.report import render_diagnosis

        _print(diagnosis, None if as_json else render_diagnosis(diagnosis), redact, as_json)
    else:
        from chatkernel.core.health.report import render_status

        _print(snapshot, None if as_json else render_status(snapshot), redact, as_json)
    if deep and answer is None:
        click.echo(f"error: --deep needs a running gateway for live probes ({redact(error)}); "
                   "chatkernel channels probe checks credentials without one", err=True)
        sys.exit(1)


def _diagnosis(path, raw, config, config_error, snapshot, counts) -> dict[str, Any]:
    import tomli_w

    from chatkernel.core import config as cfg
    from chatkernel.core.health.report import environment

    problems = [config_error] if config_error else []
    if config is not None:
        try:
            cfg.parse(raw, path=path)  # strict: an unset ${ENV} reference is a problem
            _validate_channels(raw, path, strict_env=True)
        except cfg.ConfigError as exc:
            problems.append(str(exc))
    pm = _plugin_manager()
    state_path = config.store_path() if config is not None else None
    if state_path is None:
        state = "unknown (the config cannot be read)"
    elif state_path.exists():
        state = f"{state_path} ({state_path.stat().st_size} bytes)"
    else:
        state = f"{state_path} (not created yet)"
    store = {key: value for key, value in counts.items() if key != "state"}
    if "state" in counts:
        store["state database"] = counts["state"]
    return {
        "environment": environment(),
        "home": str(cfg.home_dir()),
        "config_path": str(path),
        "config_exists": path.exists(),
        "state": state,
        "plugins": [info.as_dict() for info in pm.plugin_infos(include_builtins=True)],
        "config_problems": problems,
        "config_text": tomli_w.dumps(cfg.redact(raw)).rstrip("\n"),
        "snapshot": snapshot,
        "store": store,
    }


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Output the snapshot as JSON.")
@click.option("--timeout", "timeout_ms", type=click.IntRange(min=1), default=10_000,
              show_default=True, metavar="MS",
              help="How long each probe, and the gateway, may take.")
@click.option("--verbose", "-v", is_flag=True,
              help="Probe every account now (live), and show every detail.")
@click.option("--wait", "wait", type=click.FloatRange(min=0), is_flag=False, flag_value=30.0,
              default=None, metavar="[SECONDS]",
              help="Wait until the gateway answers and is ready (every account healthy and "
                   "through to its platform), at most SECONDS (default 30).")
@config_option
def health(as_json: bool, timeout_ms: int, verbose: bool, wait: float | None,
           config_file: str | None) -> None:
    """The running gateway's health snapshot.

    Cached probe results by default (refreshed every minute), live probes with
    --verbose. With --wait, first waits for a gateway that is starting (for scripts:
    `chatkernel run &` then `chatkernel health --wait`). Exit status: 0 healthy; 1 an
    account is unhealthy (a probe failed or timed out, a loop failed or is paused); 3
    no gateway answered (within --wait).
    """
    import time

    _, raw, _, _ = _read_config_quietly(config_file)
    body = {"live": verbose, "timeout_ms": timeout_ms, "client": _client("health")}
    # The probes take up to the timeout; the snapshot's store reads up to a second more
    # (health.store_timeout_ms) when the store hangs.
    # While waiting, the cached probes (live ones would call the platforms 5 times a
    # second); the last answer is probed live when --verbose asks for it.
    waiting = {**body, "live": False}
    deadline = time.monotonic() + (wait or 0)
    while wait is not None:
        info, answer, error = _ask_gateway("/control/health", waiting, timeout_ms / 1000 + 2)
        if (answer is not None and _ready(answer)) or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if wait is None or (verbose and answer is not None):
        info, answer, error = _ask_gateway("/control/health", body, timeout_ms / 1000 + 2)
    redact = _redactor(raw, info)
    if answer is None:
        if wait is not None:
            error = f"no gateway answered within {wait:g} s (last: {error})"
        if as_json:
            _print({"ok": False, "gateway": {"reachable": False, "error": error}}, None,
                   redact, True)
        else:
            click.echo(redact(f"unreachable: {error}"), err=True)
        sys.exit(EXIT_UNREACHABLE)
    from chatkernel.core.health.report import render_health

    _print(answer, None if as_json else render_health(answer, verbose=verbose), redact,
           as_json)
    if wait is not None and answer.get("ok") and not _ready(answer):
        click.echo(f"not ready after {wait:g} s: an account has not reached its platform "
                   "yet", err=True)
        sys.exit(EXIT_UNHEALTHY)
    sys.exit(0 if answer.get("ok") else EXIT_UNHEALTHY)


def _ready(snapshot: dict[str, Any]) -> bool:
    """Healthy, and every enabled account through to its platform: its loop heard from
    it, or its probe passed (an account still ``starting`` may not have reached it)."""
    from chatkernel.core.health.report import accounts_of

    if not snapshot.get("ok"):
        return False
    return all(account.get("state") != "starting" or (account.get("probe") or {}).get("ok")
               for account in accounts_of(snapshot)
               if account.get("enabled", True) and account.get("ok") is not None)


@cli.group()
@config_option
def channels() -> None:
    """Channel accounts: list them, probe them."""


def _channel_types() -> list[dict[str, str]]:
    from importlib.metadata import packages_distributions

    from chatkernel.core.plugins import collect_channels

    distributions = packages_distributions()
    found = []
    for name, channel_type in sorted(collect_channels(_plugin_manager()).items()):
        package = channel_type.__module__.split(".")[0]
        source = "built-in" if package == "chatkernel" else \
            (distributions.get(package) or [package])[0]
        found.append({"name": name, "source": source})
    return found


@channels.command("list")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def channels_list(as_json: bool, config_file: str | None) -> None:
    """Configured accounts (state from the running gateway, or the config) and the
    installed channel types."""
    _, raw, config, config_error = _read_config_quietly(config_file)
    info, answer, error = _ask_gateway("/control/health", {"client": _client("channels")}, 15)
    redact = _redactor(raw, info)
    if answer is not None:
        snapshot = answer
    elif config is None:
        raise click.ClickException(redact(config_error or "the config cannot be read"))
    else:
        snapshot, _ = _local_snapshot(config)
    types = _channel_types()
    from chatkernel.core.health.report import accounts_of, render_channels

    data = {"gateway": snapshot.get("gateway"), "channel_types": types,
            "accounts": [{key: account.get(key) for key in
                          ("key", "channel", "account", "enabled", "state", "quiet", "probe")}
                         for account in accounts_of(snapshot)]}
    _print(data, None if as_json else render_channels(snapshot, types), redact, as_json)


@channels.command("probe")
@click.argument("target", required=False, metavar="[CHANNEL[:ACCOUNT]]")
@click.option("--timeout", "timeout_ms", type=click.IntRange(min=1), default=10_000,
              show_default=True, metavar="MS", help="How long each probe may take.")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def channels_probe(target: str | None, timeout_ms: int, as_json: bool,
                   config_file: str | None) -> None:
    """Probe accounts now (all, a channel's, or one): through the running gateway, or
    from here when none runs. Exit status 1 if any probe fails or times out."""
    _, raw, _, _ = _read_config_quietly(config_file)
    info, answer, error = _ask_gateway(
        "/control/channels/probe", {"target": target, "timeout_ms": timeout_ms,
                                    "client": _client("channels probe")},
        timeout_ms / 1000 + 1)
    redact = _redactor(raw, info)
    if answer is None and info is not None:
        raise click.ClickException(redact(error))
    if answer is None:
        answer = _probe_directly(config_file, target, timeout_ms / 1000)
    else:
        answer["via"] = "gateway"
    from chatkernel.core.health.report import render_probes

    _print(answer, None if as_json else render_probes(answer), redact, as_json)
    sys.exit(0 if answer.get("ok") else EXIT_UNHEALTHY)


def _probe_directly(config_file: str | None, target: str | None, timeout: float
                    ) -> dict[str, Any]:
    import anyio

    from chatkernel.core import logs

    config, config_path = _load_config(config_file)
    logs.configure(config.gateway.log_format, "error")
    pm = _plugin_manager()

    async def probe():
        from chatkernel.core.health.probes import ProbeInfo, select_accounts
        from chatkernel.core.kernel import Kernel

        async with Kernel(config, config_path=config_path, pm=pm, recover=False) as kernel:
            try:
                accounts = select_accounts(kernel.accounts.values(), target)
            except LookupError as exc:
                raise click.ClickException(str(exc)) from None
            results = await kernel.health.probe(accounts, timeout=timeout)
        probes = {key: ProbeInfo.of(result, None).model_dump(mode="json")  # type: ignore
                  for key, result in results.items()}
        return {"ok": all(p["ok"] for p in probes.values()), "probes": probes, "via": "direct"}

    return anyio.run(probe)


# -- agents ---------------------------------------------------------------------------


@cli.group()
@config_option
def agents() -> None:
    """The gateway's agents, and which one answers a chat (docs/agents.md)."""


@agents.command("list")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def agents_list(config_file: str | None, as_json: bool) -> None:
    """Every agent: its kind, workspace, the bindings naming it and its sessions."""
    import collections

    from chatkernel.core.turns.bindings import Bindings

    config, _ = _load_config(config_file)
    records = _with_store(config_file, lambda store: store.list_sessions())
    sessions = collections.Counter(record.agent for record in records)
    bindings = Bindings.from_config(config)
    rows = [{"name": name, "kind": agent.kind, "workspace": str(config.agent_workspace(name)),
             "bindings": [f"bindings[{i}] ({config.bindings[i].describe()})"
                          for i in bindings.rules_of(name)]
             + (["the chats no binding matches"] if name == "default" else []),
             "sessions": sessions.get(name, 0)}
            for name, agent in config.named_agents().items()]
    rows.sort(key=lambda row: (row["name"] != "default", row["name"]))
    if as_json:
        click.echo(json.dumps({"agents": rows, "default": config.default_agent() is not None},
                              indent=2))
        return
    for row in rows:
        click.echo(f"{row['name']}  kind {row['kind']}  workspace {row['workspace']}  "
                   f"sessions {row['sessions']}")
        for binding in row["bindings"] or ["(no binding names it: it answers no chat)"]:
            click.echo(f"  {binding}")
    if config.default_agent() is None:
        click.echo("no default agent: the chats no binding matches go unanswered")


@agents.command("which")
@click.option("--channel", required=True, help="The chat's channel.")
@click.option("--account", required=True, help="The channel's account.")
@click.option("--chat", required=True, help="The chat (or peer) id.")
@click.option("--group", "is_group", is_flag=True, help="The chat is a group.")
@click.option("--thread", default=None, help="The thread id, if any.")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def agents_which(config_file: str | None, channel: str, account: str, chat: str,
                 is_group: bool, thread: str | None, as_json: bool) -> None:
    """Which agent answers a chat, and by which binding."""
    from chatkernel.core.turns.bindings import Bindings, Chat

    config, _ = _load_config(config_file)
    match = Bindings.from_config(config).match(Chat(channel, account, chat, is_group, thread))
    why = match.why(config.bindings)
    if as_json:
        click.echo(json.dumps({"agent": match.agent, "rule": match.rule, "why": why}))
    else:
        click.echo(f"{match.agent or 'no agent'}: {why}")
    if match.agent is None:
        sys.exit(1)


# -- heartbeats -----------------------------------------------------------------------


@cli.group()
@config_option
def heartbeat() -> None:
    """Heartbeats: their status, and waking one by hand."""


def _local_heartbeats(config_file: str | None) -> dict[str, Any]:
    """The heartbeats as the store and the config describe them (no gateway runs, so
    none is scheduled)."""
    import time

    from chatkernel.core.heartbeat.jobs import MAIN, describe_state
    from chatkernel.core.heartbeat.settings import (
        AGENT_PREFIX,
        heartbeat_settings,
        heartbeat_wanted,
        job_agent,
    )
    from chatkernel.core.store.base import HeartbeatState

    config, _ = _load_config(config_file)
    states = _with_store(config_file, lambda store: store.list_heartbeats())
    agents = {AGENT_PREFIX + name for name in config.agent_heartbeats()}
    # Not the stored state of an agent whose table no longer asks for a heartbeat...
    states = [state for state in states if state.session_key or state.id == MAIN
              or state.id in agents]
    known = {state.id for state in states}
    # ...and those no gateway has started yet.
    states[:0] = [HeartbeatState(id=heartbeat_id)
                  for heartbeat_id in [MAIN, *sorted(agents)] if heartbeat_id not in known]
    now = time.time()
    heartbeats = [describe_state(state, heartbeat_settings(config, state), now,
                                 wanted=heartbeat_wanted(config, job_agent(state.id) or
                                                         "default"))
                  for state in states]
    return {"heartbeats": heartbeats, "now": now, "scheduled": False}


@heartbeat.command("status")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def heartbeat_status(config_file: str | None, as_json: bool) -> None:
    """Every heartbeat: interval, prompt, last run, time to the next.

    Asks the running gateway; when none runs, nothing is scheduled, and it shows what
    the config and the state database say.
    """
    from chatkernel.core.gateway.control import call

    info = _running_gateway()
    if info is not None:
        status, answer = call(info, "/control/heartbeat/status", {})
        if status >= 400:
            raise click.ClickException(answer.get("error", f"the gateway answered {status}"))
        answer["via"] = "gateway"
    else:
        answer = {**_local_heartbeats(config_file), "via": "local"}
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    live = answer["via"] == "gateway"
    if not live:
        click.echo("No gateway is running, so no heartbeat is scheduled. As the config and "
                   "the state database stand:")
    for item in answer["heartbeats"]:
        click.echo(_heartbeat_line(item, live=live))
    if live and not answer.get("scheduled", True):
        click.echo("Nothing is scheduled.")
    if not any(item["kind"] == "session" for item in answer["heartbeats"]):
        click.echo("A chat sets a heartbeat of its own with: /heartbeat every 2h <what to "
                   "check>.")


def _heartbeat_line(item: dict[str, Any], *, live: bool) -> str:
    """One heartbeat in a line (and its prompt below); ``live``: as the running gateway
    schedules it, else as it would be once one runs."""
    from chatkernel.core.durations import format_interval

    if item.get("off"):
        line = (f"{item['id']}  off: the config has no [heartbeat] table (a manual wake still "
                "runs it; docs/heartbeats.md)")
        return line + "".join(f"  {part}" for part in _last_run(item))
    target = item["session"] if item["kind"] == "session" else f"target {item['target']}"
    parts = [item["id"], f"every {item['every']}", target]
    due_in = item.get("next_in_seconds")
    if item.get("paused"):
        parts.append("paused")
    elif item.get("running"):
        parts.append("running now")
    elif item.get("waiting_for"):
        parts.append(f"due, waits for {item['waiting_for']} to be idle")
    elif not item.get("every_seconds"):
        parts.append("not timed (every = 0): wake only")
    elif live and due_in is not None:
        parts.append(f"next in {format_interval(due_in)}")
    elif due_in is None:
        parts.append("first run one interval after a gateway starts")
    elif due_in > 0:
        parts.append(f"due in {format_interval(due_in)}, if a gateway runs by then")
    else:
        parts.append("overdue: runs once as soon as a gateway starts")
    parts.extend(_last_run(item))
    if item.get("wake_texts"):
        parts.append(f"{len(item['wake_texts'])} wake note(s) waiting")
    prompt = " ".join((item.get("prompt") or "").split())
    if len(prompt) > 60:
        prompt = prompt[:59] + "…"
    return "  ".join(parts) + (f"\n    {prompt}" if prompt else "")


def _last_run(item: dict[str, Any]) -> list[str]:
    """A heartbeat's last run and outcome, and where its log is (none: never ran)."""
    if item.get("last_run_at"):
        parts = [f"last run {_ago(item['last_run_at'])}: {item['last_outcome']}"]
    elif item.get("last_outcome"):
        parts = [f"last: {item['last_outcome']}"]
    else:
        return []
    if item.get("log_session"):
        parts.append(f"log: chatkernel sessions history {item['log_session']}")
    return parts


@heartbeat.command("wake")
@click.option("--text", help="A note for the agent, added to the heartbeat's prompt.")
@click.option("--mode", type=click.Choice(["now", "next"]), default="now", show_default=True,
              help="now: run at once (when its session is idle); next: the note waits for "
                   "the next scheduled run.")
@click.option("--session", "session_key", metavar="KEY",
              help="Wake a session heartbeat (default: the config heartbeat).")
@click.option("--agent", metavar="NAME",
              help="Wake that agent's heartbeat (default: the default agent's).")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def heartbeat_wake(text: str | None, mode: str, session_key: str | None, agent: str | None,
                   as_json: bool) -> None:
    """Wake a heartbeat of the running gateway by hand."""
    from chatkernel.core.gateway.control import call

    info = _running_gateway()
    if info is None:
        raise click.ClickException("no gateway is running: a wake needs the running gateway "
                                   "(start it with: chatkernel run)")
    status, answer = call(info, "/control/heartbeat/wake",
                          {"text": text, "mode": mode, "session": session_key,
                           "agent": agent})
    if status >= 400:
        raise click.ClickException(answer.get("error", f"the gateway answered {status}"))
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    name = answer["heartbeat"]["id"]
    if mode == "now":
        click.echo(f"woke heartbeat {name}: it runs as soon as its session is idle")
    else:
        click.echo(f"the note waits for the next run of heartbeat {name}")


# -- reload ---------------------------------------------------------------------------


#: ``chatkernel reload`` exit codes: the config was refused; no gateway runs.
EXIT_RELOAD_REFUSED = 1
EXIT_NO_GATEWAY = 3


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def reload(as_json: bool, config_file: str | None) -> None:
    """Apply the edited config file to the running gateway, without a restart.

    Allowlists, queue and heartbeat settings, added and removed accounts and new
    account credentials apply at once; the answer names every changed key that needs a
    restart. An invalid config is refused as a whole: the running one stays. The same
    happens on SIGHUP to `chatkernel run`. With --config, the gateway must be the one
    reading that file.
    """
    import urllib.error
    from pathlib import Path

    from chatkernel.core.gateway.control import call

    info = _running_gateway()
    if info is None:
        error = click.ClickException("no gateway is running: nothing to reload (a start "
                                     "reads the config anyway: chatkernel run)")
        error.exit_code = EXIT_NO_GATEWAY
        raise error
    try:
        body = {"config": str(Path(config_file).resolve())} if config_file else {}
        status, answer = call(info, "/control/reload", body, timeout=60.0)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        error = click.ClickException(f"the gateway at {info.url} did not answer ({exc})")
        error.exit_code = EXIT_NO_GATEWAY
        raise error from None
    if as_json:
        click.echo(json.dumps(answer if status < 400 else {"refused": answer.get("error")},
                              indent=2))
        if status >= 400:
            sys.exit(EXIT_RELOAD_REFUSED)
        return
    if status >= 400:
        raise click.ClickException("reload refused: " + answer.get(
            "error", f"the gateway answered {status}"))
    for line in answer["lines"]:
        click.echo(line)


# -- login ----------------------------------------------------------------------------


def _logins() -> dict[str, Any]:
    """Login flows by channel name, from every plugin's ``register_logins``."""
    from chatkernel.core.plugins import collect_registered
    from chatkernel.sdk.login import Login

    logins = collect_registered(_plugin_manager().hook.register_logins, "login")
    for name, login in logins.items():
        if not isinstance(login, Login):
            raise TypeError(f"login {name!r} is not a chatkernel.sdk.login.Login: {login!r}")
    return logins


@cli.command()
@click.argument("channel")
@click.option("--account", default="main", show_default=True,
              help="The account under channels.CHANNEL.accounts to log in.")
@click.option("--api-base", metavar="URL", help="The platform's API host, when not the default.")
@config_option
def login(channel: str, account: str, api_base: str | None, config_file: str | None) -> None:
    """Log a channel account in (WeChat: scan a QR code) and store its credentials.

    The credentials go into the config file (mode 0600) under
    channels.CHANNEL.accounts.ACCOUNT, replacing earlier ones; secrets are never
    printed. A running gateway uses them after a restart.
    """
    import time

    import anyio

    from chatkernel.core import config as cfg
    from chatkernel.sdk.channel import CREDENTIALS_KEY
    from chatkernel.sdk.login import LoginFailed, LoginRequest

    logins = _logins()
    flow = logins.get(channel)
    if flow is None:
        known = ", ".join(sorted(logins)) or "none installed"
        raise click.ClickException(f"channel {channel!r} has no login flow (channels with "
                                   f"one: {known})")
    path = cfg.config_path(config_file)
    document = cfg.read_document(path)  # the person's comments and layout stay
    key = f"channels.{channel}.accounts.{account}"
    try:
        current = cfg.get_key(document.unwrap(), key, path=path)
    except KeyError:
        current = {}
    request = LoginRequest(channel=channel, account=account, api_base=api_base,
                           current=dict(current) if isinstance(current, dict) else {},
                           echo=click.echo)
    try:
        result = anyio.run(flow.run, request)
    except LoginFailed as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        raise click.ClickException("login interrupted: nothing was stored") from None
    for name, value in result.config.items():
        if value is not None:
            cfg.set_key(document, f"{key}.{name}", value, path=path)
    raw = document.unwrap()
    cfg.parse(raw, path=path, strict_env=False)
    _validate_channels(raw, path, strict_env=False)
    cfg.write_raw(path, document)  # mode 0600 from the first byte

    async def stamp(store):
        await store.set_account_state(channel, account, CREDENTIALS_KEY, time.time())

    _with_store(config_file, stamp)
    stored = ", ".join(sorted(result.secret_keys)) or "credentials"
    click.echo(f"logged in{': ' + result.detail if result.detail else ''}")
    click.echo(f"{stored} stored under {key} in {path} (mode 0600)")
    if _running_gateway() is not None:
        click.echo("a gateway is running: restart it to use the new credentials")


# -- config ---------------------------------------------------------------------------


@cli.group()
@config_option
def config() -> None:
    """Read and write the TOML config."""


@config.command("path")
@config_option(may_be_missing=True)  # where the file is, or would be
def config_path_cmd(config_file: str | None) -> None:
    """Print where the config file is."""
    from chatkernel.core.config import config_path

    click.echo(str(config_path(config_file)))


@config.command("init")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@config_option(may_be_missing=True)
def config_init(config_file: str | None, force: bool) -> None:
    """Write a commented starter config (mode 0600): the main settings, and an example
    for each installed channel (the web chat's on, the others commented out)."""
    from chatkernel.core import config as cfg

    path = cfg.config_path(config_file)
    if path.exists() and not force:
        raise click.ClickException(f"{path} exists already (use --force to overwrite)")
    from chatkernel.core.plugins import collect_channels, implied_accounts

    pm = _plugin_manager()
    types = collect_channels(pm)
    channels = [(c["name"], c["source"], types[c["name"]].config_example)
                for c in _channel_types()]
    # On in the file: the channels that would run on the starter's own settings.
    on = implied_accounts(pm, cfg.parse(cfg.starter_config().unwrap()))
    cfg.write_raw(path, cfg.starter_config(channels, on=on))
    click.echo(f"wrote {path}, with an example for each installed channel "
               f"({', '.join(sorted(types))})")


@config.command("show")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def config_show(config_file: str | None, as_json: bool) -> None:
    """Print the config file, secrets redacted (${ENV} references are shown as written)."""
    from chatkernel.core import config as cfg

    path = cfg.config_path(config_file)
    data = cfg.redact(cfg.read_raw(path))
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        import tomli_w

        click.echo(tomli_w.dumps(data).rstrip("\n") or f"# {path} is empty or missing")


@config.command("get")
@click.argument("key")
@click.option("--json", "as_json", is_flag=True,
              help="Output JSON: key, value, source (file or default), note.")
@config_option
def config_get(config_file: str | None, key: str, as_json: bool) -> None:
    """Print one key's effective value: the file's, else its default (said on stderr),
    with what it does where the value alone does not say it. An account setting asked
    of a channel (channels.webchat.allow_from) prints every account's."""
    from chatkernel.core import config as cfg
    from chatkernel.core.plugins import collect_channels

    path = cfg.config_path(config_file)
    models = {name: channel.account_model
              for name, channel in collect_channels(_plugin_manager()).items()}
    found = cfg.effective_values(cfg.read_raw(path), key, account_models=models, path=path)
    shown = [cfg.Effective(item.key, cfg.redact(item.value, item.key.rsplit(".", 1)[-1]),
                           item.source, item.note) for item in found]
    per_account = len(shown) != 1 or shown[0].key != key
    if as_json:
        data = ({"key": key, "per_account": [item.as_dict() for item in shown]}
                if per_account else shown[0].as_dict())
        click.echo(json.dumps(data, indent=2, default=str))
        return
    if not per_account:
        item = shown[0]
        click.echo(cfg.format_value(item.value))
        notes = ([f"the default (not set in {path})"] if item.source == "default" else []) \
            + ([item.note] if item.note else [])
        if notes:
            click.echo(f"# {'; '.join(notes)}", err=True)
        return
    click.echo(f"# {key.rsplit('.', 1)[-1]} is set per account:", err=True)
    for item in shown:
        notes = (["the default"] if item.source == "default" else []) \
            + ([item.note] if item.note else [])
        comment = f"  # {'; '.join(notes)}" if notes else ""
        click.echo(f"{item.key} = {cfg.inline_value(item.value)}{comment}")


@config.command("set", options_metavar="[OPTIONS]")
@click.argument("pairs", nargs=-1, required=True, metavar="KEY VALUE [KEY VALUE]...")
@config_option
def config_set(config_file: str | None, pairs: tuple[str, ...]) -> None:
    """Set dotted keys. VALUE is read as TOML when it parses (numbers, booleans,
    lists), else as a string; a field that holds text (an id, a phone number) takes
    digits as text. Several KEY VALUE pairs are set together and validated together
    (an account's required keys), before anything is written."""
    from chatkernel.core import config as cfg

    if len(pairs) % 2:
        raise click.UsageError(f"expected KEY VALUE pairs, got {len(pairs)} word(s): "
                               f"{pairs[-1]!r} has no value")
    path = cfg.config_path(config_file)
    document = cfg.read_document(path)  # the person's comments and layout stay
    edits = list(zip(pairs[::2], pairs[1::2]))
    for key, _ in edits:
        cfg.split_key(key, path=path)
    # Only the channels the keys are under are checked, so only their plugins load.
    named = {key.split(".")[1] for key, _ in edits if key.startswith("channels.")} \
        - {"defaults"}
    pm, channels = _channel_types_for(named) if named else (None, {})
    models = {name: channel.account_model for name, channel in channels.items()}
    try:
        heartbeat_before = cfg.parse(document.unwrap(), path=path,
                                     strict_env=False).config_heartbeat_wanted()
    except cfg.ConfigError:
        heartbeat_before = True  # the file is broken already: say nothing about it
    written = []
    for key, text in edits:
        value = cfg.parse_value(text, text_field=cfg.takes_text(cfg.key_field(key, models)))
        cfg.set_key(document, key, value, path=path)
        written.append((key, value))
    raw = document.unwrap()
    # ${ENV} references need not resolve here: the variable may only exist where
    # the gateway runs.
    config = cfg.parse(raw, path=path, strict_env=False)
    for name in sorted(named):
        _check_channel_table(config, raw, name, channels, path, [key for key, _ in edits],
                             pm)
    cfg.write_raw(path, document)
    shown = ", ".join(
        f"{key} = {cfg.inline_value(cfg.redact(value, key.rsplit('.', 1)[-1]))}"
        for key, value in written)
    click.echo(f"set {shown} in {path}")
    for key, value in (leaf for key, value in written for leaf in _leaves(key, value)):
        if cfg.is_secret_field(key, cfg.key_field(key, models)) and isinstance(value, str) \
                and value and not cfg.holds_env_reference(value):
            name = cfg.env_name_for(key)
            click.echo(f"warning: {key} is a secret, now stored in plain text in {path}; "
                       f"a reference keeps it out of the file: chatkernel config set {key} "
                       f"'${{{name}}}' (and set {name} where the gateway runs)", err=True)
    if not heartbeat_before and config.config_heartbeat_wanted():
        every = config.heartbeat.every
        if config.agent.heartbeat is not None and "every" in \
                config.agent.heartbeat.model_fields_set:
            every = config.agent.heartbeat.every
        from chatkernel.core.durations import parse_interval

        if parse_interval(every) > 0:
            click.echo(f"note: this turns the config heartbeat on: an agent turn every "
                       f"{every}, each a paid turn with a paid model (heartbeat.every = "
                       f'"0" keeps manual wakes only; docs/heartbeats.md)', err=True)


def _leaves(key: str, value: Any):
    """``(dotted key, value)`` of every value in ``value``, a table or a value."""
    if isinstance(value, dict):
        for name, item in value.items():
            yield from _leaves(f"{key}.{name}", item)
    else:
        yield key, value


def _channel_types_for(names: set[str]) -> tuple[Any, dict[str, Any]]:
    """The plugin manager that loads the channels ``names``, and its channel types by
    name: the plugin whose entry point is named after the channel (this project's are)
    loads alone, a built-in channel's built-in plugin alone; any other channel, or
    CHATKERNEL_LOAD_PLUGINS set, loads them all."""
    import os
    from importlib.metadata import entry_points

    from chatkernel.core.plugins import (
        BUILTIN_CHANNELS,
        BUILTIN_PLUGINS,
        GROUP,
        PluginManager,
        collect_channels,
    )

    entry_names = {ep.name for ep in entry_points(group=GROUP)}
    if os.environ.get("CHATKERNEL_LOAD_PLUGINS") is None and \
            names <= entry_names | set(BUILTIN_CHANNELS):
        wanted = {BUILTIN_CHANNELS[name] for name in names if name in BUILTIN_CHANNELS}
        pm = PluginManager().load(
            only=sorted(names - set(BUILTIN_CHANNELS)), builtins=bool(wanted),
            disabled=[name for name in BUILTIN_PLUGINS if name not in wanted]
            + [name for name in os.environ.get("CHATKERNEL_DISABLE_PLUGINS", "").split(",")
               if name.strip()])
        found = collect_channels(pm)
        if names <= set(found):
            for name, reason in sorted(pm.load_errors.items()):
                click.echo(f"warning: plugin {name!r} failed to load: {reason}", err=True)
            return pm, found
    pm = _plugin_manager()
    return pm, collect_channels(pm)


def _check_channel_table(config, raw: dict[str, Any], name: str, channels: dict[str, Any],
                         path, keys: list[str], pm) -> None:
    """``config set``'s check of one channel's tables, the gateway's own (its keys, its
    accounts built as `run` builds them). An account refused for a key it lacks says
    how to give an account's keys in one call."""
    from chatkernel.core import config as cfg
    from chatkernel.core.accounts import build_accounts

    if name not in channels:
        raise cfg.unknown_channel(name, channels, path=path)
    section = cfg.effective_channels(config, pm).get(name)
    if section is None or not section.enabled:
        return
    try:
        build_accounts(name, section, channels[name], config_path=path)
    except cfg.ConfigError as exc:
        raise _with_together_hint(exc, raw, name, channels[name].account_model, keys) \
            from None


def _with_together_hint(error, raw: dict[str, Any], channel: str, model,
                        keys: list[str]):
    """``error`` with, when it refused an account this call edits for keys the account
    lacks, the one command that sets them all at once."""
    import re

    from chatkernel.core import config as cfg

    prefix = f"channels.{channel}.accounts."
    tables = dict.fromkeys(".".join(key.split(".")[:4]) for key in keys
                           if key.startswith(prefix) and key.count(".") >= 4)
    where = error.key or ""
    table = next((t for t in tables if where == t or where.startswith(t + ".")
                  or (not where and f"{t}." in error.message)), None)
    if table is None:
        return error
    written = (((raw.get("channels") or {}).get(channel) or {}).get("accounts") or {}) \
        .get(table.rsplit(".", 1)[-1]) or {}
    # Required by the model, or by the channel's own check ("app_token is required").
    wanted = [name for name, field in model.model_fields.items() if name not in written
              and (field.is_required()
                   or re.search(rf"\b{name}\b[^;.:]*\brequired", error.message))]
    if not wanted:
        return error
    given = [key for key in keys if key.startswith(table + ".")]
    words = " ".join(f"{key} VALUE" for key in given + [f"{table}.{name}" for name in wanted])
    message = error.message.rstrip(".")
    joint = "\n" if "\n" in message else "; "
    return cfg.ConfigError(f"{message}{joint}an account's required keys go in together, in "
                           f"one call: chatkernel config set {words}", path=error.path,
                           key=error.key)


@config.command("unset")
@click.argument("key")
@config_option
def config_unset(config_file: str | None, key: str) -> None:
    """Remove a dotted key (its default applies again)."""
    from chatkernel.core import config as cfg

    path = cfg.config_path(config_file)
    document = cfg.read_document(path)
    if not cfg.unset_key(document, key, path=path):
        raise cfg.ConfigError("not set in the file", path=path, key=key)
    cfg.write_raw(path, document)


@config.command("validate")
@config_option
def config_validate(config_file: str | None) -> None:
    """Check the config as `run` does, starting nothing: kernel sections, ${ENV}
    references, every channel account (built as the gateway builds it), the agent kind
    and the listen address's control token."""
    from chatkernel.core import config as cfg
    from chatkernel.core.plugins import collect_channels
    from chatkernel.core.gateway.process import check_startup

    path = cfg.config_path(config_file)
    raw = cfg.read_raw(path)
    config = cfg.parse(raw, path=path)
    _validate_channels(raw, path, strict_env=True)
    pm = _plugin_manager()
    checked = check_startup(config, config_path=path, pm=pm)
    if checked.unanswered:
        click.echo(f"note: no default agent: the chats no binding matches go unanswered in "
                   f"{', '.join(checked.unanswered)}", err=True)
    where = str(path) if path.exists() else f"{path} (missing: defaults apply)"
    installed = collect_channels(pm)  # without its plugin, the implied web chat does not run
    accounts = sorted(f"{channel}:{account}" for channel, account, enabled, _ in
                      cfg.effective_accounts(config, pm) if enabled and channel in installed)
    click.echo(f"ok: {where}, {len(accounts)} channel account(s)"
               + (f": {', '.join(accounts)}" if accounts else ""))


def _validate_channels(raw: dict[str, Any], path, *, strict_env: bool) -> int:
    """Validate ``[channels.*]`` with the installed channel plugins' account models."""
    from chatkernel.core import config as cfg
    from chatkernel.core.plugins import collect_channels

    tables = raw.get("channels") or {}
    if not tables:
        return 0
    pm = _plugin_manager()
    channels = collect_channels(pm)
    count = 0
    for name, table in tables.items():
        if name == "defaults":
            continue
        if name not in channels:
            raise cfg.unknown_channel(name, channels, path=path,
                                      left_out=pm.channel_left_out(name))
        for account, data in (table.get("accounts") or {}).items():
            resolved = cfg.resolve_env(data, key=f"channels.{name}.accounts.{account}",
                                       path=path, strict=strict_env)
            cfg.validate_account(channels[name].account_model, resolved, channel=name,
                                 account=account, path=path)
            count += 1
    return count


# `chatkernel pairing`: its module adds its group to `cli` (it imports the helpers above).
import chatkernel.cli_pairing  # noqa: E402,F401

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
