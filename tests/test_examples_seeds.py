"""The Skyward-style examples (examples/basics.py, streaming.py, concurrency.py, joblib_parallel.py) run
as a user would run them and print what their docstrings promise."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py")], capture_output=True, text=True,
                          timeout=300, cwd=EXAMPLES.parent, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_basics():
    out = run_example("basics")
    assert "2 + 3 = 5" in out
    assert "summary: {'count': 5, 'sum': 15, 'mean': 3.0}" in out
    assert "chunk sums: (3, 12, 21)" in out and "mixed: sum=30 factorial=120" in out
    assert "streamed: [120, 3628800, 2432902008176640000]" in out
    sizes = re.findall(r"^node (\d): (\d+) items", out, re.M)
    assert sizes == [("0", "334"), ("1", "333"), ("2", "333")]
    assert "total 499500 (expected 499500)" in out


def test_streaming():
    out = run_example("streaming")
    assert "fibonacci: [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]" in out
    assert "running mean: [0.5, 0.75, 1.0, 1.25, 1.5]" in out
    assert "moving average: [1.0, 1.5, 2.0, 3.0, 4.0, 5.0]" in out


def test_concurrency():
    out = run_example("concurrency")
    assert re.search(r"20 tasks of 1 s on 10 slots: [\d.]+ s, all done: True", out)


@pytest.mark.skipif(importlib.util.find_spec("sklearn") is None, reason="scikit-learn is not installed here")
def test_joblib_and_grid_search():
    out = run_example("joblib_parallel")
    assert re.search(r"joblib: 100 results, first \[0, 2, 4, 6, 8\], on \d worker processes .*True\)", out)
    assert re.search(r"grid search: best \{'C': \d+(\.\d+)?, 'kernel': '\w+'\}, cv=0\.9\d+", out)
