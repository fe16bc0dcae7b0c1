"""A managed job on the FAKE API server (tests/kinds/kubernetes/fakeapi) recovers a pod deleted from outside:
its controller sees the pod gone, tears the attempt down and runs the job again in a new pod; nothing is left."""

from __future__ import annotations

import textwrap
import time

import pytest

pytest.importorskip("kubernetes", reason="the kubernetes extra is not installed (pip install -e '.[kubernetes]')")

from tests.managed.test_managed_jobs import ended, launch, logs, wait_for  # noqa: E402

#: the first attempt waits (until its pod is deleted); a later one finishes
TASK = textwrap.dedent("""\
    name: kjob
    run: |
      echo "start on $HOSTNAME"
      case "$HOSTNAME" in *"job${SKYHIVE_JOB_ID}-1-"*) sleep 600;; esac
      echo "finished on $HOSTNAME"
""")


def test_a_managed_job_whose_pod_is_deleted_is_recovered_in_a_new_pod(fake_k8s, tmp_path, skyhive_home):
    task = tmp_path / "task.yaml"
    task.write_text(TASK)
    job = launch(str(task), "--infra", "k8s")
    first = wait_for(lambda: next((n for (_, n), p in fake_k8s.cluster.pods.items()
                                   if p["status"].get("phase") == "Running" and "start on" in logs(job)), None),
                     timeout=240, what="the first attempt's pod to run the job")
    fake_k8s.call(fake_k8s.cluster.delete_pod("default", first, None))
    started = time.monotonic()
    info = ended(job)
    assert info["state"] == "SUCCEEDED", info
    assert info["recoveries"] == 1, info
    text = logs(job)
    starts = [line for line in text.splitlines() if "start on" in line]
    assert len(starts) == 2 and first in starts[0] and first not in starts[1], text
    assert "finished on" in text and time.monotonic() - started < 240
    wait_for(lambda: fake_k8s.cluster.pods == {}, timeout=120, what="the job's pods to be deleted")
