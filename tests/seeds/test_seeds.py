"""Every code block of the seed documents (../shared/seeds/) runs on `sky.Local()` as a user would run
it (`python program.py`), with no edit but the provider, `.cuda()` on this GPU-less machine, and the
glue the seeds leave to the reader (marked in each program under programs/). Each test checks what
the seed says happens: the process group is ready, ranks are 0..N-1, only the head prints, DDP keeps
the parameters identical, shards are aligned and disjoint.

Elsewhere: seed 004 (SkyPilot's torchrun task files) runs through `skyhive launch` in
tests/commands/test_cli_torch.py, and `launch -c`/`exec`/`down` in tests/clusters/test_clusters.py; seed 000's Keras line
(`plugins=[sky.plugins.jax(), sky.plugins.keras(backend="jax")]`) in tests/plugins/test_plugins_keras.py; the
seeds' decorator order ("@sky.compute must be outermost") in tests/test_seed_names.py.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).resolve().parent / "programs"
ROOT = PROGRAMS.parent.parent.parent

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed here (pip install -e '.[torch]')")


def run(program: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, str(PROGRAMS / program), *args], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if ok:
        assert done.returncode == 0, f"{program} {args} failed:\n{done.stdout}\n{done.stderr}"
    return done


def printed(out: str, tag: str) -> object:
    line = next(ln for ln in out.splitlines() if ln.startswith(tag + " "))
    return ast.literal_eval(line[len(tag) + 1:])


def test_seed000_shard_context_and_output_blocks():
    out = run("seed000_fragments.py").stdout
    shards = printed(out, "SHARDS")
    xs = [x for x, _ in shards]
    for x, y in shards:  # "x[i] still corresponds to y[i]"
        assert y == [f"label-{i}" for i in x]
    assert sorted(i for x in xs for i in x) == list(range(100))  # disjoint, and together all of it
    assert [len(x) for x in xs] == [34, 33, 33]
    assert xs[0][:3] != [0, 3, 6]  # shuffled (seed=42), the same permutation on every node
    lines = out.splitlines()
    assert sorted(ln for ln in lines if "Node " in ln) == [f"[node {i}] Node {i} of 3" for i in range(3)]
    assert [ln for ln in lines if "coordinating" in ln] == ["[node 0] coordinating"]  # only the head
    assert printed(out, "TASKS") == [6, 6, 6]
    assert [ln for ln in lines if "Epoch" in ln] == ["[node 0] Epoch 1: loss=0.2500"]  # only head prints
    assert printed(out, "EMPTY") == [None, None, None]


@pytest.mark.slow
@needs_torch
def test_seed000_process_group_is_ready_when_the_body_runs():
    done = run("seed000_torch_plugin.py")
    assert printed(done.stdout, "RESULTS") == [(True, r, 4) for r in range(4)]
    # Local has no A100: a warning that names it and what this machine has, then it runs anyway
    assert "accelerator='A100' was asked for" in done.stderr and "no GPU" in done.stderr


@pytest.mark.slow
@needs_torch
def test_seed001_integration_decorator_sets_up_ddp():
    out = run("seed001_integration.py").stdout
    assert re.findall(r"^\[node 0\] Epoch (\d):", out, re.M) == ["0", "1"]
    assert "[node 1]" not in out
    ranks = re.findall(r"^RANK (\d)/(\d) params=(\w+) samples=(\d+)$", out, re.M)
    assert [(r, w) for r, w, _, _ in ranks] == [("0", "2"), ("1", "2")]
    assert ranks[0][2] == ranks[1][2]  # identical parameters after DDP
    assert ranks[0][3] == ranks[1][3] == "1000"  # each rank its half of the 2,000 samples


@pytest.mark.slow
@needs_torch
def test_seed002_compute_function_and_t4():
    done = run("seed002_plugin_guide.py")
    out = done.stdout
    assert re.findall(r"^\[node 0\] Epoch (\d):", out, re.M) == ["0", "1"]
    ranks = re.findall(r"^RANK (\d) params=(\w+) samples=(\d+)$", out, re.M)
    assert [r for r, _, _ in ranks] == ["0", "1"] and ranks[0][1] == ranks[1][1]
    assert "accelerator='T4' was asked for" in done.stderr


@pytest.mark.slow
@needs_torch
def test_seed003_basic_ddp_on_four_nodes():
    out = run("seed003_reference.py", "basic").stdout
    lines = out.splitlines()
    assert re.findall(r"^\[node 0\] Epoch (\d):", out, re.M) == [str(e) for e in range(10)]
    assert not [ln for ln in lines if re.match(r"\[node [123]\]", ln)]  # @sky.stdout(only="head")
    assert re.findall(r"^Rank (\d): loss=", out, re.M) == ["0", "1", "2", "3"]


@pytest.mark.slow
@needs_torch
def test_seed003_cpu_only_block():
    out = run("seed003_reference.py", "cpu").stdout
    assert printed(out, "RANKS") == [0, 1, 2, 3]
    assert len(re.findall(r"^\[node 0\] Epoch \d:", out, re.M)) == 10


@pytest.mark.slow
@needs_torch
def test_seed003_torchvision_block_runs_or_is_refused_naming_what_is_missing():
    done = run("seed003_reference.py", "vision", ok=False)
    if importlib.util.find_spec("torchvision") and importlib.util.find_spec("torchaudio"):
        assert done.returncode == 0, done.stderr
        assert printed(done.stdout, "RANKS") == [0, 1]
    else:  # Local builds the environment; the registries here have no torchaudio for this torch
        assert done.returncode != 0
        assert "SetupFailed" in done.stderr and "building the Image's environment here failed" in done.stderr
        assert "torchvision (not installed)" in done.stderr or "torchaudio (not installed)" in done.stderr
        assert "[node" not in done.stdout  # nothing ran


@pytest.mark.slow
@needs_torch
def test_seed003_pinned_versions_are_honoured_or_refused_never_ignored():
    import torch

    done = run("seed003_reference.py", "pinned", ok=False)
    assert done.returncode != 0
    # Local tried to build it, in this test's own SKYHIVE_HOME, and pip refused torch 2.3.0 (fast: no CUDA
    # index reachable, no torch 2.3.0 in the registries here). pip's words depend on the machine's pip
    # configuration, not on skyhive ("No matching distribution found for torch==2.3.0", or with a global
    # constraint file "Cannot install torch==2.3.0 ... ResolutionImpossible"): skyhive's own are checked
    assert "building the Image's environment here failed: pip: exit status 1" in done.stderr
    assert re.search(r"(No matching distribution found for|Cannot install) torch==2\.3\.0", done.stderr), done.stderr
    assert os.environ["SKYHIVE_HOME"] in done.stderr or list(Path(os.environ["SKYHIVE_HOME"]).glob("local-envs/envs/*.lock"))
    assert f"torch==2.3.0 (this Python has torch {torch.__version__})" in done.stderr
    assert "[node" not in done.stdout  # nothing ran


@pytest.mark.slow
@needs_torch
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed here")
def test_seed003_torch_with_huggingface_block():
    results = printed(run("seed003_reference.py", "huggingface").stdout, "RESULTS")
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["token_set"] for r in results)
