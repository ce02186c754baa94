"""The plugin template (cookiecutter-plugin/): each transport bakes into the expected
files, installs, is listed by ``chatkernel plugins``, imports nothing private, and
passes its own tests (the kernel's contract suite against its fake) unchanged.

One virtual environment serves the session: made with ``--system-site-packages`` from
this interpreter, it has the kernel and its dependencies already, so installing a baked
plugin needs neither the network nor a build of its dependencies.
"""

from __future__ import annotations

import importlib.util
import json
import site
import subprocess
import sys
import venv
from importlib.metadata import entry_points
from pathlib import Path

import click
import pytest
from cookiecutter.main import cookiecutter

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "cookiecutter-plugin"
TRANSPORTS = ("polling", "webhook", "socket")

#: What every transport bakes (the files differ inside, by Jinja conditionals).
EXPECTED_FILES = {
    ".gitignore",
    "README.md",
    "pyproject.toml",
    "docs/{name}.md",
    "chatkernel_{name}/__init__.py",
    "chatkernel_{name}/channel.py",
    "chatkernel_{name}/fake.py",
    "chatkernel_{name}/contract.py",
    "chatkernel_{name}/devserver.py",
    "tests/test_config_example.py",
    "tests/test_contract.py",
    "tests/test_devserver.py",
    "tests/test_{name}.py",
}


def _public_api_check():
    """tests/test_public_api.py, whose private-import check the baked code must pass."""
    spec = importlib.util.spec_from_file_location("_public_api_check",
                                                  Path(__file__).with_name("test_public_api.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


private_imports = _public_api_check().private_imports


def _guides():
    """tests/test_channel_guides.py, whose runner pastes a README's block into bash."""
    path = Path(__file__).with_name("test_channel_guides.py")
    spec = importlib.util.spec_from_file_location("_guides", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


guides = _guides()


def bake(output: Path, **context: str) -> Path:
    return Path(cookiecutter(str(TEMPLATE), no_input=True, extra_context=context,
                             output_dir=str(output)))


def run(args: list[str | Path], *, cwd: Path, timeout: float = 90,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False, env=env)


@pytest.fixture(scope="session")
def plugin_venv(tmp_path_factory) -> Path:
    """A venv that sees this interpreter's packages (the kernel included), with the
    ``chatkernel`` command, for baked plugins."""
    path = tmp_path_factory.mktemp("plugin-venv") / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(path)
    # This interpreter is itself a venv's, whose packages --system-site-packages does
    # not reach: a .pth adds its site directories (their own .pth files included).
    (site_dir,) = path.glob("lib/python*/site-packages")
    (site_dir / "_kernel_site.pth").write_text("".join(
        f"import site; site.addsitedir({d!r})\n" for d in site.getsitepackages()))
    # The kernel's console script, as an installer writes it.
    script = next(e for e in entry_points(group="console_scripts") if e.name == "chatkernel")
    launcher = path / "bin" / "chatkernel"
    launcher.write_text(f"#!{path / 'bin' / 'python'}\nimport sys\n"
                        f"from {script.module} import {script.attr}\n"
                        f"sys.exit({script.attr}())\n")
    launcher.chmod(0o755)
    return path


def pip_install(venv_path: Path, project: Path) -> None:
    # The venv has no pip of its own: this interpreter's pip installs into it.
    result = run([sys.executable, "-m", "pip", "--python", venv_path / "bin" / "python",
                  "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
                  project], cwd=project, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_baked_plugin_installs_is_listed_and_passes_its_own_tests(
        transport, tmp_path, plugin_venv):
    name = f"tpl{transport}"
    project = bake(tmp_path, channel_name=name, author="Ada Example", transport=transport,
                   description=f"A {transport} test channel")
    assert project.name == f"chatkernel-{name}"
    files = {str(p.relative_to(project)) for p in project.rglob("*") if p.is_file()}
    assert files == {f.format(name=name) for f in EXPECTED_FILES}
    sources = {path: path.read_text() for path in project.rglob("*.py")}
    offenders = {str(p): names for p, source in sources.items()
                 if (names := private_imports(source))}
    assert offenders == {}
    assert "{{" not in "".join(p.read_text() for p in project.rglob("*") if p.is_file())

    pip_install(plugin_venv, project)
    bin_dir = plugin_venv / "bin"
    listed = run([bin_dir / "chatkernel", "plugins", "--json"], cwd=tmp_path, timeout=60)
    assert listed.returncode == 0, listed.stderr
    entry = next((p for p in json.loads(listed.stdout) if p["name"] == name), None)
    assert entry == {"name": name, "version": "0.1.0", "distribution": f"chatkernel-{name}",
                     "hooks": ["register_channels"], "builtin": False}

    # Its config example, turned on, validates: the baked suite's test_config_example.

    # The README's "Try it offline" block works pasted as one block.
    pasted = guides.paste_block(guides.shell_block(project / "README.md", "## Try it offline"),
                                tmp_path / "paste", path=(bin_dir,), cwd=project)
    assert [m["text"] for m in pasted.sent()] == ["hello"], pasted.report()

    # Nothing it does warns of a deprecated name.
    tests = run([bin_dir / "python", "-m", "pytest", project / "tests", "-q",
                 "-p", "no:cacheprovider", "-W", "error::DeprecationWarning"],
                cwd=project, timeout=120)
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    summary = tests.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "skipped" not in summary, \
        summary

    # Its .gitignore keeps out what building, installing and testing it left behind
    # (pip's build/ and *.egg-info, __pycache__) and a virtual environment.
    (project / ".venv" / "bin").mkdir(parents=True)
    (project / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert run(["git", "init", "-q"], cwd=project).returncode == 0
    added = run(["git", "add", "--all", "--dry-run"], cwd=project)
    assert added.returncode == 0, added.stderr
    assert {line.removeprefix("add ").strip("'") for line in added.stdout.splitlines()} == \
        {f.format(name=name) for f in EXPECTED_FILES}


def test_the_readme_installs_the_test_extra_which_has_what_the_tests_import(tmp_path):
    """``pip install -e '.[testing]'`` in a fresh environment gives the baked tests all they
    import: pytest is not a dependency of the kernel, so without the extra
    ``python -m pytest`` fails with "No module named pytest"."""
    import re
    import tomllib
    from importlib.metadata import requires

    project = bake(tmp_path, channel_name="tplextra")
    assert "pip install -e '.[testing]'" in (project / "README.md").read_text()
    meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]

    def names(requirements) -> set[str]:
        return {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() for r in requirements}

    extra = names(meta["optional-dependencies"]["testing"])
    assert "pytest" in extra
    installed = extra | names(meta["dependencies"]) | names(requires("chatkernel") or [])
    imported = {m for path in (project / "tests").glob("*.py")
                for m in re.findall(r"^(?:from|import) (\w+)", path.read_text(), re.M)}
    own = {"chatkernel", "chatkernel_tplextra", "__future__"}
    assert imported - set(sys.stdlib_module_names) - own <= installed


@pytest.mark.parametrize(("name", "reason"), [
    ("2fast", "not a valid Python identifier"),
    ("my-chat", "not a valid Python identifier"),
    ("telegram", "already a chatkernel channel"),
    ("webchat", "already a chatkernel channel"),
    ("chatkernel-foo", "the template adds that prefix itself"),
])
def test_the_template_refuses_a_bad_channel_name(name, reason, tmp_path):
    with pytest.raises(click.ClickException) as refused:
        bake(tmp_path, channel_name=name)
    assert reason in refused.value.message
    assert list(tmp_path.iterdir()) == []  # nothing was written


def cookiecutter_command(answers: str, cwd: Path) -> subprocess.CompletedProcess:
    """The template as its users run it: ``cookiecutter cookiecutter-plugin/``, typing."""
    return subprocess.run([sys.executable, "-m", "cookiecutter", str(TEMPLATE)], cwd=cwd,
                          input=answers, capture_output=True, text=True, timeout=60)


def test_the_template_asks_four_questions_the_first_one_whole(tmp_path):
    result = cookiecutter_command("promptcheck\nAda\nA test\n2\n", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    prompts = " ".join(result.stdout.split())  # the terminal's line breaks aside
    assert "[1/4] Channel name (a Python identifier: the key under [channels.<name>])" in \
        prompts
    assert "[4/4] How the platform delivers events" in prompts
    assert "[5/" not in prompts  # the derived names are not asked
    assert "dist_name" not in prompts and "package_name" not in prompts
    project = tmp_path / "chatkernel-promptcheck"
    assert (project / "chatkernel_promptcheck" / "channel.py").is_file()
    assert "class PromptcheckChannel(" in (
        project / "chatkernel_promptcheck" / "channel.py").read_text()
    assert "Created chatkernel-promptcheck (webhook channel 'promptcheck')" in result.stdout


def test_a_taken_name_is_refused_at_once_in_one_line(tmp_path):
    result = cookiecutter_command("telegram\n", tmp_path)  # no other answer is typed
    assert result.returncode == 1
    assert "[2/4]" not in result.stdout  # refused before the next question
    assert "Traceback" not in result.stdout + result.stderr
    [error] = result.stderr.strip().splitlines()
    assert error.startswith("Error: the name 'telegram' is already a chatkernel channel")
    assert error.endswith("(nothing was written)")
    assert list(tmp_path.iterdir()) == []


def test_after_baking_the_next_steps_are_printed(tmp_path, capfd):
    bake(tmp_path, channel_name="nextsteps")
    out = capfd.readouterr().out
    for step in ("cd chatkernel-nextsteps", "pip install -e '.[testing]'", "chatkernel plugins",
                 "python -m pytest tests", "README.md"):
        assert step in out
