"""The public plugin API: what plugins may import, that it imports on its own, and that
the guide for channel authors documents every name of it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import chatkernel
import chatkernel.channels

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "writing-a-channel.md"
#: What a plugin (its package and its tests) may import from the kernel.
PUBLIC = ("chatkernel", "chatkernel.channels", "chatkernel.testing")


def is_public(module: str) -> bool:
    if any(part.startswith("_") for part in module.split(".")):
        return False
    return module in PUBLIC or module.startswith("chatkernel.testing.")


def private_imports(source: str) -> list[str]:
    """The kernel modules ``source`` imports that are not public (``chatkernel.core``,
    anything private), as written."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "chatkernel":  # from chatkernel import core
                names += [f"chatkernel.{alias.name}" for alias in node.names
                          if alias.name in ("core", "hookspecs") or alias.name.startswith("_")]
        else:
            continue
        found += [name for name in names
                  if (name == "chatkernel" or name.startswith("chatkernel.")) and not is_public(name)]
    return found


def is_jinja_template(path: Path) -> bool:
    """A file of the plugin template's project (under a ``{{cookiecutter...}}`` folder):
    Jinja, not Python; tests/test_cookiecutter_plugin.py checks what it bakes instead."""
    return any("{{" in part for part in path.parts)


def plugin_sources() -> list[Path]:
    roots = [ROOT / "plugins", ROOT / "cookiecutter-plugin"]
    return sorted(p for root in roots if root.exists() for p in root.rglob("*.py")
                  if ".venv" not in p.parts and not is_jinja_template(p))


def test_the_check_finds_private_imports():
    source = ("import chatkernel.sdk.models\nfrom chatkernel.core import config\n"
              "from chatkernel import core\nfrom chatkernel.testing._x import y\n"
              "from chatkernel.hookspecs import hookimpl\n"
              "from chatkernel.channels import Channel\nfrom chatkernel import hookimpl\n"
              "from chatkernel.testing.contract import ChannelContract\nimport os\n")
    assert private_imports(source) == ["chatkernel.sdk.models", "chatkernel.core",
                                       "chatkernel.core", "chatkernel.testing._x",
                                       "chatkernel.hookspecs"]


@pytest.mark.slow
def test_no_plugin_imports_a_private_module():
    sources = plugin_sources()
    assert any("chatkernel_telegram" in str(path) for path in sources)
    assert any(path.parent.name == "hooks" for path in sources)  # the template's hooks
    offenders = {str(path.relative_to(ROOT)): names for path in sources
                 if (names := private_imports(path.read_text()))}
    assert offenders == {}, ("plugins import the kernel's internals; use chatkernel.channels "
                             f"or chatkernel.testing: {offenders}")


@pytest.mark.slow
def test_the_public_api_imports_in_a_fresh_interpreter():
    names = ", ".join(chatkernel.channels.__all__)
    code = (f"from chatkernel.channels import {names}\n"
            "import chatkernel, chatkernel.testing\n"
            "for name in chatkernel.__all__: getattr(chatkernel, name)\n"
            "for name in chatkernel.testing.__all__: getattr(chatkernel.testing, name)\n"
            "print('ok')\n")
    result = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                            timeout=60, cwd="/", check=False)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


@pytest.mark.parametrize("name", chatkernel.channels.__all__)
def test_every_public_name_is_in_the_guide_for_channel_authors(name):
    assert f"`{name}" in GUIDE.read_text(), f"docs/writing-a-channel.md does not mention {name}"


# -- docs/api.md: the public API in one place -----------------------------------------------

API_PAGE = ROOT / "docs" / "api.md"


def listed_names(page: str, section: str) -> set[str]:
    """The names in the first column of the tables under ``## `section` `` of ``page``."""
    names: set[str] = set()
    inside = False
    for line in page.splitlines():
        if line.startswith("## "):
            inside = line == f"## `{section}`"
        elif inside and line.startswith("| `"):
            names.add(line.split("`")[1])
    return names


def test_the_check_reads_the_names_of_one_section_only():
    page = ("## `a`\n\n| name | what |\n| --- | --- |\n| `One` | x |\n\n### more\n\n"
            "| `two` | y |\n\n## `b`\n\n| `Three` | z |\n")
    assert listed_names(page, "a") == {"One", "two"}
    assert listed_names(page, "b") == {"Three"}


@pytest.mark.parametrize("module", [chatkernel.channels, chatkernel],
                         ids=lambda module: module.__name__)
def test_the_api_page_lists_every_exported_name_and_no_other(module):
    listed = listed_names(API_PAGE.read_text(), module.__name__)
    exported = set(module.__all__)
    assert (sorted(exported - listed), sorted(listed - exported)) == ([], []), (
        "docs/api.md and __all__ differ: (exported but not listed, listed but not exported)")


def test_the_api_page_names_every_hook_and_is_linked_from_the_plugin_guides():
    import inspect

    from chatkernel import hookspecs

    page = API_PAGE.read_text()
    hooks = [name for name, value in vars(hookspecs).items()
             if inspect.isfunction(value) and value.__module__ == hookspecs.__name__]
    assert len(hooks) > 10
    assert [name for name in hooks if f"`{name}`" not in page] == []
    for guide in ("hooks.md", "writing-a-channel.md"):
        assert "(api.md)" in (ROOT / "docs" / guide).read_text(), guide
