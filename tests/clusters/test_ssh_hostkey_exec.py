"""`skyhive exec` after a host-key change (issue 36, point 12): the pool's workers still run on the host,
so "the pool is not running (its workers are gone)" was wrong. `exec` says the host key changed, naming
the host, both fingerprints and what to do. Real sshd in network namespaces; the host key rotated by
restarting its sshd with a new key (the pool's detached workers run on)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from skyhive.runtime.clusters.hostkeys import fingerprint
from tests.clusters.test_clusters import wait_for, write
from tests.clusters.test_ssh_clusters import TASK, kept_pool_pids, two_hosts  # noqa: F401 - `two_hosts` is a fixture
from tests.infra.sshd import process_alive

pytestmark = [pytest.mark.slow]


def skyhive(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "skyhive", *args], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=180, cwd=cwd)


def test_exec_after_a_host_key_change_names_the_host_and_the_fix(two_hosts, skyhive_home, tmp_path):
    hosts = two_hosts
    pids = kept_pool_pids(hosts)
    rec = json.loads((Path(skyhive_home) / "clusters" / "train" / "record.json").read_text())
    old = fingerprint(rec["host_keys"]["0"])
    new = fingerprint(hosts[0].rotate_host_key())
    assert old != new and all(process_alive(p) for p in pids)  # sshd restarted with another key; workers run on
    write(tmp_path / "t.yaml", TASK)

    try:
        refused = skyhive("exec", "train", "t.yaml", cwd=tmp_path)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "workers are gone" not in refused.stderr and "not running" not in refused.stderr, refused.stderr
        assert (f"exec train: pool 'train' cannot be reached: host {hosts[0].user}@{hosts[0].host} (node 0) shows "
                f"another host key than when the pool was created: recorded {old}, now {new}. Its workers may "
                "still run there.") in refused.stderr, refused.stderr
        assert "`skyhive down --force train` takes the pool down choosing by fingerprint" in refused.stderr
        assert "someone may be intercepting the connection" in refused.stderr
        assert all(process_alive(p) for p in pids)  # nothing was stopped
        assert not list((Path(skyhive_home) / "clusters" / "train" / "jobs").glob("*.json"))  # nothing queued
    finally:  # as the message says (the fixture's plain `down` would be refused)
        done = skyhive("down", "--force", "--accept-host-key", new, "train", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    for pid in pids:
        wait_for(lambda pid=pid: not process_alive(pid), 15, f"worker {pid} to end")
    # (the fixture checks that nothing of the pool is left on either host, nor here)
