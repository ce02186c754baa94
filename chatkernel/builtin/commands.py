"""Built-in slash commands: /help, /status, /new, /queue, /whoami."""

from __future__ import annotations

import time

from chatkernel.core.models import Command
from chatkernel.hookspecs import hookimpl


def _help(ctx) -> str:
    seen: dict[str, Command] = {}
    for command in ctx.kernel.commands.values():
        seen.setdefault(command.name, command)
    lines = ["Commands:"]
    for name in sorted(seen):
        command = seen[name]
        aliases = "".join(f", /{alias}" for alias in command.aliases)
        lines.append(f"/{name}{aliases} — {command.help}")
    lines.append("Anything else goes to the agent.")
    return "\n".join(lines)


def _age(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _account_health(account, now: float) -> str:
    """One line: this account's state, its last probe, its restarts."""
    from chatkernel.core.health import account_problems

    runtime = account.runtime
    state = runtime.effective_state(now)
    probe = runtime.last_probe
    if probe is None:
        probed = "not probed yet"
    else:
        when = f", {_age(now - runtime.last_probe_at)} ago" if runtime.last_probe_at else ""
        probed = f"probe {'ok' if probe.ok else 'FAILED'}: {probe.detail}{when}"
    verdict = "healthy" if not account_problems(state, runtime, probe) else "UNHEALTHY"
    return (f"account: {account.key} {state}, {verdict}; {probed}; "
            f"{runtime.restarts_last_hour(now)} restart(s) in the last hour")


def _status(ctx) -> str:
    kernel = ctx.kernel
    session = ctx.session
    settings = kernel.queue_settings(session.key)
    busy = "running a turn" if kernel.queue.is_busy(session.key) else "idle"
    waiting = len(kernel.queue.lane(session.key).pending)
    now = time.time()
    uptime = _age(now - kernel.started_at) if kernel.started_at else "?"
    lines = [
        f"chatkernel is up ({uptime}); agent: {kernel.config.agent.kind}",
        _account_health(ctx.account, now),
        f"session: {session.key} ({busy}, {waiting} waiting)",
        f"queue: {settings.mode}, debounce {settings.debounce_ms} ms, cap {settings.cap}, "
        f"drop {settings.drop}",
        f"access level: {ctx.account.access_level}",
    ]
    from chatkernel.core.health import account_problems

    others = [account.key for account in kernel.accounts.values()
              if account is not ctx.account and account_problems(
                  account.runtime.effective_state(now), account.runtime,
                  account.runtime.last_probe)]
    if others:
        lines.append(f"other accounts with problems: {', '.join(sorted(others))} "
                     "(chatkernel health says why)")
    return "\n".join(lines)


async def _new(ctx) -> str:
    await ctx.kernel.sessions.reset(ctx.session)
    return "Started a fresh session: the agent will not see the earlier conversation."


async def _queue(ctx) -> str:
    args = ctx.args.strip()
    if args == "reset":
        await ctx.kernel.sessions.update_settings(ctx.session, queue=None)
        settings = ctx.kernel.queue_settings(ctx.session.key)
        return f"Queue settings reset: {settings.mode}."
    if args:
        from chatkernel.core.queue import parse_queue_args

        try:
            changes = parse_queue_args(args)
        except ValueError as exc:
            return f"/queue: {exc}. Usage: /queue <mode> [debounce:2s cap:25 drop:summarize]"
        override = dict(ctx.session.settings.get("queue") or {})
        override.update(changes)
        await ctx.kernel.sessions.update_settings(ctx.session, queue=override)
    settings = ctx.kernel.queue_settings(ctx.session.key)
    return (f"queue: {settings.mode}, debounce {settings.debounce_ms} ms, cap {settings.cap}, "
            f"drop {settings.drop}")


def _whoami(ctx) -> str:
    message = ctx.message
    name = f" ({message.sender_name})" if message.sender_name else ""
    lines = [f"You are {message.sender_id}{name} on {message.channel}:{message.account}.",
             f"chat: {message.chat_id}" + (f", thread {message.thread_id}"
                                            if message.thread_id else "")]
    return "\n".join(lines)


BUILTIN_COMMANDS = (
    Command("help", _help, "list the commands"),
    Command("status", _status, "gateway and session status, without the agent"),
    Command("new", _new, "start a fresh session", aliases=("reset",)),
    Command("queue", _queue, "show or set how messages queue while busy: "
            "/queue <collect|followup|interrupt|steer> [debounce:2s cap:25 drop:old|new|summarize]"
            ", /queue reset"),
    Command("whoami", _whoami, "your sender id (for allowlists) and this chat"),
)


@hookimpl(trylast=True)
def register_commands(register):
    for command in BUILTIN_COMMANDS:
        register(command)
