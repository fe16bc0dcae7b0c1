"""One rule for what a Local pool asks of this machine's CPUs and memory, whichever spelling asks:
`Pool(vcpus=64)` / `Pool(cpus=...)` / `Pool(memory_gb=...)` in Python and a task's `resources.cpus:
64+` / `resources.memory` are requirements — what this machine does not have is refused, naming what
was asked and what there is, never silently run on less (docs/local.md)."""

from __future__ import annotations

import os

import pytest

import skyhive as sky
from tests.commands.test_cli_launch import by_node, skyhive, write

CORES = os.cpu_count() or 1


@pytest.mark.parametrize("asked", [dict(vcpus=CORES * 64), dict(cpus=CORES + 1)], ids=["vcpus", "cpus"])
def test_python_cpus_this_machine_lacks_are_refused(asked):
    want = next(iter(asked.values()))
    with pytest.raises(sky.ProvisionError, match=rf"cpus={want} \(Pool\(vcpus=/cpus=\), resources\.cpus\) was asked "
                                                  rf"for, but it has {CORES} CPUs; Local runs on this machine as it is"):
        with sky.Pool(provider=sky.Local(), nodes=2, output=None, **asked) as pool:
            pool.run(abs, -1)  # never reached


def test_python_memory_this_machine_lacks_is_refused():
    with pytest.raises(sky.ProvisionError, match=r"memory_gb=100000 \(Pool\(memory_gb=\), resources\.memory\) was "
                                                  r"asked for, but it has [\d.]+ GB"):
        with sky.Pool(provider=sky.Local(), memory_gb=100_000, output=None):
            pass


def test_python_requirements_this_machine_meets_run():
    with sky.Pool(provider=sky.Local(), nodes=2, vcpus=CORES, memory_gb=0.1, output=None) as pool:
        assert pool.broadcast(abs, -2) == [2, 2]


def test_a_task_asking_for_more_cpus_than_this_machine_has_is_refused_too(tmp_path):
    write(tmp_path / "t.yaml", f"resources:\n  cpus: {CORES * 64}+\nsetup: echo SETUP-RAN\nrun: echo RUN-RAN\n")
    short = skyhive("launch", "t.yaml", cwd=tmp_path)
    assert short.returncode != 0
    assert f"resources.cpus {CORES * 64}: node 0 (" in short.stderr and f"has {CORES} CPUs" in short.stderr
    assert "SETUP-RAN" not in short.stdout and "RUN-RAN" not in short.stdout
    write(tmp_path / "ok.yaml", f"resources:\n  cpus: {CORES}+\nrun: echo ran on $SKYPILOT_NODE_RANK\n")
    ok = skyhive("launch", "ok.yaml", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert by_node(ok.stdout) == {0: ["ran on 0"]}
