"""Issue 40 (the audit, point 4): SkyPilot's smoke test_multi_node_job_queue launches
examples/job_queue/cluster_multinode.yaml, a task with no `run`. skyhive gives such a task no job id (as
SkyPilot), but its end was still announced with the internal id: `[skyhive] job -1 succeeded (exit code 0)`.
It is named by its task now: `[skyhive] setup of NAME succeeded (exit code 0)`."""

from __future__ import annotations

from tests.clusters.test_clusters import clean  # noqa: F401 - a fixture
from tests.programs.test_job_ids import sky


def test_a_setup_only_launch_ends_without_a_negative_job_id(tmp_path, clean):
    (tmp_path / "cluster.yaml").write_text("name: cluster\nsetup: echo setting up\n")
    launched = sky("launch", "-y", "-c", "t-setup-note", "--infra", "local", "cluster.yaml", cwd=tmp_path)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    both = launched.stdout + launched.stderr
    assert "job -" not in both, both
    assert "[skyhive] setup of cluster succeeded (exit code 0)" in launched.stdout.splitlines(), launched.stdout


def test_a_failed_setup_only_launch_says_which_setup_failed(tmp_path, clean):
    (tmp_path / "broken.yaml").write_text("name: broken\nsetup: exit 3\n")
    launched = sky("launch", "-y", "-c", "t-setup-fail", "--infra", "local", "broken.yaml", cwd=tmp_path)
    assert launched.returncode != 0
    both = launched.stdout + launched.stderr
    assert "job -" not in both, both
    assert any(line.startswith("[skyhive] setup of broken failed_setup") for line in launched.stdout.splitlines()), both
