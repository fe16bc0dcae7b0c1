"""`skyhive launch --provider slurm TASK.yaml`: a SkyPilot-style task file on two Slurm nodes."""

from __future__ import annotations

from pathlib import Path

from tests.infra.slurm import SlurmCluster
from tests.test_cli_launch import by_node, skyhive, write
from tests.test_slurm_pool import assert_clean


def test_launch_runs_a_task_file_on_two_slurm_nodes(tmp_path: Path, slurm_cluster: SlurmCluster) -> None:
    write(tmp_path / "task.yaml", """\
        name: slurmtask
        num_nodes: 2
        envs:
          GREETING: hello
        run: |
          echo "$GREETING from $(hostname) rank $SKYPILOT_NODE_RANK of $SKYPILOT_NUM_NODES job $SLURM_JOB_ID"
        """)
    done = skyhive("launch", "--provider", "slurm", "task.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = by_node(done.stdout)
    names = [n.name for n in slurm_cluster.nodes]
    for rank in (0, 1):
        (line,) = [ln for ln in lines[rank] if ln.startswith("hello")]
        assert line.startswith(f"hello from {names[rank]} rank {rank} of 2 job ")
    assert "slurm" in done.stderr
    assert_clean(slurm_cluster)
