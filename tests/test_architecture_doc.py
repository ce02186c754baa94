"""docs/ARCHITECTURE.md stays a map: short enough to read whole, with its words defined
and every package of the core named in its layers."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
#: The words that meant several things or were never said (the glossary defines each).
WORDS = ["gateway", "deliver", "line", "lane", "roster", "receive gate", "Trouble", "floor",
         "port", "outage", "GatewayParts"]


def test_the_architecture_map_is_at_most_400_lines():
    assert len(DOC.read_text(encoding="utf-8").splitlines()) <= 400


def test_its_glossary_defines_the_words_that_meant_several_things():
    text = DOC.read_text(encoding="utf-8")
    glossary = text.split("## Words", 1)[1].split("\n## ", 1)[0]
    missing = [word for word in WORDS if not re.search(rf"\*\*{re.escape(word)}\*\*|"
                                                         rf"`{re.escape(word)}`", glossary)]
    assert missing == []


def test_its_layers_name_every_package_of_the_core():
    text = DOC.read_text(encoding="utf-8")
    layers = text.split("## The core's layers", 1)[1].split("\n## ", 1)[0]
    core = ROOT / "chatkernel" / "core"
    packages = sorted(path.name for path in core.iterdir()
                      if path.is_dir() and (path / "__init__.py").exists())
    modules = sorted(path.name for path in core.glob("*.py") if path.name != "__init__.py")
    missing = [name for name in packages if f"{name}/" not in layers]
    missing += [name for name in modules if name not in layers]
    assert missing == []


def test_no_module_of_the_kernel_distribution_is_over_800_lines():
    """One concern a module: past 800 lines a module holds several (cli.py held the
    click wiring, a gateway client, rendering and config checks at 1,604)."""
    long = {str(path.relative_to(ROOT)): n for path in (ROOT / "chatkernel").rglob("*.py")
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > 800}
    assert long == {}
