"""Each plugin example runs as a user would run it (`python examples/NAME.py`), and says the right things."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

pytestmark = pytest.mark.slow


def run_example(name: str, **env: str) -> str:
    for module in {"torch_ddp": ["torch"], "jax_distributed": ["jax"], "keras_training": ["keras", "jax"],
                   "huggingface_login": ["huggingface_hub", "tokenizers"]}[name]:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")
    done = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py")], capture_output=True, text=True,
                          timeout=300, cwd=EXAMPLES.parent, env={**os.environ, **env})
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_torch_ddp():
    out = run_example("torch_ddp")
    assert re.findall(r"^\[node 0\] Epoch (\d):", out, re.M) == ["0", "1", "2"]
    assert "[node 1]" not in out  # @sky.stdout(only="head")
    params = re.findall(r"^Rank (\d)/2: .* params=([0-9a-f]{16}) samples=1024$", out, re.M)
    assert [rank for rank, _ in params] == ["0", "1"] and params[0][1] == params[1][1]
    assert "identical parameters on every rank: True; ranks trained on different data: True" in out


def test_jax_distributed():
    out = run_example("jax_distributed")
    assert "[node 0] 2 processes, 2 devices; partial sums [120.0, 165.0] -> total 285.0" in out
    assert "[node 1]" not in out
    assert "process 0 of 2: total=285.0\nprocess 1 of 2: total=285.0\nexpected total=285.0" in out


def test_keras_training():
    out = run_example("keras_training")
    assert len(re.findall(r"^\[node 0\] Epoch \d: loss=", out, re.M)) == 4 and "[node 1]" not in out
    shards = re.findall(r"^node (\d): backend=jax samples=256 shard=(\w+) ", out, re.M)
    assert [n for n, _ in shards] == ["0", "1"] and shards[0][1] != shards[1][1]
    assert "identical weights on every node: True" in out


def test_huggingface_login():
    token = "hf_exampleTOKENthatMustNotShow42"
    out = run_example("huggingface_login", HF_TOKEN=token)
    assert token not in out
    assert out.count("the token huggingface_hub sees here: ***") == 2
    assert out.count("logged in=True (token from HF_TOKEN: True)") == 2
