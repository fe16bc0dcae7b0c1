"""The benchmark harness runs end to end (a smoke test: speed itself is never asserted in tests)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_quick_run_writes_a_table(tmp_path):
    out = tmp_path / "results.md"
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "floor,skyhive", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = out.read_text()
    for row in ("rtt", "broadcast2", "map10k", "cold", "arg100m"):
        assert row in table
    assert "× floor" in table
    status = next(line for line in table.splitlines() if line.startswith("| status"))
    assert status.count("ok") == 2, status  # floor and skyhive both measured
    # rtt and broadcast2 taken in turns with the floor in skyhive's process, pinned: both figures and the ratio
    paired = [line for line in table.splitlines() if line.startswith("| ") and "in turns with the floor" in line]
    assert len(paired) == 4, paired  # rtt and broadcast2, on one core and on two
    for line in paired:
        _, floor, sky, ratio = [c.strip() for c in line.strip().strip("|").split("|")]
        assert re.fullmatch(r"[\d.]+ (µs|ms)", floor) and re.fullmatch(r"[\d.]+ (µs|ms)", sky), line
        assert ratio.endswith("× floor latency"), line


def test_seeds_bench_quick_run_reports_its_figures(tmp_path):
    out = tmp_path / "seeds.json"
    proc = subprocess.run([sys.executable, "-m", "bench.seeds_bench", "--quick", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    import json

    figures = json.loads(out.read_text())
    assert set(figures) == {"tasks", "seconds_each", "concurrency_1", "concurrency_10", "stream"}
    assert figures["stream"]["items"] == 20
