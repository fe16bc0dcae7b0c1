"""`Pool(replace_failed=True)` on a named pool (issue 15): the worker of a replaced node is written
into the pool's record, so a later `Pool.attach` takes it over and `skyhive down` ends it — even when
the client that replaced it was killed before it left. Real processes on Local nodes.
"""

from __future__ import annotations

import json
import signal

import pytest

from tests.procs import state_of
from tests.clusters.test_clusters import _worker_pids, clean, python, record  # noqa: F401 - `clean` is a fixture

OPEN = {
    "create": 'sky.Pool(provider=sky.Local(), nodes=2, name="rep", keep=True, output=None, replace_failed=True)',
    "attach": 'sky.Pool.attach("rep", output=None, replace_failed=True)',
}

CLIENT = """
    import json, os, signal, time, skyhive as sky
    from skyhive.runtime.clusters import record as records
    with {open} as pool:
        before = pool.broadcast(os.getpid)
        os.kill(before[1], signal.SIGKILL)  # node 1's worker dies: the node is replaced
        for attempt in range(20):
            try:
                after = pool.broadcast(os.getpid)
                break
            except sky.WorkerLost:  # the call that met the dead worker; the next waits for the new one
                continue
        deadline = time.monotonic() + 30
        while sorted(w.pid for w in records.load("rep").workers) != sorted(after):
            assert time.monotonic() < deadline, "the replacement never reached the record"
            time.sleep(0.05)
        print(json.dumps([before, after, pool.statistics()["replacements"]]), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # killed while attached: nothing detaches, nothing is recorded on leaving
    """


@pytest.mark.parametrize("how", ["create", "attach"])
def test_a_replaced_nodes_worker_is_in_the_record_attached_to_and_downed(tmp_path, clean, how):
    home = clean
    if how == "attach":
        made = python('import skyhive as sky\nwith sky.Pool(provider=sky.Local(), nodes=2, name="rep", keep=True, '
                      'output=None) as pool:\n    pass\n', cwd=tmp_path)
        assert made.returncode == 0, made.stderr
    client = python(CLIENT.format(open=OPEN[how]), cwd=tmp_path)
    assert client.returncode == -signal.SIGKILL, client.stderr
    before, after, replacements = json.loads(client.stdout.strip().splitlines()[-1])
    assert after[0] == before[0] and after[1] != before[1]  # node 1 got a new worker, node 0 kept its own
    assert replacements and state_of(before[1]) in (None, "Z")
    assert _worker_pids(home, "rep") == sorted(after)
    assert [w["socket"].rsplit("/", 1)[1] for w in record(home, "rep")["workers"]] == ["n0-w0.sock", "n1-w0.sock"]

    attached = python("""
        import os, skyhive as sky
        with sky.Pool.attach("rep", output=None) as pool:
            print(pool.broadcast(os.getpid))
        """, cwd=tmp_path)
    assert attached.returncode == 0, attached.stderr
    assert json.loads(attached.stdout.strip().splitlines()[-1]) == after  # the replacement is the pool's worker
    from skyhive.runtime.control.pools import down_cluster

    assert down_cluster("rep", quiet=True) >= 2
    assert all(state_of(p) in (None, "Z") for p in after)  # (`clean` checks nothing else is left)
