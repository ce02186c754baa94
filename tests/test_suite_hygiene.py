"""The suite waits on events and the kit's clock, not on the wall clock.

A test that sleeps to let "nothing happen", or to let a timer run out, is slow and
flaky at once: on a loaded machine the sleep is too short, on an idle one it is
wasted. Each remaining sleep in a test file is one that genuinely needs real time
(real processes, a real server's timeouts...), and says so in a ``# real time:``
comment on its line or the line above. This test finds the others, by file and line.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: The test folders scanned, relative to the repository.
ROOTS = ["tests", "plugins/*/tests", "cookiecutter-plugin/**/tests"]

#: The modules whose ``sleep`` waits on the wall clock.
SLEEP_MODULES = {"anyio", "asyncio", "time", "trio"}
#: The comment that says why a sleep needs real time.
REASON = "# real time:"


def wall_clock_sleeps(source: str) -> Iterator[int]:
    """The lines of ``source`` calling a wall-clock sleep with anything but a literal 0:
    ``anyio.sleep(...)``, ``asyncio.sleep(...)``, ``time.sleep(...)``, or ``sleep(...)``
    imported from one of them (under its own name or another)."""
    modules = set(SLEEP_MODULES)  # names the modules are known by here (import ... as)
    functions: set[str] = set()   # names their sleep is known by (from ... import sleep)
    calls: list[ast.Call] = []    # calls that may be one, known once the imports are
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            if not _zero(node):
                calls.append(node)
        elif isinstance(node, ast.Import):
            modules.update(alias.asname or alias.name for alias in node.names
                           if alias.name in SLEEP_MODULES)
        elif isinstance(node, ast.ImportFrom) and node.module in SLEEP_MODULES:
            functions.update(alias.asname or alias.name for alias in node.names
                             if alias.name == "sleep")
    for call in calls:
        func = call.func
        if ((isinstance(func, ast.Attribute) and func.attr == "sleep"
             and isinstance(func.value, ast.Name) and func.value.id in modules)
                or (isinstance(func, ast.Name) and func.id in functions)):
            yield call.lineno


def _zero(call: ast.Call) -> bool:
    """Whether the sleep is ``sleep(0)``: a checkpoint, not a wait."""
    args = [*call.args, *(keyword.value for keyword in call.keywords)]
    return (len(args) == 1 and isinstance(args[0], ast.Constant)
            and type(args[0].value) in (int, float) and args[0].value == 0)


def commented_lines(source: str) -> set[int]:
    """The lines carrying a ``# real time:`` comment."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {token.start[0] for token in tokens
            if token.type == tokenize.COMMENT and REASON in token.string}


#: A sleep call on a line, for a template file that is Python only once baked.
SLEEP_ON_A_LINE = re.compile(
    r"\b(?:(?:anyio|asyncio|time|trio)\.)?sleep\((?!\s*0(?:\.0*)?\s*\))")


def unexplained_sleeps(source: str) -> list[int]:
    """The wall-clock sleeps of ``source`` with no reason on their line or the one above."""
    if "sleep" not in source:
        return []
    try:
        sleeps = set(wall_clock_sleeps(source))
        reasons = commented_lines(source) if sleeps else set()
    except (SyntaxError, tokenize.TokenError):  # a template's branches: line by line
        lines = source.splitlines()
        reasons = {number for number, text in enumerate(lines, 1) if REASON in text}
        sleeps = {number for number, text in enumerate(lines, 1)
                  if SLEEP_ON_A_LINE.search(text)}
    return sorted(line for line in sleeps if line not in reasons and line - 1 not in reasons)


def scanned_files(roots: list[str] = ROOTS) -> list[Path]:
    """The Python files under ``roots`` (glob patterns relative to the repository)."""
    return sorted({path for root in roots for folder in REPO.glob(root)
                   for path in folder.rglob("*.py")})


#: The template's Jinja: a ``{{ name }}`` and a ``{% tag %}``.
JINJA_NAME, JINJA_TAG = re.compile(r"\{\{.*?\}\}"), re.compile(r"\{%.*?%\}")


def source_of(path: Path) -> str:
    """A file's Python, the template's placeholders made names (its lines kept)."""
    text = path.read_text()
    if "cookiecutter" in path.parts[len(REPO.parts)]:
        text = JINJA_TAG.sub("", JINJA_NAME.sub("placeholder", text))
    return text


def test_every_wall_clock_sleep_in_a_test_says_why_it_needs_real_time():
    found = [f"{path.relative_to(REPO)}:{line}" for path in scanned_files()
             for line in unexplained_sleeps(source_of(path))]
    assert found == [], (
        "these sleeps wait on the wall clock with no '# real time:' reason: wait on an "
        "event or the kit's ManualClock instead, or say why real time is needed:\n"
        + "\n".join(found))


def test_the_scan_covers_the_kernel_the_plugins_and_the_template():
    files = scanned_files()
    assert REPO / "tests" / "test_suite_hygiene.py" in files
    assert REPO / "plugins" / "slack" / "tests" / "test_slack.py" in files
    assert any("cookiecutter-plugin" in path.parts for path in files)


def test_every_root_names_test_folders():
    for root in ROOTS:
        assert scanned_files([root]), f"{root} names no test files"


SNIPPET = '''\
import anyio
import asyncio as aio
import time
from anyio import sleep
from time import sleep as nap

async def waits():
    await anyio.sleep(0.5)
    await sleep(delay)
    await anyio.sleep(0)
    await aio.sleep(0.0)
    # real time: a real process must reach its loop
    await anyio.sleep(0.3)
    await sleep(1)  # real time: said on the line itself
    other.sleep(5)
    time.sleep(0.1)  # just because
    nap(2)
    await anyio.sleep_forever()
    text = "time.sleep(9)"
'''


def test_the_scanner_finds_sleeps_without_a_reason_and_only_those():
    lines = SNIPPET.splitlines()
    found = [lines[number - 1].strip() for number in unexplained_sleeps(SNIPPET)]
    assert found == ["await anyio.sleep(0.5)", "await sleep(delay)",
                     "time.sleep(0.1)  # just because", "nap(2)"]


TEMPLATE = """\
async def waits():
{%- if T == "polling" %}
    await anyio.sleep(0.5)
{%- else %}
    # real time: the template's other branch
    await anyio.sleep(0.5)
{%- endif %}
    await anyio.sleep(0)
"""


def test_a_template_that_is_python_only_once_baked_is_scanned_line_by_line():
    assert unexplained_sleeps(TEMPLATE) == [3]  # the branch without a reason
