"""``HEARTBEAT.md``: the operator's checklist for heartbeats, in the workspace.

What the scheduler makes of it (docs/heartbeats.md, "HEARTBEAT.md"):

- missing: the heartbeat runs anyway (the prompt tells the agent to read the
  file "if it exists");
- effectively empty (only blank lines and Markdown headings): the run is
  skipped (``empty-heartbeat-file``);
- with a ``tasks:`` block: only the tasks that are due go into the prompt,
  with the rest of the file as context; none due: skipped (``no-tasks-due``).

The ``tasks:`` block is a small YAML-like format, parsed here by hand (the
kernel does not depend on a YAML library)::

    tasks:
      - name: inbox
        interval: 30m
        prompt: Look through the inbox and flag anything urgent.
      - name: backups
        interval: 1d
        prompt: |
          Read last night's backup log.
          Name every job that failed.

The block starts at a line that is exactly ``tasks:`` (no indentation) and
ends at the next non-blank line that is not indented. Each task starts with
``- `` and has three keys: ``name`` (unique), ``interval`` (``30m``, ``2h``,
``1d``, ``1h30m``: see :func:`chatkernel.core.durations.parse_interval`) and
``prompt``. A value may be quoted (``'...'`` or ``"..."``); ``|`` keeps the
more-indented lines below as they are, ``>`` folds them into one line. Lines
starting with ``#`` inside the block are comments. Anything else is an error
naming the line (:class:`HeartbeatFileError`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from chatkernel.core.durations import format_interval, parse_interval

HEARTBEAT_FILE = "HEARTBEAT.md"
TASK_KEYS = ("name", "interval", "prompt")

_HEADING = re.compile(r"#{1,6}(\s|$)")
_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)\s*:(?:\s+(.*))?$")


class HeartbeatFileError(ValueError):
    """The ``tasks:`` block of HEARTBEAT.md cannot be read; says which line and why."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"{HEARTBEAT_FILE} line {line}: {message}")
        self.line = line


@dataclass(frozen=True, slots=True)
class HeartbeatTask:
    """One task of the ``tasks:`` block."""

    name: str
    interval: float  # seconds
    prompt: str

    def is_due(self, last_run: float | None, now: float) -> bool:
        return last_run is None or now - last_run >= self.interval


@dataclass(frozen=True, slots=True)
class HeartbeatFile:
    """HEARTBEAT.md, read.

    ``has_tasks``: the file has a ``tasks:`` block (maybe an empty one);
    ``context``: the file without that block.
    """

    text: str
    has_tasks: bool = False
    tasks: tuple[HeartbeatTask, ...] = ()
    context: str = ""
    error: str | None = None  # the tasks block could not be read (logged, file used whole)

    @property
    def effectively_empty(self) -> bool:
        return is_effectively_empty(self.text)

    def due(self, last_runs: Mapping[str, float], now: float) -> list[HeartbeatTask]:
        """The tasks due at ``now``, given each task's last completed run."""
        return [task for task in self.tasks if task.is_due(last_runs.get(task.name), now)]


def is_effectively_empty(text: str) -> bool:
    """Only blank lines and Markdown headings (``# ...``)."""
    return all(not line.strip() or _HEADING.match(line.strip()) for line in text.splitlines())


def read_heartbeat_file(workspace: Path) -> HeartbeatFile | None:
    """The workspace's HEARTBEAT.md, or None when there is none.

    A broken ``tasks:`` block does not raise: the file is returned whole with
    ``error`` set, so the heartbeat still runs and the error is logged.
    """
    try:
        text = (workspace / HEARTBEAT_FILE).read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    try:
        return parse_heartbeat_file(text)
    except HeartbeatFileError as exc:
        return HeartbeatFile(text=text, context=text, error=str(exc))


def parse_heartbeat_file(text: str) -> HeartbeatFile:
    """Split HEARTBEAT.md into its ``tasks:`` block and the rest (see the module doc)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.rstrip() == "tasks:"), None)
    if start is None:
        return HeartbeatFile(text=text, context=text)
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t"):
        end += 1
    tasks = _parse_tasks(lines[start + 1:end], first_line=start + 2)
    context = "\n".join(lines[:start] + lines[end:]).strip("\n")
    return HeartbeatFile(text=text, has_tasks=True, tasks=tuple(tasks), context=context)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _unquote(value: str, line: int) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    if value[:1] in "'\"":
        raise HeartbeatFileError(line, f"unclosed quote in {value!r}")
    return value


def _parse_tasks(lines: list[str], first_line: int) -> list[HeartbeatTask]:
    items: list[tuple[int, dict[str, str]]] = []  # (line number, raw values)
    index = 0
    while index < len(lines):
        line, number = lines[index], first_line + index
        stripped = line.strip()
        index += 1
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("- ") or stripped == "-":
            items.append((number, {}))
            stripped = stripped[1:].strip()
            key_indent = _indent(line) + 2
            if not stripped:
                continue
        elif not items:
            raise HeartbeatFileError(number, f"expected a task starting with '- ', "
                                             f"got {stripped!r}")
        else:
            key_indent = _indent(line)
        match = _KEY.match(stripped)
        if not match:
            raise HeartbeatFileError(number, f"expected 'key: value', got {stripped!r}")
        key, value = match[1], (match[2] or "").strip()
        values = items[-1][1]
        if key not in TASK_KEYS:
            raise HeartbeatFileError(number, f"unknown key {key!r} "
                                             f"(a task has {', '.join(TASK_KEYS)})")
        if key in values:
            raise HeartbeatFileError(number, f"{key!r} given twice in one task")
        if value in ("|", ">", "|-", ">-"):
            block: list[str] = []
            while index < len(lines) and (not lines[index].strip()
                                          or _indent(lines[index]) > key_indent):
                block.append(lines[index])
                index += 1
            while block and not block[-1].strip():
                block.pop()
            depth = min((_indent(b) for b in block if b.strip()), default=0)
            body = [b[depth:] for b in block]
            values[key] = ("\n".join(body) if value[0] == "|"
                           else " ".join(b.strip() for b in body if b.strip()))
        else:
            values[key] = _unquote(value, number)
    return _tasks(items)


def _tasks(items: list[tuple[int, dict[str, str]]]) -> list[HeartbeatTask]:
    tasks: list[HeartbeatTask] = []
    seen: set[str] = set()
    for number, values in items:
        missing = [key for key in TASK_KEYS if not values.get(key, "").strip()]
        if missing:
            raise HeartbeatFileError(number, f"the task has no {' and no '.join(missing)}")
        name = values["name"].strip()
        if name in seen:
            raise HeartbeatFileError(number, f"two tasks are named {name!r}")
        seen.add(name)
        try:
            interval = parse_interval(values["interval"])
        except ValueError as exc:
            raise HeartbeatFileError(number, f"task {name!r}: {exc}") from None
        if interval <= 0:
            raise HeartbeatFileError(number, f"task {name!r}: the interval must be more "
                                             "than 0")
        tasks.append(HeartbeatTask(name, interval, values["prompt"].strip()))
    return tasks


@dataclass(slots=True)
class TaskPrompt:
    """The prompt of a heartbeat with tasks, and which tasks it carries."""

    text: str
    tasks: list[str] = field(default_factory=list)


def prompt_with_tasks(base: str, file: HeartbeatFile,
                      due: list[HeartbeatTask]) -> TaskPrompt:
    """The base prompt, the due tasks, then the rest of the file as context."""
    parts = [base.rstrip(), "", f"Tasks due now (from {HEARTBEAT_FILE}):"]
    for task in due:
        body = task.prompt.replace("\n", "\n  ")
        parts.append(f"- {task.name} (every {format_interval(task.interval)}): {body}")
    if file.context.strip() and not is_effectively_empty(file.context):
        parts += ["", f"The rest of {HEARTBEAT_FILE}, for context:", file.context.strip()]
    return TaskPrompt("\n".join(parts), [task.name for task in due])
