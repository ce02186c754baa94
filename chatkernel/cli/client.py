"""The CLI's client of the running gateway's control API, and the fallback that does the
work here, with a kernel of its own, when no gateway runs."""

from __future__ import annotations

from typing import Any

import click

from chatkernel import __version__
from chatkernel.cli.local import load_config


#: The exit status when the gateway took a send but gave no answer: it may have gone out.
EXIT_SEND_UNKNOWN = 3


def running_gateway():
    """What ``gateway.json`` says of the running gateway (None: none runs)."""
    from chatkernel.core import config as cfg
    from chatkernel.core.gateway_state import read_state

    return read_state(cfg.home_dir())


def control_or_direct(config_file: str | None, path: str, body: dict[str, Any],
                      direct, *, timeout: float = 30.0,
                      unanswered: str | None = None) -> dict[str, Any]:
    """Ask the running gateway; with none, do it here with a kernel of our own (which
    holds the home's lock meanwhile).

    ``unanswered``: what it means when the gateway took the request and gave no answer
    in time (then the exit status is 3); without it, that is an error like any other."""
    from chatkernel.cli import _plugin_manager
    from chatkernel.core.gateway.control import call

    info = running_gateway()
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

    config, config_path = load_config(config_file)
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


def presence(reason: str) -> dict[str, Any]:
    """Who this CLI is, for the gateway's presence table (a stable id, no file)."""
    import os
    import platform
    import socket

    host = socket.gethostname()
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return {"instance_id": f"cli-{host}-{uid}", "mode": "cli", "reason": reason,
            "host": host, "version": __version__,
            "platform": f"{platform.system()} {platform.machine()}"}


def ask_gateway(path: str, body: dict[str, Any], timeout: float):
    """``(gateway info, answer, error)``: the answer of the running gateway, or why none."""
    from chatkernel.core.gateway.control import call

    info = running_gateway()
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
