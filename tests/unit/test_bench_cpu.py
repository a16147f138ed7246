"""The bench's CPU and context-switch accounting between two snapshots (worker/devtools/bench/cpu.py)."""

from __future__ import annotations

from worker.devtools.bench.cpu import SERVICE_PARTS, Snapshot, per_match


def _snapshot(cpu: dict[str, dict[int, float]], switches: dict[str, dict[int, tuple[int, int]]],
              busy: float, at: float) -> Snapshot:
    return Snapshot({p: cpu.get(p, {}) for p in SERVICE_PARTS}, switches, busy, at)


def test_cpu_and_context_switches_per_message() -> None:
    start = _snapshot({"worker_children": {10: 1.0, 11: 2.0}, "postgresql_backends": {20: 5.0}},
                      {"worker_children": {10: (100, 5), 11: (50, 0)}, "postgresql_backends": {20: (7, 1)}},
                      busy=10.0, at=0.0)
    # child 12 started during the run (counts from zero); backend 20 is gone (not counted)
    end = _snapshot({"worker_children": {10: 1.5, 11: 2.25, 12: 0.25}, "postgresql_backends": {21: 0.5}},
                    {"worker_children": {10: (400, 25), 11: (150, 0), 12: (50, 15)},
                     "postgresql_backends": {21: (200, 40)}},
                    busy=12.0, at=1.0)
    out = per_match(start, end, 100)
    assert out["worker_children_ms"] == 10.0  # (0.5 + 0.25 + 0.25) s / 100 messages
    assert out["postgresql_backends_ms"] == 5.0
    assert out["service_total_ms"] == 15.0
    assert out["context_switches"]["worker_children"] == {"voluntary": 4.5, "involuntary": 0.35}
    assert out["context_switches"]["postgresql_backends"] == {"voluntary": 2.0, "involuntary": 0.4}
    assert out["context_switches"]["relay"] == {"voluntary": 0.0, "involuntary": 0.0}
    assert out["machine_busy_ms"] == 20.0 and out["other_ms"] == 5.0
