"""The fault soak (bench/soak.py), small: a fixed seed, two channels, a few faults.

The real soak runs 10,000 messages over the four channels (bench/README.md, "The
soak"); this one keeps the harness itself working and its verdict honest, so a loss, a
duplicate or a reordering it would report fails here too.
"""

from __future__ import annotations

import importlib.util
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


def load_soak():
    """bench/soak.py as a module (its report's rules, tested without a run)."""
    module = sys.modules.get("bench_soak")
    if module is None:
        spec = importlib.util.spec_from_file_location("bench_soak", SOAK)
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_soak"] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    return module


def test_a_chat_answered_out_of_the_order_the_gateways_got_it_counts_as_reordered():
    soak = load_soak()

    def message(seq: int, sent: float, answered: float):
        return soak.Message(seq, "slack", "D0SOAK00054", seq, at=sent, sent_at=sent,
                            answers=[answered])

    first, second, third = message(1, 12.4, 14.8), message(2, 13.7, 13.8), message(3, 20, 21)
    # The gateways got them in their order, and answered the second first.
    by_gateway, by_platform = soak.out_of_order([first, second, third], lambda m: m.sent_at)
    assert [(m.seq, after.seq) for m, after in by_gateway] == [(1, 2)]
    assert by_platform == []
    # The first waited in the socket of a gateway stopped until 14.1 s (seed 31): the
    # gateways got the second first, and answered in that order.
    handed = {1: 14.1, 2: 13.7, 3: 20}
    by_gateway, by_platform = soak.out_of_order([first, second, third],
                                                lambda m: handed[m.seq])
    assert by_gateway == []
    assert [(m.seq, after.seq) for m, after in by_platform] == [(1, 2)]


def test_a_slack_event_waiting_in_a_stopped_gateways_socket_reaches_the_gateways_as_it_wakes():
    """Seed 31: Slack gave #1 to the socket of the gateway stopped from 9.9 s to 14.1 s,
    which acknowledged it on waking; #2 went to the other gateway's socket at once."""
    from types import SimpleNamespace

    soak = load_soak()
    platforms = soak.Platforms(["slack"])
    platforms.fakes["slack"] = SimpleNamespace(
        first_sent={"Ev1": 12.4, "Ev2": 13.7, "Ev3": 20.0},
        acked_events={"Ev1": 14.15, "Ev2": 13.71, "Ev3": 20.01})
    platforms.stops.append((9.9, 14.1))

    def message(seq: int, event: str):
        return soak.Message(seq, "slack", "D0SOAK00054", seq, at=0.0, sent_at=0.0,
                            handle=event)

    first, second, third = message(1, "Ev1"), message(2, "Ev2"), message(3, "Ev3")
    assert [platforms.handed_over(m) for m in (first, second, third)] == [14.1, 13.7, 20.0]
    platforms.stops[:] = [(15.0, 16.0)]  # stopped later: #1 was handed over when sent
    assert platforms.handed_over(first) == 12.4


def test_a_reply_the_gateway_reports_delivery_unknown_is_told_apart_from_a_loss():
    soak = load_soak()
    message = soak.Message(1838, "whatsapp", "15550100012", 9, at=153.2, text="q31z1838 n9")
    named = ('{"level": "warning", "message": "whatsapp:soak: delivery unknown in '
             'whatsapp:soak:US.1142: chunk 1/1 \\"q31z1838 n9\\" was being sent when the '
             'gateway stopped; it is not resent"}')
    counted = ('{"level": "info", "message": "outbox: recovered 0 unsent payload(s), '
               'sending them now; 1 were in flight when the gateway stopped (delivery '
               'unknown, not resent)"}')
    assert soak.reported_unknown(message, named + "\n" + counted)
    assert not soak.reported_unknown(message, counted)  # a count names no reply
