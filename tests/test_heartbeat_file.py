"""HEARTBEAT.md: effectively empty, the hand-parsed ``tasks:`` block, due tasks, the prompt."""

from __future__ import annotations

import pytest

from chatkernel.core.heartbeat.checklist import (
    HeartbeatFileError,
    is_effectively_empty,
    parse_heartbeat_file,
    prompt_with_tasks,
    read_heartbeat_file,
)

TASKS = """\
# Checks

Mind the production dashboards.

tasks:
  - name: inbox
    interval: 30m
    prompt: "Look through the inbox: anything urgent?"
  # a comment inside the block
  - interval: 1d
    name: backups
    prompt: |
      Read last night's backup log.
        (the one in /var/log/backup)
      Name every job that failed.
  - name: folded
    interval: 2h
    prompt: >
      one
      two

## Notes
Deploys happen on Tuesdays.
"""


@pytest.mark.parametrize("text", ["", "\n\n", "# Heartbeat\n\n## Tasks\n   \n", "###\n"])
def test_blank_lines_and_headings_are_effectively_empty(text):
    assert is_effectively_empty(text)


@pytest.mark.parametrize("text", ["# Heartbeat\n- check mail\n", "#hashtag is text\n",
                                  "tasks:\n"])
def test_anything_else_is_not_empty(text):
    assert not is_effectively_empty(text)


def test_tasks_block_is_parsed_and_the_rest_is_context():
    parsed = parse_heartbeat_file(TASKS)
    assert parsed.has_tasks
    assert [(t.name, t.interval) for t in parsed.tasks] == [
        ("inbox", 1800), ("backups", 86400), ("folded", 7200)]
    assert parsed.tasks[0].prompt == "Look through the inbox: anything urgent?"
    assert parsed.tasks[1].prompt == ("Read last night's backup log.\n"
                                      "  (the one in /var/log/backup)\n"
                                      "Name every job that failed.")
    assert parsed.tasks[2].prompt == "one two"
    assert "tasks:" not in parsed.context
    assert parsed.context.startswith("# Checks")
    assert parsed.context.endswith("Deploys happen on Tuesdays.")


def test_due_tasks_follow_their_own_intervals():
    parsed = parse_heartbeat_file(TASKS)
    now = 1_000_000.0
    assert [t.name for t in parsed.due({}, now)] == ["inbox", "backups", "folded"]
    runs = {"inbox": now - 1799, "backups": now - 3600, "folded": now - 7200}
    assert [t.name for t in parsed.due(runs, now)] == ["folded"]
    runs["folded"] = now
    assert parsed.due(runs, now) == []


def test_prompt_carries_only_due_tasks_and_the_rest_as_context():
    parsed = parse_heartbeat_file(TASKS)
    due = [parsed.tasks[1]]
    prompt = prompt_with_tasks("BASE PROMPT", parsed, due)
    assert prompt.tasks == ["backups"]
    assert prompt.text.startswith("BASE PROMPT\n\nTasks due now")
    assert "- backups (every 1d): Read last night's backup log." in prompt.text
    assert "inbox" not in prompt.text and "folded" not in prompt.text
    assert prompt.text.endswith("Deploys happen on Tuesdays.")


def test_a_file_without_tasks_is_all_context():
    parsed = parse_heartbeat_file("Check the queue.\n")
    assert not parsed.has_tasks and parsed.context == "Check the queue.\n"


def test_an_empty_tasks_block_has_no_tasks():
    parsed = parse_heartbeat_file("tasks:\n\n# Notes\n")
    assert parsed.has_tasks and parsed.tasks == ()


@pytest.mark.parametrize("block,message", [
    ("tasks:\n  - name: a\n    interval: 1h\n", "line 2: the task has no prompt"),
    ("tasks:\n  - name: a\n    interval: soon\n    prompt: p\n", "line 2: task 'a': not an"),
    ("tasks:\n  - name: a\n    every: 1h\n", "line 3: unknown key 'every'"),
    ("tasks:\n  name: a\n", "line 2: expected a task starting with '- '"),
    ("tasks:\n  - name: a\n    interval: 1h\n    prompt: p\n"
     "  - name: a\n    interval: 2h\n    prompt: q\n", "line 5: two tasks are named 'a'"),
    ("tasks:\n  - name: 'a\n", "line 2: unclosed quote"),
    ("tasks:\n  - name: a\n    interval: 0\n    prompt: p\n", "more than 0"),
])
def test_a_broken_tasks_block_names_the_line(block, message):
    with pytest.raises(HeartbeatFileError, match=message.replace("(", r"\(")):
        parse_heartbeat_file(block)


def test_read_missing_file_is_none_and_broken_block_keeps_the_whole_file(tmp_path):
    assert read_heartbeat_file(tmp_path) is None
    (tmp_path / "HEARTBEAT.md").write_text("tasks:\n  - name: a\n")
    read = read_heartbeat_file(tmp_path)
    assert read is not None and read.error and "line 2" in read.error
    assert not read.has_tasks and read.context == read.text
