"""After a genuine host-key change (issue 22, point 9): `skyhive down` refuses, and `skyhive down
--force` warns naming both fingerprints, then cleans up as the user chooses by fingerprint — the new
key (trusted, the pool stopped there with it) or the recorded one (that machine is gone: the host is
forgotten, nothing is stopped there, and the warning says so). Real sshd in network namespaces; a host
key rotated by restarting its sshd with a new key (the pool's detached workers run on)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from skyhive.runtime.clusters.hostkeys import fingerprint
from tests.infra.sshd import process_alive
from tests.clusters.test_clusters import wait_for
from tests.clusters.test_ssh_clusters import kept_pool_pids, two_hosts  # noqa: F401 - `two_hosts` is a fixture

pytestmark = [pytest.mark.slow]


def skyhive(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "skyhive", *args], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=180)


def record(home: str) -> dict:
    return json.loads((Path(home) / "clusters" / "train" / "record.json").read_text())


def workers_on(rec: dict, node: int) -> list[int]:
    return [w["pid"] for w in rec["workers"] if w["node"] == node]


def test_down_force_after_a_host_key_change_trusts_the_new_key_once_its_fingerprint_is_given(two_hosts, skyhive_home):
    hosts = two_hosts
    kept_pool_pids(hosts)
    rec = record(skyhive_home)
    old = fingerprint(rec["host_keys"]["0"])
    new = fingerprint(hosts[0].rotate_host_key())
    assert old != new
    pids = [w["pid"] for w in rec["workers"]]
    assert all(process_alive(p) for p in pids)  # sshd restarted with another key; the pool runs on

    refused = skyhive("down", "train")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "its host key does not match the key it showed when the pool was created" in refused.stderr
    assert f"recorded {old}, now {new}" in refused.stderr and "`skyhive down --force train`" in refused.stderr
    assert (Path(skyhive_home) / "clusters" / "train").exists() and all(process_alive(p) for p in workers_on(rec, 0))

    # --force without a choice (no terminal to ask): a warning with both fingerprints, and nothing forgotten
    undecided = skyhive("down", "--force", "train")
    assert undecided.returncode == 1, undecided.stdout + undecided.stderr
    assert f"warning: pool train: host {hosts[0].user}@{hosts[0].host}" in undecided.stderr
    assert f"recorded {old}, now {new}" in undecided.stderr
    assert "--accept-host-key" in undecided.stderr
    assert (Path(skyhive_home) / "clusters" / "train").exists() and all(process_alive(p) for p in workers_on(rec, 0))

    done = skyhive("down", "--force", "--accept-host-key", new, "train")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"recorded {old}, now {new}" in done.stderr
    assert f"trusting its new key {new} to stop the pool there" in done.stderr
    for pid in pids:  # on both hosts: the one with the new key too
        wait_for(lambda pid=pid: not process_alive(pid), 15, f"worker {pid} to end")
    assert not (Path(skyhive_home) / "clusters" / "train").exists()
    # (the fixture checks that nothing of the pool is left on either host)


def test_down_force_forgets_a_host_whose_recorded_machine_is_gone_saying_nothing_was_stopped_there(
        two_hosts, skyhive_home):
    from skyhive.runtime.control.pools import down_cluster

    hosts = two_hosts
    kept_pool_pids(hosts)
    rec = record(skyhive_home)
    for pid in workers_on(rec, 0):  # the machine was reinstalled: what ran there is gone
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda pid=pid: not process_alive(pid), 10, f"worker {pid} to end")
    for d in (hosts[0].home / ".skyhive" / "run").glob("c-train-*"):
        import shutil

        shutil.rmtree(d)
    old = fingerprint(rec["host_keys"]["0"])
    new = fingerprint(hosts[0].rotate_host_key())
    asked: list[str] = []
    said: list[str] = []

    class Err:
        def write(self, text: str) -> None:
            said.append(text)

        def flush(self) -> None:
            pass

    def ask(prompt: str) -> str:  # a terminal's user, typing the recorded key's fingerprint
        asked.append(prompt)
        return old + "\n"

    down_cluster("train", force=True, ask=ask, err=Err())  # type: ignore[arg-type]
    assert len(asked) == 1 and new in asked[0] and old in asked[0]
    text = "".join(said)
    assert f"recorded {old}, now {new}" in text
    assert f"forgotten as the machine with key {old} is gone; NOTHING was stopped on {hosts[0].user}@{hosts[0].host}" in text
    for pid in workers_on(rec, 1):  # the other host was cleaned up as usual
        wait_for(lambda pid=pid: not process_alive(pid), 15, f"worker {pid} to end")
    assert not (Path(skyhive_home) / "clusters" / "train").exists()
