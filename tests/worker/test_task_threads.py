"""`sky.Worker(concurrency=N)` with the thread executor, Skyward's default (issue 26, point 13): the N
slots of a rank are threads of its one worker process — Skyward's examples ask for 240 and 500 — each
task's output is its own, a cancelled task stops and the worker stays, `executor="process"` still
gives processes. Real Local worker processes."""

from __future__ import annotations

import os
import threading

import pytest

import skyhive as sky
from skyhive.errors import TaskTimeout

WAIT = 120  # a barrier's bound: only a deadlock reaches it


@sky.function
def meet(n: int) -> tuple[int, str]:
    """Wait at a barrier for `n` tasks (created once in the worker process): every one returns only if
    all `n` run at the same time."""
    import builtins

    barrier = builtins.__dict__.setdefault(f"_skyhive_test_barrier_{n}", threading.Barrier(n))
    barrier.wait(timeout=WAIT)
    return os.getpid(), threading.current_thread().name


@pytest.mark.parametrize("slots", [240, 500])
def test_skywards_slot_counts_run_at_once_as_threads_of_one_process(slots):
    with sky.Compute(provider=sky.Local(), nodes=1, worker=sky.Worker(concurrency=slots), output=None) as pool:
        assert pool.workers == slots
        results = sky.gather(*(meet(slots) for _ in range(slots))) >> pool
        assert len(pool.broadcast(os.getpid)) == 1
    assert len({pid for pid, _ in results}) == 1  # one worker process
    assert len({name for _, name in results}) == slots  # each task on a thread of its own


def test_each_tasks_output_is_its_own_and_the_default_executor_is_threads():
    def chatty(i: int) -> int:
        import time

        for line in range(50):
            print(f"task {i} line {line}")
            time.sleep(0)  # let the others print in between
        return os.getpid()

    with sky.Pool(provider=sky.Local(), nodes=1, worker=sky.Worker(concurrency=8), output=None) as pool:
        captured = [pool.run(chatty, i, capture=True) for i in range(2)]  # one at a time: the plain case
        assert all(len(c.stdout.splitlines()) == 50 for c in captured)
        together = sky.gather(*(sky.compute(_captured_chatty)(i) for i in range(8))) >> pool
    for i, (pid, lines) in enumerate(together):
        assert lines == [f"task {i} line {n}" for n in range(50)], lines[:3]
    assert len({pid for pid, _ in together}) == 1


def _captured_chatty(i: int) -> tuple[int, list[str]]:
    """Print 50 lines while 7 other tasks print theirs, and read back what this task's stdout got."""
    import io
    import sys
    import time

    mine = sys.stdout
    seen = io.StringIO()
    write = mine._target().write  # this task's own stream (the router gives each task thread its own)
    for line in range(50):
        text = f"task {i} line {line}\n"
        print(text, end="")
        seen.write(text)
        time.sleep(0)
    assert mine._target().write == write
    return os.getpid(), seen.getvalue().splitlines()


def test_output_reaches_the_caller_per_task():
    records = []
    with sky.Pool(provider=sky.Local(), nodes=1, worker=sky.Worker(concurrency=4), output=None) as pool:
        stream = pool.output()
        sky.gather(*(sky.compute(_print_lines)(i) for i in range(4))) >> pool
        pool.run(_print_lines, 99)
        by_task: dict[int, list[str]] = {}
        for record in stream:
            by_task.setdefault(record.task, []).extend(record.text.splitlines())
            if sum(len(v) for v in by_task.values()) >= 5 * 20:
                break
        records = by_task
    assert len(records) == 5
    for lines in records.values():
        (i,) = {ln.split()[1] for ln in lines}  # every line of a task is that task's
        assert lines == [f"task {i} line {n}" for n in range(20)]


def _print_lines(i: int) -> None:
    import time

    for n in range(20):
        print(f"task {i} line {n}", flush=True)
        time.sleep(0)


def test_a_cancelled_task_thread_stops_and_its_worker_and_neighbours_go_on():
    def spin() -> int:
        x = 0
        while True:  # pure Python: the cancel lands at the next instruction
            x += 1

    with sky.Pool(provider=sky.Local(), nodes=1, worker=sky.Worker(concurrency=4), output=None) as pool:
        before = pool.run(os.getpid)
        neighbours = [sky.compute(meet)(3) > pool for _ in range(2)]  # two tasks waiting at a barrier of 3
        with pytest.raises(TaskTimeout):
            sky.compute(spin)().with_timeout(1) >> pool
        third = sky.compute(meet)(3) >> pool  # the barrier's third: the neighbours were never disturbed
        assert {f.result(timeout=WAIT)[0] for f in neighbours} == {third[0]} == {before}
        assert pool.run(os.getpid) == before  # the same worker process: cancelling did not kill it


def test_the_process_executor_gives_processes(tmp_path):
    from tests.common.test_concurrency import rendezvous

    with sky.Pool(provider=sky.Local(), nodes=1, worker=sky.Worker(concurrency=3, executor="process"),
                  output=None) as pool:
        assert pool.workers == 3
        results = sky.gather(*(sky.compute(rendezvous)(str(tmp_path), i, 3, WAIT) for i in range(3))) >> pool
    assert all(together for together, _ in results)
    assert len({pid for _, pid in results}) == 3
