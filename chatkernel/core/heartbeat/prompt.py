"""What a heartbeat turn asks the agent: the configured prompt (or the built-in one),
the tasks of HEARTBEAT.md that are due, and the wake notes left for it."""

from __future__ import annotations

import logging
from pathlib import Path

from chatkernel.core.config import HeartbeatConfig
from chatkernel.core.heartbeat.ack import HEARTBEAT_TOKEN
from chatkernel.core.heartbeat.checklist import (
    TaskPrompt,
    prompt_with_tasks,
    read_heartbeat_file,
)
from chatkernel.core.store.base import HeartbeatState

log = logging.getLogger("chatkernel.heartbeat")

DEFAULT_PROMPT = (
    "Read HEARTBEAT.md if it exists (in your workspace) and follow it. Do not invent tasks, "
    "and do not repeat old tasks from earlier conversations. If nothing needs attention, "
    f"reply {HEARTBEAT_TOKEN}.")
#: Appended to a session heartbeat's own prompt.
SESSION_GUARD = (
    "(This is a scheduled check set up in this chat with /heartbeat. Do only what is asked "
    "above and do not invent work. If nothing changed since the last check, answer in one "
    f"short line, or reply {HEARTBEAT_TOKEN}.)")


def heartbeat_prompt(state: HeartbeatState, settings: HeartbeatConfig, now: float,
                     workspace: Path, *, forced: bool) -> TaskPrompt | str:
    """The turn's prompt, or the reason to skip (HEARTBEAT.md, config heartbeat only).
    ``forced``: a manual wake, which is work enough to run."""
    wake = "".join(f"\n\nWoken with a note: {text}" for text in state.wake_texts)
    if state.session_key is not None:
        base = (settings.prompt or DEFAULT_PROMPT).strip()
        return TaskPrompt(f"{base}\n\n{SESSION_GUARD}{wake}")
    base = (settings.prompt or DEFAULT_PROMPT).strip()
    file = read_heartbeat_file(workspace)
    if file is None:  # no file: run anyway
        return TaskPrompt(base + wake)
    if file.error:
        log.warning("heartbeat %s: %s; the tasks block is ignored", state.id, file.error)
        return TaskPrompt(base + wake)
    # A manual wake, or a wake note waiting, is work enough to run.
    woken = forced or bool(state.wake_texts)
    if file.effectively_empty and not woken:
        return "empty-heartbeat-file"
    if not file.has_tasks:
        return TaskPrompt(base + wake)
    due = file.due(state.task_runs, now)
    if not due:
        return TaskPrompt(base + wake) if woken else "no-tasks-due"
    prompt = prompt_with_tasks(base, file, due)
    prompt.text += wake
    return prompt
