"""Meta-tests of the hook contract (as datasette does it).

Every hook specification in ``chatkernel.hookspecs`` must

* have a test function named ``test_hook_<name>`` somewhere under ``tests/``;
* be documented in ``docs/hooks.md`` under a heading that is exactly its
  signature in backticks, e.g. ``### `inbound_accept(message, account)` ``;

and the documentation must follow the order of the specifications (the
pipeline order) and document nothing that is not a hook.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pluggy
import pytest

from chatkernel import hookspecs

TESTS = Path(__file__).resolve().parent
DOCS = TESTS.parent / "docs" / "hooks.md"

# A heading whose whole text is a call signature in backticks.
HEADING = re.compile(r"^(#{2,6})\s+`(?P<name>[A-Za-z_]\w*)(?P<params>\(.*\))`\s*$", re.MULTILINE)


# -- what the checks compare ---------------------------------------------------------------


def hookspecs_in(module) -> dict[str, object]:
    """Hook specifications of a module, in definition order."""
    marker = f"{hookspecs.hookspec.project_name}_spec"
    return {name: obj for name, obj in vars(module).items()
            if callable(obj) and hasattr(obj, marker)}


def signature_of(spec) -> str:
    return f"{spec.__name__}{inspect.signature(spec)}"


def documented_signatures(markdown: str) -> dict[str, str]:
    """hook name -> the signature its heading shows (first heading wins)."""
    found: dict[str, str] = {}
    for match in HEADING.finditer(markdown):
        found.setdefault(match["name"], match["name"] + match["params"])
    return found


def collect_test_names(root: Path) -> set[str]:
    """Names of every test function (sync or async, module level or in a class)."""
    names: set[str] = set()
    for file in root.rglob("*.py"):
        if "fixtures" in file.relative_to(root).parts:
            continue
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    node.name.startswith("test_"):
                names.add(node.name)
    return names


def untested(specs: dict[str, object], tests: set[str]) -> list[str]:
    return [name for name in specs if f"test_hook_{name}" not in tests]


def doc_problems(specs: dict[str, object], markdown: str) -> list[str]:
    """Every way docs/hooks.md disagrees with the specs, as readable lines."""
    documented = documented_signatures(markdown)
    problems = []
    for name, spec in specs.items():
        expected = signature_of(spec)
        if name not in documented:
            problems.append(f"{name}: not documented (add a heading ### `{expected}`)")
        elif documented[name] != expected:
            problems.append(f"{name}: documented as `{documented[name]}`, "
                            f"but the spec is `{expected}`")
    for name in documented:
        if name not in specs:
            problems.append(f"{name}: documented, but there is no such hook")
    return problems


# -- the contract as it stands -------------------------------------------------------------


SPECS = hookspecs_in(hookspecs)


def test_there_are_hookspecs():
    # Guards the checks below against vacuous success (e.g. a marker rename).
    assert "inbound_accept" in SPECS
    assert len(SPECS) >= 9


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SPECS))
def test_every_hook_has_a_test(name):
    assert f"test_hook_{name}" in collect_test_names(TESTS), (
        f"hook {name!r} has no test: add a function test_hook_{name} under tests/")


@pytest.mark.parametrize("name", list(SPECS))
def test_every_hook_is_documented_with_its_signature(name):
    documented = documented_signatures(DOCS.read_text(encoding="utf-8"))
    expected = signature_of(SPECS[name])
    assert name in documented, f"docs/hooks.md has no heading ### `{expected}`"
    assert documented[name] == expected, (
        f"docs/hooks.md documents `{documented[name]}` but the hookspec is `{expected}`")


def test_docs_document_only_hooks_in_pipeline_order():
    documented = list(documented_signatures(DOCS.read_text(encoding="utf-8")))
    assert documented == list(SPECS), (
        "docs/hooks.md must document exactly the hooks of chatkernel/hookspecs.py, "
        "in the same (pipeline) order")


@pytest.mark.parametrize("name", list(SPECS))
def test_firstresult_hooks_say_so(name):
    """The spec's docstring and the docs both tell firstresult hooks apart."""
    spec = SPECS[name]
    opts = getattr(spec, f"{hookspecs.hookspec.project_name}_spec")
    doc = inspect.getdoc(spec) or ""
    assert doc, f"hookspec {name} has no docstring"
    markdown = DOCS.read_text(encoding="utf-8")
    start = next(m.end() for m in HEADING.finditer(markdown) if m["name"] == name)
    following = HEADING.search(markdown, start)
    section = markdown[start:following.start() if following else len(markdown)]
    if opts.get("firstresult"):
        assert "Stops at the first non-None result" in " ".join(doc.split())
        assert "firstresult" in section
    else:
        assert "firstresult" not in section
    assert "from chatkernel import" in section, f"the docs of {name} need an example"


def test_hookimpl_is_reexported_from_the_package_root():
    import chatkernel

    assert chatkernel.hookimpl is hookspecs.hookimpl
    assert isinstance(hookspecs.hookimpl, pluggy.HookimplMarker)
    assert hookspecs.hookspec.project_name == hookspecs.hookimpl.project_name == "chatkernel"


# -- the checks catch drift ----------------------------------------------------------------


def _module_with_extra_hook():
    """A copy of the specs plus a new hook, as a module-like namespace."""
    import types

    module = types.ModuleType("fake_hookspecs")
    module.__dict__.update(SPECS)

    @hookspecs.hookspec
    def outbound_sent(account, route, result):
        """A hook nobody documented or tested."""

    module.outbound_sent = outbound_sent
    return module


@pytest.mark.slow
def test_meta_checks_fail_for_a_new_hook_without_test_or_doc():
    specs = hookspecs_in(_module_with_extra_hook())
    assert untested(specs, collect_test_names(TESTS)) == ["outbound_sent"]
    problems = doc_problems(specs, DOCS.read_text(encoding="utf-8"))
    assert problems == ["outbound_sent: not documented "
                        "(add a heading ### `outbound_sent(account, route, result)`)"]


def test_meta_checks_fail_when_a_documented_signature_drifts():
    markdown = DOCS.read_text(encoding="utf-8").replace(
        "### `inbound_accept(message, account)`", "### `inbound_accept(message)`")
    assert doc_problems(SPECS, markdown) == [
        "inbound_accept: documented as `inbound_accept(message)`, "
        "but the spec is `inbound_accept(message, account)`"]


@pytest.mark.slow
def test_meta_checks_pass_for_the_real_contract():
    assert untested(SPECS, collect_test_names(TESTS)) == []
    assert doc_problems(SPECS, DOCS.read_text(encoding="utf-8")) == []
