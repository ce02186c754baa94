"""The gateway's log file when it cannot be written (chatkernel.core.logs): said once on
stderr with why, every line still on stderr, and said once when it is written again; no
"--- Logging error ---" traceback per record."""

from __future__ import annotations

import errno
import io
import logging
import os

import pytest

from chatkernel.core import logs

NO_SPACE = os.strerror(errno.ENOSPC)


class FullDisk:
    """A file's stream on a disk with no space left."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, NO_SPACE)

    def seek(self, offset: int, whence: int = 0) -> int:
        return 0

    def tell(self) -> int:
        return 0

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture
def logged(chatkernel_home):
    """A logger with the gateway's two handlers: stderr (a buffer here) and the file."""
    stderr = io.StringIO()
    to_stderr = logging.StreamHandler(stderr)
    to_stderr.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    to_file = logs.LogFile(chatkernel_home).handler(stderr=to_stderr)
    log = logging.getLogger("chatkernel.test-full-disk")
    log.propagate, log.level = False, logging.INFO
    log.addHandler(to_stderr)
    log.addHandler(to_file)
    yield log, to_file, stderr
    log.removeHandler(to_file)
    log.removeHandler(to_stderr)
    to_file.close()


def test_a_full_disk_is_said_once_and_so_is_its_end(chatkernel_home, logged, capsys,
                                                     monkeypatch):
    log, to_file, stderr = logged
    path = chatkernel_home / "logs" / "gateway.log"
    log.info("before")
    to_file.stream.close()
    to_file.stream = FullDisk()
    monkeypatch.setattr(to_file, "_open", FullDisk)  # opened again: still full
    for number in range(3):
        log.info("while full %d", number)
    assert capsys.readouterr().err == ""  # no "--- Logging error ---", no traceback
    assert stderr.getvalue().splitlines() == [
        "INFO chatkernel.test-full-disk: before",
        "INFO chatkernel.test-full-disk: while full 0",
        f"WARNING chatkernel.logs: cannot write the log file {path} ({NO_SPACE}): "
        "logging to stderr only until it can be written again",
        "INFO chatkernel.test-full-disk: while full 1",
        "INFO chatkernel.test-full-disk: while full 2"]

    monkeypatch.undo()  # space again
    stderr.truncate(0)
    stderr.seek(0)
    log.info("after")
    log.info("later")
    back = (f"the log file {path} is written again (what was logged while it could not "
            "be is on stderr only)")
    assert stderr.getvalue().splitlines() == [
        "INFO chatkernel.test-full-disk: after",
        f"INFO chatkernel.logs: {back}",
        "INFO chatkernel.test-full-disk: later"]
    assert [line["message"] for line in logs.read_lines(chatkernel_home)] == [
        "before", back, "after", "later"]
    assert capsys.readouterr().err == ""


def test_without_a_stderr_handler_it_is_one_plain_line(chatkernel_home, capsys):
    to_file = logs.LogFile(chatkernel_home).handler()
    try:
        to_file.stream.close()
        to_file.stream = FullDisk()
        to_file._open = FullDisk
        for _ in range(3):
            to_file.handle(logging.makeLogRecord({"msg": "lost", "levelno": logging.INFO}))
    finally:
        to_file.close()
    err = capsys.readouterr().err
    assert err.splitlines() == [f"chatkernel: cannot write the log file "
                                f"{chatkernel_home / 'logs' / 'gateway.log'} ({NO_SPACE}): "
                                "logging to stderr only until it can be written again"]


def test_a_real_full_disk(disk, logged, capsys):
    """The same on a file system that is full (skipped where none can be mounted)."""
    log, _, stderr = logged
    to_file = logs.LogFile(disk.path).handler(stderr=logging.StreamHandler(stderr))
    log.addHandler(to_file)
    try:
        log.info("before")
        disk.fill()
        for number in range(20):  # more than the file's last page holds
            log.info("while full %d %s", number, "x" * 1000)
        disk.free()
        log.info("after")
    finally:
        log.removeHandler(to_file)
        to_file.close()
    said = stderr.getvalue()
    assert said.count("cannot write the log file") == 1 and NO_SPACE in said
    assert said.count("is written again") == 1
    assert capsys.readouterr().err == ""
    messages = [line["message"] for line in logs.read_lines(disk.path)]
    assert messages[0] == "before" and messages[-1] == "after"
