"""What `chatkernel plugins --json` imports: its start-up is a benchmarked target (at most
2.5x `import pluggy, click`, bench/startup.py), and one heavy import on that path (the
config schema, through the built-in heartbeat plugin) once cost it half. Listing the
plugins loads every installed plugin and the built-ins, but none of the run-time stack."""

from __future__ import annotations

import json
import subprocess
import sys

#: Modules `plugins --json` must not import (what the gateway needs only when it runs).
HEAVY = ("pydantic", "aiohttp", "anyio", "prometheus_client", "markdown_it", "orjson",
         "tomlkit", "tomli_w", "slack_sdk", "cryptography", "qrcode", "chatkernel.core.config",
         "chatkernel.core.kernel", "chatkernel.testing")

#: Runs the command as the console script does, then names every module imported.
SCRIPT = """\
import contextlib, io, json, sys
from chatkernel.cli import main
sys.argv = ["chatkernel", "plugins", "--json"]
listed = io.StringIO()
with contextlib.redirect_stdout(listed):
    try:
        main()
    except SystemExit as exit:
        assert not exit.code, exit.code
print(json.dumps({"listed": json.loads(listed.getvalue()), "modules": sorted(sys.modules)}))
"""


def test_listing_the_plugins_imports_none_of_the_run_time_stack(tmp_path):
    env = {"CHATKERNEL_HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                            env=env, timeout=60, check=True)
    found = json.loads(result.stdout)
    # The four channel plugins are installed in this environment, and were loaded.
    assert {"slack", "telegram", "wechat", "whatsapp"} <= {p["name"] for p in found["listed"]}
    assert {"chatkernel_slack", "chatkernel_wechat"} <= set(found["modules"])
    heavy = sorted(name for name in found["modules"]
                   if any(name == h or name.startswith(h + ".") for h in HEAVY))
    assert heavy == [], f"`chatkernel plugins --json` imported {heavy}"


def test_every_command_is_named_where_the_cli_finds_it_lazily():
    """Each command module is imported only when its command is asked for: the group's
    table names every command and the module that defines it, a new one included."""
    import importlib
    import pkgutil

    import chatkernel.cli as package

    for module in pkgutil.iter_modules(package.__path__):
        if module.name != "__main__":  # `python -m chatkernel.cli` runs the CLI
            importlib.import_module(f"chatkernel.cli.{module.name}")
    defined = {name: command.callback.__module__
               for name, command in package.cli.commands.items()}
    assert defined == {name: f"chatkernel.cli.{module}"
                       for name, module in package.cli.lazy.items()}
