"""``pip install`` of the distribution enables the channel, ``pip uninstall`` removes it,
as a user's environment sees it: a venv of its own with the kernel and its dependencies
(this interpreter's packages, less this plugin's editable install)."""

from __future__ import annotations

import json
import site
import subprocess
import sys
import venv
from importlib.metadata import entry_points
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]


def run(*args: object, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                          timeout=180, check=False)


def a_venv_without_this_plugin(root: Path) -> Path:
    """A venv seeing this interpreter's packages through a folder of links to each, less
    this plugin's (its editable install would list it before any pip install)."""
    path = root / "venv"
    venv.EnvBuilder(with_pip=False).create(path)
    (site_dir,) = path.glob("lib/python*/site-packages")
    links = root / "kernel-site"
    links.mkdir()
    for directory in filter(Path.is_dir, map(Path, site.getsitepackages())):
        for entry in directory.iterdir():
            if "chatkernel_discord" in entry.name or "chatkernel-discord" in entry.name or \
                    (links / entry.name).exists():
                continue
            (links / entry.name).symlink_to(entry)
    (site_dir / "_kernel_site.pth").write_text(f"import site; site.addsitedir({str(links)!r})\n")
    script = next(e for e in entry_points(group="console_scripts") if e.name == "chatkernel")
    launcher = path / "bin" / "chatkernel"
    launcher.write_text(f"#!{path / 'bin' / 'python'}\nimport sys\n"
                        f"from {script.module} import {script.attr}\n"
                        f"sys.exit({script.attr}())\n")
    launcher.chmod(0o755)
    return path


def listed(environment: Path, cwd: Path) -> list[str]:
    result = run(environment / "bin" / "chatkernel", "plugins", "--json", cwd=cwd)
    assert result.returncode == 0, result.stderr
    return [plugin["name"] for plugin in json.loads(result.stdout)]


@pytest.mark.slow
def test_pip_install_enables_the_channel_and_uninstall_removes_it(tmp_path):
    environment = a_venv_without_this_plugin(tmp_path)
    assert "discord" not in listed(environment, tmp_path)
    pip = [sys.executable, "-m", "pip", "--python", environment / "bin" / "python"]
    installed = run(*pip, "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", PROJECT, cwd=tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "discord" in listed(environment, tmp_path)
    removed = run(*pip, "uninstall", "--yes", "chatkernel-discord", cwd=tmp_path)
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert "discord" not in listed(environment, tmp_path)
