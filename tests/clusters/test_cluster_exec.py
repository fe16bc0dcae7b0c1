"""`skyhive exec NAME task.yaml` with a task that asks for fewer nodes than the named pool has (issue
15): SkyPilot runs such a job on the first N nodes; so does skyhive, and the job's scripts see those N
as the cluster. More nodes than the pool has is an error naming both counts. Real processes, Local.
"""

from __future__ import annotations

from tests.clusters.test_clusters import clean, skyhive, write  # noqa: F401 - `clean` is a fixture

POOL = """\
    name: three
    num_nodes: 3
    resources:
      cloud: local
    run: echo "up on $SKYPILOT_NODE_RANK"
    """

PART = """\
    name: part
    num_nodes: 2
    run: |
      touch {marks}/ran-$SKYPILOT_NODE_RANK
      echo "rank=$SKYPILOT_NODE_RANK num=$SKYPILOT_NUM_NODES ips=$(printf '%s\\n' "$SKYPILOT_NODE_IPS" | wc -l)" \\
           "twin=$SKYHIVE_NODE_RANK/$SKYHIVE_NUM_NODES/$(printf '%s\\n' "$SKYHIVE_NODE_IPS" | wc -l)"
    """


def test_exec_of_a_smaller_task_runs_on_the_first_n_nodes_and_sees_only_them(tmp_path, clean):
    assert skyhive("launch", "-y", "-c", "three", str(write(tmp_path / "pool.yaml", POOL)), cwd=tmp_path).returncode == 0
    marks = tmp_path / "marks"
    marks.mkdir()
    task = write(tmp_path / "part.yaml", PART.format(marks=marks))
    two = skyhive("exec", "three", str(task), cwd=tmp_path)
    assert two.returncode == 0, two.stderr
    assert sorted(p.name for p in marks.iterdir()) == ["ran-0", "ran-1"]  # node 2 ran nothing
    lines = sorted(ln for ln in two.stdout.splitlines() if "rank=" in ln)
    assert lines == [f"[node {r}] rank={r} num=2 ips=2 twin={r}/2/2" for r in (0, 1)]

    for path in marks.iterdir():
        path.unlink()
    one = skyhive("exec", "three", "--num-nodes", "1", str(task), cwd=tmp_path)  # the flag says it too
    assert one.returncode == 0, one.stderr
    assert sorted(p.name for p in marks.iterdir()) == ["ran-0"]
    assert [ln for ln in one.stdout.splitlines() if "rank=" in ln] == ["[node 0] rank=0 num=1 ips=1 twin=0/1/1"]

    full = skyhive("exec", "three", "--num-nodes", "3", str(task), cwd=tmp_path)  # the whole pool, as before
    assert full.returncode == 0, full.stderr
    assert sorted(p.name for p in marks.iterdir()) == ["ran-0", "ran-1", "ran-2"]
    assert "num=3 ips=3" in full.stdout


def test_exec_of_a_task_bigger_than_the_pool_is_an_error_naming_both_counts(tmp_path, clean):
    assert skyhive("launch", "-y", "-c", "three", str(write(tmp_path / "pool.yaml", POOL)), cwd=tmp_path).returncode == 0
    before = skyhive("queue", "three", cwd=tmp_path).stdout
    big = skyhive("exec", "three", "--num-nodes", "4", str(write(tmp_path / "t.yaml", "run: echo hi\n")), cwd=tmp_path)
    assert big.returncode != 0
    assert "the task asks for 4 nodes; pool 'three' has 3" in big.stderr and "--num-nodes 3" in big.stderr
    assert skyhive("queue", "three", cwd=tmp_path).stdout == before  # nothing was queued


def test_launch_c_of_a_smaller_task_reuses_the_pool_sets_up_every_machine_and_runs_on_the_first_n(tmp_path, clean):
    home = clean
    assert skyhive("launch", "-y", "-c", "three", str(write(tmp_path / "pool.yaml", POOL)), cwd=tmp_path).returncode == 0
    from tests.clusters.test_clusters import _worker_pids

    pids = _worker_pids(home, "three")
    marks = tmp_path / "marks"
    marks.mkdir()
    task = write(tmp_path / "part.yaml", PART.format(marks=marks) + "setup: echo \"setup sees $SKYPILOT_NUM_NODES\"\n")
    again = skyhive("launch", "-y", "-c", "three", str(task), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "reusing pool three (3 nodes)" in again.stderr and _worker_pids(home, "three") == pids
    assert sorted(ln for ln in again.stdout.splitlines() if "setup sees" in ln) == [
        f"[node {n}] setup sees 3" for n in range(3)]  # every node of the pool (each Local node its own home)
    assert sorted(p.name for p in marks.iterdir()) == ["ran-0", "ran-1"]
    more = skyhive("launch", "-y", "-c", "three", "--num-nodes", "4", str(task), cwd=tmp_path)
    assert more.returncode != 0 and "num_nodes: pool has 3, task asks 4" in more.stderr
