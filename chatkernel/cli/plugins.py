"""``chatkernel plugins``."""

from __future__ import annotations

import json

import click

from chatkernel.cli import cli


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@click.option("--all", "show_all", is_flag=True, help="Include the built-in plugins.")
@click.option("--hook", "hook_name", metavar="NAME", help="Only plugins implementing this hook.")
def plugins(as_json: bool, show_all: bool, hook_name: str | None) -> None:
    """List installed plugins, their hooks, and any that failed to load or that the
    environment leaves out."""
    from chatkernel.cli import _plugin_manager
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
