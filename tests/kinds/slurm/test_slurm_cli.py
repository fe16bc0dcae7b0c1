"""`skyhive launch --provider slurm TASK.yaml`: a SkyPilot-style task file on two Slurm nodes, its
`resources.accelerators` as the allocation's gres."""

from __future__ import annotations

from pathlib import Path

from tests.infra.slurm import SlurmCluster
from tests.commands.test_cli_launch import by_node, skyhive, write
from tests.kinds.slurm.test_slurm_pool import assert_clean


def test_launch_runs_a_task_file_on_two_slurm_nodes(tmp_path: Path, slurm_cluster: SlurmCluster) -> None:
    write(tmp_path / "task.yaml", """\
        name: slurmtask
        num_nodes: 2
        resources:
          accelerators: A100:2
        envs:
          GREETING: hello
        run: |
          echo "$GREETING from $(hostname) rank $SKYPILOT_NODE_RANK of $SKYPILOT_NUM_NODES gpus $CUDA_VISIBLE_DEVICES"
        """)
    done = skyhive("launch", "--provider", "slurm", "task.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = by_node(done.stdout)
    names = [n.name for n in slurm_cluster.nodes]
    for rank in (0, 1):
        (line,) = [ln for ln in lines[rank] if ln.startswith("hello")]
        assert line == f"hello from {names[rank]} rank {rank} of 2 gpus 0,1"
    # the task's accelerators became the allocation's gres, shown before launch
    assert "one Slurm allocation: 2 nodes, the default partition, time limit 60 min, gres gpu:a100:2" in done.stderr
    assert "not checked" not in done.stderr
    assert_clean(slurm_cluster)
