"""``chatkernel service install | uninstall | status``: the gateway as a systemd service,
system-wide or for the user (docs/operations.md, "Running as a service")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import click

from chatkernel.cli import cli
from chatkernel.cli.options import config_option

#: The unit's name.
UNIT = "chatkernel.service"
#: How long systemd waits for the gateway to stop before it kills it: the gateway's
#: drain (chatkernel.core.gateway.process.DRAIN_SECONDS) and the store's close, with room.
STOP_SECONDS = 30

user_option = click.option("--user", "user", is_flag=True,
                           help="A unit of the user's own service manager (systemctl --user), "
                                "not the system's.")
dry_run_option = click.option("--dry-run", is_flag=True,
                              help="Print what would be written and run; change nothing.")


@cli.group()
@config_option
def service() -> None:
    """Run the gateway as a systemd service."""


def unit_path(user: bool) -> Path:
    """Where the unit goes: the user's units, or the system's."""
    if user:
        base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        return base / "systemd" / "user" / UNIT
    return Path("/etc/systemd/system") / UNIT


def executable() -> list[str]:
    """The command that runs this chatkernel: its script beside this Python, else
    ``python -m chatkernel.cli``."""
    script = Path(sys.executable).parent / "chatkernel"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "chatkernel.cli"]


def unit_text(config: Path, home: Path, writable: list[Path], *, user: bool,
              command: list[str] | None = None, run_as: str | None = None) -> str:
    """The unit: ``chatkernel run --config CONFIG`` restarted on failure, given time to
    drain on stop, reloaded by SIGHUP, sandboxed (no new privileges, the file system
    read-only but ``writable``, a private /tmp)."""
    command = command or executable()
    paths = " ".join(_quote(str(path)) for path in dict.fromkeys(writable))
    lines = [
        "[Unit]",
        "Description=chatkernel gateway",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        *([f"User={run_as}"] if run_as and not user else []),
        f"Environment={_quote(f'CHATKERNEL_HOME={home}')}",
        f"ExecStart={' '.join(_quote(part) for part in [*command, 'run', '--config', str(config)])}",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "Restart=on-failure",
        "RestartSec=5",
        f"TimeoutStopSec={STOP_SECONDS}",
        "KillMode=mixed",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        f"ReadWritePaths={paths}",
        "PrivateTmp=yes",
        "",
        "[Install]",
        f"WantedBy={'default.target' if user else 'multi-user.target'}",
    ]
    return "\n".join(lines) + "\n"


def _quote(word: str) -> str:
    """A word of a unit's command line or setting, quoted when it has a space."""
    if any(c in word for c in " \t\"\\"):
        return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return word


def _unit_for(config_file: str | None, user: bool) -> tuple[Path, str]:
    from chatkernel.cli.local import load_config
    from chatkernel.core import config as cfg

    config, path = load_config(config_file)
    home = cfg.home_dir().resolve()
    writable = [home]
    for extra in (config.store_path().parent if config.store.backend == "sqlite" else None,
                  config.workspace()):
        if extra is not None and not extra.resolve().is_relative_to(home):
            writable.append(extra.resolve())
    run_as = None if user else _user_name()
    return unit_path(user), unit_text(path.resolve(), home, writable, user=user,
                                      run_as=run_as)


def _user_name() -> str | None:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return None


def _systemctl(user: bool, *args: str) -> list[str]:
    return ["systemctl", *(["--user"] if user else []), *args]


def _run(commands: list[list[str]], dry_run: bool) -> None:
    for command in commands:
        # On stderr: --dry-run's stdout is the unit alone.
        click.echo(("would run: " if dry_run else "running: ") + " ".join(command), err=True)
        if dry_run:
            continue
        if shutil.which(command[0]) is None:
            raise click.ClickException(f"{command[0]} is not installed: is this a systemd "
                                       "system?")
        done = subprocess.run(command, check=False)
        if done.returncode != 0:
            raise click.ClickException(f"{' '.join(command)} failed (exit {done.returncode})")


@service.command("install")
@user_option
@dry_run_option
@config_option
def service_install(user: bool, dry_run: bool, config_file: str | None) -> None:
    """Write the unit, then enable and start it. With --dry-run, print the unit it
    would write (and the commands) instead."""
    path, text = _unit_for(config_file, user)
    commands = [_systemctl(user, "daemon-reload"), _systemctl(user, "enable", "--now", UNIT)]
    if dry_run:
        click.echo(f"# {path}")
        click.echo(text, nl=False)
        _run(commands, dry_run=True)
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except PermissionError:
        raise click.ClickException(f"cannot write {path}: run as root, or install a unit "
                                   "of your own with --user") from None
    click.echo(f"wrote {path}")
    _run(commands, dry_run=False)
    click.echo(f"chatkernel runs as {UNIT}: systemctl {'--user ' if user else ''}status "
               f"{UNIT}; chatkernel logs --follow")


@service.command("uninstall")
@user_option
@dry_run_option
@config_option
def service_uninstall(user: bool, dry_run: bool) -> None:
    """Stop and disable the unit, then remove it."""
    path = unit_path(user)
    if not path.exists() and not dry_run:
        raise click.ClickException(f"no unit at {path}: nothing to uninstall")
    _run([_systemctl(user, "disable", "--now", UNIT)], dry_run)
    if dry_run:
        click.echo(f"would remove {path}", err=True)
        _run([_systemctl(user, "daemon-reload")], dry_run)
        return
    path.unlink()
    click.echo(f"removed {path}")
    _run([_systemctl(user, "daemon-reload")], dry_run)


@service.command("status")
@user_option
@config_option
def service_status(user: bool) -> None:
    """Whether the unit is installed, and systemd's account of it."""
    path = unit_path(user)
    if not path.exists():
        click.echo(f"not installed (no {path}): chatkernel service install"
                   f"{' --user' if user else ''}")
        sys.exit(3)
    click.echo(f"installed: {path}")
    if shutil.which("systemctl") is None:
        raise click.ClickException("systemctl is not installed")
    sys.exit(subprocess.run(_systemctl(user, "status", "--no-pager", UNIT),
                            check=False).returncode)
