"""Built-in slash commands: /help, /status, /new, /queue, /heartbeat, /remind, /whoami."""

from __future__ import annotations

import time

from chatkernel.sdk.models import Command
from chatkernel.hookspecs import hookimpl


def _help(ctx) -> str:
    seen: dict[str, Command] = {}
    for command in ctx.gateway.commands().values():
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
    from chatkernel.core.health.probes import account_problems

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
    gateway = ctx.gateway
    session = ctx.session
    settings = gateway.queue_settings(session.key)
    running, waiting = gateway.queue_state(session.key)
    busy = "running a turn" if running else "idle"
    now = time.time()
    uptime = _age(now - gateway.started_at) if gateway.started_at else "?"
    name, kind = gateway.session_agent(session)
    kind = kind or "no longer configured"
    agent = kind if name == "default" else f"{name} ({kind})"
    lines = [
        f"chatkernel is up ({uptime}); agent: {agent}",
        _account_health(ctx.account, now),
        f"session: {session.key} ({busy}, {waiting} waiting)",
        f"queue: {settings.mode}, debounce {settings.debounce_ms} ms, cap {settings.cap}, "
        f"drop {settings.drop}",
        f"access level: {gateway.access_level(session, ctx.account)}",
        _heartbeat_line(gateway.heartbeats, session.key),
    ]
    from chatkernel.core.health.probes import account_problems

    others = [account.key for account in gateway.accounts()
              if account is not ctx.account and account_problems(
                  account.runtime.effective_state(now), account.runtime,
                  account.runtime.last_probe)]
    if others:
        lines.append(f"other accounts with problems: {', '.join(sorted(others))} "
                     "(chatkernel health says why)")
    return "\n".join(lines)


def _heartbeat_line(heartbeats, session_key: str) -> str:
    info = heartbeats.status(session_key)
    if info is None:
        return "heartbeat: none in this session (/heartbeat every 30m <what to check>)"
    from chatkernel.core.durations import format_interval

    if info["paused"]:
        when = "paused"
    elif info["next_in_seconds"] is not None:
        when = f"next in {format_interval(info['next_in_seconds'])}"
    else:
        when = "not scheduled"
    return f"heartbeat: every {info['every']}, {when}"


async def _new(ctx) -> str:
    await ctx.gateway.reset_session(ctx.session)
    return "Started a fresh session: the agent will not see the earlier conversation."


async def _queue(ctx) -> str:
    args = ctx.args.strip()
    if args == "reset":
        await ctx.gateway.update_session(ctx.session, queue=None)
        settings = ctx.gateway.queue_settings(ctx.session.key)
        return f"Queue settings reset: {settings.mode}."
    if args:
        from chatkernel.core.inbound.queue import parse_queue_args

        try:
            changes = parse_queue_args(args)
        except ValueError as exc:
            return f"/queue: {exc}. Usage: /queue <mode> [debounce:2s cap:25 drop:summarize]"
        override = dict(ctx.session.settings.get("queue") or {})
        override.update(changes)
        await ctx.gateway.update_session(ctx.session, queue=override)
    settings = ctx.gateway.queue_settings(ctx.session.key)
    return (f"queue: {settings.mode}, debounce {settings.debounce_ms} ms, cap {settings.cap}, "
            f"drop {settings.drop}")


HEARTBEAT_USAGE = ("Usage: /heartbeat every <interval> <what to check> (at least 1m), "
                   "/heartbeat [status], pause, resume, clear, tz [<IANA zone>|local]")


async def _heartbeat(ctx) -> str:
    """``/heartbeat`` (``/hb``): this session's own heartbeat."""
    from chatkernel.core.durations import parse_interval
    from chatkernel.core.heartbeat.jobs import HeartbeatError

    heartbeats = ctx.gateway.heartbeats
    key = ctx.session.key
    action, _, rest = ctx.args.strip().partition(" ")
    if not action.strip():  # "/heartbeat" alone, maybe followed by a newline
        action, rest = "status", ""
    action, rest = action.lower().strip(), rest.strip()
    try:
        if action == "status":
            return _heartbeat_status(ctx)
        if action == "every":
            interval, _, prompt = rest.partition(" ")
            if "\n" in interval:
                interval, _, more = interval.partition("\n")
                prompt = f"{more} {prompt}"
            try:
                seconds = parse_interval(interval)
            except ValueError as exc:
                return f"/heartbeat: {exc}. {HEARTBEAT_USAGE}"
            replaced = heartbeats.status(key) is not None
            await heartbeats.set(key, seconds, prompt)
            return (f"Heartbeat {'replaced' if replaced else 'set'}: every "
                    f"{_span(seconds)}, first run in {_span(seconds)}.")
        if action == "pause":
            await heartbeats.pause(key)
            return "Heartbeat paused. /heartbeat resume starts it again."
        if action == "resume":
            every = (await heartbeats.resume(key))["every_seconds"]
            return f"Heartbeat resumed: next run in {_span(every)}."
        if action == "clear":
            if await heartbeats.clear(key):
                return "Heartbeat cleared."
            return "There is no heartbeat in this session."
        if action == "tz":
            return await _heartbeat_zone(ctx, rest)
    except HeartbeatError as exc:
        return f"/heartbeat: {exc}."
    return f"/heartbeat: unknown action {action!r}. {HEARTBEAT_USAGE}"


def _span(seconds: float) -> str:
    from chatkernel.core.durations import format_interval

    return format_interval(seconds)


def _heartbeat_status(ctx) -> str:
    heartbeats = ctx.gateway.heartbeats
    info = heartbeats.status(ctx.session.key)
    zone = ctx.session.settings.get("timezone")
    if info is None:
        return ("No heartbeat in this session. Set one: /heartbeat every 30m <what to check>."
                + (f"\nTime zone: {zone}." if zone else ""))
    lines = [f"Heartbeat: every {info['every']}: {info['prompt']}"]
    if info["paused"]:
        lines.append("Paused (/heartbeat resume).")
    elif info["running"]:
        lines.append("Running now.")
    elif info["waiting_for"]:
        lines.append("Due: waits for this chat to be idle.")
    elif info["next_in_seconds"] is not None:
        lines.append(f"Next run in {_span(info['next_in_seconds'])}.")
    if info["last_run_at"] is not None:
        ago = _span(max(0.0, heartbeats.now() - info["last_run_at"]))
        lines.append(f"Last run {ago} ago: {info['last_outcome']}.")
    if zone:
        lines.append(f"Time zone: {zone}.")
    return "\n".join(lines)


async def _heartbeat_zone(ctx, zone: str) -> str:
    """The session's own time zone: what active_hours timezone = "user" means here."""
    from chatkernel.core.config import check_timezone

    if not zone:
        current = ctx.session.settings.get("timezone") or "local (the gateway's)"
        return f"Time zone: {current}. Set one: /heartbeat tz Europe/Berlin"
    if zone == "local":
        await ctx.gateway.update_session(ctx.session, timezone=None)
        ctx.gateway.heartbeats.reconsider()
        return "Time zone: local (the gateway's)."
    try:
        check_timezone(zone)
    except ValueError as exc:
        return f"/heartbeat: {exc}."
    await ctx.gateway.update_session(ctx.session, timezone=zone)
    ctx.gateway.heartbeats.reconsider()  # quiet hours may have ended here
    return f"Time zone: {zone}."


def _whoami(ctx) -> str:
    message = ctx.message
    name = f" ({message.sender_name})" if message.sender_name else ""
    lines = [f"You are {message.sender_id}{name} on {message.channel}:{message.account}.",
             f"chat: {message.chat_id}" + (f", thread {message.thread_id}"
                                            if message.thread_id else "")]
    return "\n".join(lines)


REMIND_USAGE = "Usage: /remind <in> <what> (such as /remind 20m check the oven), " \
               "/remind list, /remind cancel <id>"


async def _remind(ctx) -> str:
    """``/remind``: a one-shot job delivered to this chat (docs/jobs.md)."""
    from chatkernel.core.durations import parse_interval
    from chatkernel.core.jobs.book import JobError

    reminders = ctx.gateway.reminders
    key = ctx.session.key
    action, _, rest = ctx.args.strip().partition(" ")
    if action in ("", "list"):
        waiting = reminders.list(key)
        if not waiting:
            return f"No reminders in this chat. {REMIND_USAGE}"
        now = reminders.now()
        return "\n".join(["Reminders:"] + [
            f"{item['id']}  in {_span(max(0.0, item['at'] - now))}: {item['text']}"
            for item in waiting])
    if action == "cancel":
        if await reminders.cancel(key, rest.strip()):
            return "Reminder cancelled."
        return f"This chat has no reminder {rest.strip()!r} (/remind list)."
    try:
        seconds = parse_interval(action)
    except ValueError as exc:
        return f"/remind: {exc}. {REMIND_USAGE}"
    message = ctx.message
    target = f"{message.channel}:{message.account}:{message.chat_id}"
    try:
        added = await reminders.add(key, target, seconds, rest)
    except JobError as exc:
        return f"/remind: {exc}."
    return f"Reminder {added['id']} set: in {_span(seconds)}, {added['text']}."


BUILTIN_COMMANDS = (
    Command("help", _help, "list the commands"),
    Command("status", _status, "gateway and session status, without the agent"),
    Command("new", _new, "start a fresh session", aliases=("reset",)),
    Command("queue", _queue, "show or set how messages queue while busy: "
            "/queue <collect|followup|interrupt|steer> [debounce:2s cap:25 drop:old|new|summarize]"
            ", /queue reset"),
    Command("heartbeat", _heartbeat, "a periodic check in this chat: /heartbeat every "
            "<interval> <what to check>, /heartbeat [status|pause|resume|clear|tz <zone>]",
            aliases=("hb",)),
    Command("remind", _remind, "a reminder in this chat: /remind 20m <what>, /remind list, "
            "/remind cancel <id>"),
    Command("whoami", _whoami, "your sender id (for allowlists) and this chat"),
)


@hookimpl(trylast=True)
def register_commands(register):
    for command in BUILTIN_COMMANDS:
        register(command)
