"""`sky.Worker(concurrency=N, executor="process")`: N tasks at once per rank of a node (each slot its own
process); a broadcast still reaches each rank once; plugins that form process groups are refused with
it. The thread executor (the default) is tests/worker/test_task_threads.py."""

from __future__ import annotations

import os
import time

import pytest

import skyhive as sky

LIMIT = 60


def rendezvous(folder, i, expected, wait):
    """Check in, then wait up to `wait` seconds for all `expected` tasks to be checked in at once:
    only tasks that run at the same time can all see each other."""
    open(os.path.join(folder, str(i)), "w").close()
    deadline = time.time() + wait
    while len(os.listdir(folder)) < expected and time.time() < deadline:
        time.sleep(0.02)
    return len(os.listdir(folder)) == expected, os.getpid()


def test_fifty_waiting_tasks_run_at_once_on_one_node(tmp_path):
    with sky.Compute(provider=sky.Local(), nodes=1, worker=sky.Worker(concurrency=50, executor="process")) as compute:
        assert compute.workers == 50
        fn = sky.compute(rendezvous)
        results = sky.gather(*(fn(str(tmp_path), i, 50, LIMIT) for i in range(50))) >> compute
        assert len(compute.broadcast(os.getpid)) == 1  # broadcast: once per rank
    assert all(all_there for all_there, _ in results)  # every task saw all 50 running together
    assert len({pid for _, pid in results}) == 50


def test_without_concurrency_tasks_queue_one_by_one(tmp_path):
    with sky.Compute(provider=sky.Local(), nodes=1) as compute:
        fn = sky.compute(rendezvous)
        results = sky.gather(fn(str(tmp_path), 0, 2, 1.0), fn(str(tmp_path), 1, 2, 1.0)) >> compute
    assert [all_there for all_there, _ in results] == [False, True]  # the second ran after the first


def test_slots_serve_their_ranks_and_broadcast_stays_per_rank():
    def where():
        info = sky.instance_info()
        return info.node, info.local_rank

    with sky.Pool(nodes=2, processes_per_node=2, worker=sky.Worker(concurrency=3, executor="process")) as pool:
        assert pool.workers == 12
        assert pool.broadcast(where) == [(0, 0), (0, 1), (1, 0), (1, 1)]
        seen = set(pool.map(lambda _: where(), range(200)))
        assert seen <= {(0, 0), (0, 1), (1, 0), (1, 1)}
        assert len(pool.statistics()["workers"]) == 12


def test_bad_worker_settings_are_refused():
    with pytest.raises(ValueError, match="concurrency=0"):
        sky.Worker(concurrency=0)
    with pytest.raises(ValueError, match="executor='fiber'"):
        sky.Worker(executor="fiber")
    with pytest.raises(TypeError, match="sky.Worker"):
        sky.Pool(worker=4)
    with pytest.raises(ValueError, match="torch"):
        sky.Pool(worker=sky.Worker(concurrency=2, executor="process"), plugins=[sky.plugins.torch()])
    # thread slots share their rank's one process, which joins the process group once
    sky.Pool(worker=sky.Worker(concurrency=2), plugins=[sky.plugins.torch()])
    sky.Pool(worker=sky.Worker(concurrency=2), plugins=[sky.plugins.sklearn()])  # no process group: fine
