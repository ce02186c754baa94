"""The fault soak (bench/soak.py), small: a fixed seed, two channels, a few faults.

The real soak runs 10,000 messages over the four channels (bench/README.md, "The
soak"); this one keeps the harness itself working and its verdict honest, so a loss, a
duplicate or a reordering it would report fails here too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("chatkernel_telegram")
pytest.importorskip("chatkernel_whatsapp")

SOAK = Path(__file__).resolve().parents[1] / "bench" / "soak.py"


@pytest.mark.slow
def test_a_small_soak_loses_nothing_answers_once_and_keeps_each_chat_in_order(tmp_path):
    events = tmp_path / "events.txt"
    result = subprocess.run(
        [sys.executable, str(SOAK), "--seed", "47", "--messages", "200", "--rate", "25",
         "--chats", "40", "--channels", "telegram,whatsapp", "--fault-every", "3",
         "--max-faults", "4", "--without", "refused,hang,disk-full,sigterm",
         "--drain", "20", "--settle", "1", "--events", str(events)],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASS: 0 lost, 0 duplicated, 0 reordered (seed 47" in result.stdout
    # The faults happened while the messages went out: the schedule is the seed's.
    happened = events.read_text().splitlines()
    assert len(happened) == 4, happened
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()
            if line.startswith(("telegram ", "whatsapp "))}
    assert rows["telegram"][1] == rows["telegram"][4] == "100"  # sent, answered
    assert rows["whatsapp"][1] == rows["whatsapp"][4] == "100"
