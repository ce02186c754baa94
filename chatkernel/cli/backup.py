"""``chatkernel backup [PATH]`` and ``chatkernel restore PATH``: the home's state, config
and env file in one archive, and back (chatkernel.core.store.backup,
docs/operations.md)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from chatkernel.cli import cli
from chatkernel.cli.options import config_option


@cli.command()
@click.argument("path", required=False, type=click.Path(dir_okay=False, path_type=Path))
@config_option
def backup(path: Path | None, config_file: str | None) -> None:
    """Write one archive (tar.gz, mode 0600) of the state (copied consistently while the
    gateway runs), the config file and the home's .env, with a manifest of checksums.

    PATH defaults to $CHATKERNEL_HOME/backups/chatkernel-<time>.tar.gz.
    """
    import anyio

    from chatkernel.cli.local import load_config
    from chatkernel.core import config as cfg
    from chatkernel.core.store import backup as backups

    config, config_path = load_config(config_file)
    home = cfg.home_dir()
    if path is None:
        path = home / "backups" / f"chatkernel-{time.strftime('%Y%m%d-%H%M%S')}.tar.gz"
    try:
        manifest = anyio.run(backups.create, config, config_path, home, path)
    except backups.BackupError as exc:
        raise click.ClickException(str(exc)) from None
    files = ", ".join(entry["name"] for entry in manifest["files"])
    click.echo(f"wrote {path} ({files}; state schema {manifest['store']['schema']})")


@cli.command()
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@config_option
def restore(path: Path, config_file: str | None) -> None:
    """Restore an archive `chatkernel backup` wrote into this home, with no gateway
    running. What it replaces is kept beside it (NAME.before-restore-<time>). Refuses
    a newer schema and a checksum that does not match.

    The config goes where --config names (a file that must exist, as for every
    command), else to $CHATKERNEL_HOME/config.toml.
    """
    import anyio

    from chatkernel.core import config as cfg
    from chatkernel.core.gateway.homelock import HomeInUse, HomeLock
    from chatkernel.core.store import backup as backups

    if not path.is_file():
        raise click.ClickException(f"{path}: no such backup")
    home = cfg.home_dir()
    config_path = cfg.config_path(config_file)

    def locate(archived: Path | None) -> tuple[Path, str | None]:
        # Where the state goes: as this home's config says, else as the archive's does.
        for source in (config_path, archived):
            if source is not None and source.exists():
                config = cfg.parse(cfg.read_raw(source), strict_env=False)
                return config.store_path(), config.store.url
        return home / "state.db", None

    try:
        with HomeLock(home, "chatkernel restore"):
            done = anyio.run(backups.restore, path, home, config_path, locate)
    except HomeInUse as exc:
        raise click.ClickException(f"{exc}: stop the gateway before a restore") from None
    except backups.BackupError as exc:
        raise click.ClickException(str(exc)) from None
    for file in done.files:
        click.echo(f"restored {file}")
    if done.redis_keys:
        click.echo(f"restored {done.redis_keys} Redis key(s)")
    for kept in done.aside:
        click.echo(f"kept the previous one as {kept}")
    click.echo("start the gateway: unsent replies go out once, in order")
