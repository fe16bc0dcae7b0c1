"""The Slurm test cluster (tests/infra/slurm.py) works, and leaves nothing behind."""

from __future__ import annotations

import os

import pytest

from tests.infra.slurm import SlurmCluster, check_slurm_support, leftovers
from tests.infra.sshd import InfraUnavailable, process_alive


def _cluster_or_skip() -> SlurmCluster:
    try:
        check_slurm_support()
    except InfraUnavailable as e:
        pytest.skip(f"Slurm test cluster unavailable: {e}")
    return SlurmCluster(2, gpus=2)


def test_two_nodes_run_a_job_each_in_its_namespace_and_close_leaves_nothing() -> None:
    cluster = _cluster_or_skip()
    with cluster:
        token, directory = cluster.token, cluster.dir
        out = cluster.run("srun", "-N2", "-l", "sh", "-c", "echo $(hostname) $(hostname -I)").stdout
        seen = sorted(line.split(":", 1)[1].split() for line in out.splitlines())
        assert seen == [[n.name, n.address] for n in cluster.nodes]
        assert all(n.address.startswith("10.214.") for n in cluster.nodes)
        # the fake GPUs: Slurm hands them out and sets CUDA_VISIBLE_DEVICES
        gpus = cluster.run("srun", "-N1", "--gres=gpu:2", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES").stdout
        assert gpus.strip() == "0,1"
        daemons = [cluster._ctld.pid, cluster._munged.pid] + [n.proc.pid for n in cluster.nodes]
        assert all(process_alive(p) for p in daemons)
        # a job srun ran is listed COMPLETING for a moment after srun returns: wait for it to go
        assert cluster.wait_clean() == ([], {})
    assert not any(process_alive(p) for p in daemons)
    assert leftovers(token) == []
    assert not directory.exists()
    assert not os.path.exists(f"/run/skyhive-slurm/{token}.json")


def test_a_refused_request_quotes_slurm(slurm_cluster: SlurmCluster) -> None:
    proc = slurm_cluster.run("sbatch", "--gres=gpu:9", "--wrap", "true", check=False)
    assert proc.returncode != 0
    assert "Requested node configuration is not available" in proc.stderr
