"""Skyward's distributed collections (issue 26, point 14) on a real multi-node Local pool: `sky.dict`,
`sky.set`, `sky.counter`, `sky.queue`, `sky.barrier`, `sky.lock` shared by the pool's nodes, held by
the client — so a lost worker loses nothing of them and lets go of its locks —, and gone (socket
removed) when the pool closes. Semantics: docs/collections.md."""

from __future__ import annotations

import os
import stat
import threading

import pytest

import skyhive as sky
from skyhive.errors import WorkerLost
from tests.clusters.test_clusters import clean  # noqa: F401 - a fixture

NODES = 3
WAIT = 120.0  # the bound of a barrier or lock wait: only a deadlock reaches it


def bump(n: int) -> int:
    counter = sky.counter("hits")
    for _ in range(n):
        counter.increment()
    return sky.instance_info().node


def locked_total(n: int) -> None:
    totals = sky.dict("totals")
    for _ in range(n):
        with sky.lock("totals"):  # read-modify-write: without the lock updates would be lost
            totals["sum"] = totals.get("sum", 0) + 1


def drain() -> list[int]:
    queue, got = sky.queue("work"), []
    while (item := queue.get(timeout=0.5)) is not None:
        got.append(item)
    return got


def meet() -> tuple[int, int]:
    return sky.instance_info().node, sky.barrier("sync", NODES, timeout=WAIT).wait()


def dedupe(i: int) -> bool:
    return sky.set("seen").add(i % 5)


def test_collections_are_shared_by_every_node():
    with sky.Pool(provider=sky.Local(), nodes=NODES, output=None) as pool:
        path = pool.pool._collections.path
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert sorted(pool.broadcast(bump, 200)) == list(range(NODES))
        assert int(sky.counter("hits")) == 200 * NODES  # no lost update across nodes
        pool.broadcast(locked_total, 50)
        assert sky.dict("totals")["sum"] == 50 * NODES
        queue = sky.queue("work")
        for i in range(60):
            queue.put(i)
        drained = pool.broadcast(drain)
        assert sorted(x for part in drained for x in part) == list(range(60))  # each item taken once
        assert queue.empty() and queue.get(timeout=0) is None
        arrivals = pool.broadcast(meet)
        assert sorted(i for _, i in arrivals) == list(range(NODES))  # all met at one barrier
        fresh = pool.map(dedupe, range(20))
        assert sum(fresh) == 5 and len(sky.set("seen")) == 5 and 3 in sky.set("seen")
    assert not os.path.exists(path)  # closed with the pool


def hold_then_die(flag_key: str) -> None:
    lock, marks = sky.lock("ckpt"), sky.dict("marks")
    assert lock.acquire(timeout=WAIT)
    marks[flag_key] = "written before the loss"
    os._exit(9)  # the worker is lost while it holds the lock


def take_lock() -> tuple[bool, str]:
    lock = sky.lock("ckpt")
    got = lock.acquire(timeout=WAIT)
    try:
        return got, sky.dict("marks")["k"]
    finally:
        lock.release()


def test_a_lost_worker_loses_nothing_and_lets_go_of_its_lock():
    with sky.Pool(provider=sky.Local(), nodes=2, output=None) as pool:
        with pytest.raises(WorkerLost):
            pool.run(hold_then_die, "k")
        assert pool.run(take_lock) == (True, "written before the loss")
        assert sky.dict("marks").keys() == ["k"]


def misuse() -> list[str]:
    out = []
    for attempt in (lambda: sky.dict("d")["missing"], lambda: sky.lock("never").release(),
                    lambda: sky.barrier("b", 3, timeout=0.01).wait(),  # alone: broken, whatever the speed
                    lambda: sky.barrier("b", 2).wait(),
                    lambda: sky.dict("d", consistency="weak")):
        try:
            attempt()
        except Exception as exc:  # noqa: BLE001
            out.append(f"{type(exc).__name__}: {exc}")
    return out


def test_errors_name_what_and_where():
    with pytest.raises(RuntimeError, match="need a pool"):
        sky.dict("x").get("k")
    with sky.Pool(provider=sky.Local(), nodes=1, output=None) as pool:
        key_error, release, broken, barrier, consistency = pool.run(misuse)
    assert key_error == "KeyError: 'missing'"
    assert release == "RuntimeError: sky.lock('never').release(): this task does not hold it"
    assert broken.startswith("BrokenBarrierError")
    assert barrier == "ValueError: sky.barrier('b', n=2): it exists with n=3"
    assert consistency.startswith("ValueError: sky.dict('d', consistency='weak'): use one of eventual, strong")
    with sky.Pool(provider=sky.Simulated(), nodes=1, output=None):  # the client reaches any pool's own
        assert sky.counter("c").increment() == 1


def test_a_node_that_cannot_reach_them_says_why(monkeypatch):
    """A transport that cannot serve them (Slurm: tests/kinds/slurm/test_slurm_pool.py runs it) gives its reason to
    the workers' environment; a task's first call raises it."""
    from skyhive.runtime.collections.store import collections_env

    for key, value in collections_env("not served here: docs/collections.md").items():
        monkeypatch.setenv(key, value)
    with pytest.raises(RuntimeError, match="^not served here: docs/collections.md$"):
        sky.queue("q").put(1)


def test_thread_slots_and_async_methods_share_them():
    def add_many(i: int) -> int:
        import asyncio

        seen = sky.set("ids")
        asyncio.run(seen.add_async(i))
        return sky.counter("n").increment()

    with sky.Pool(provider=sky.Local(), nodes=2, worker=sky.Worker(concurrency=8), output=None) as pool:
        values = sky.gather(*(sky.compute(add_many)(i) for i in range(32))) >> pool
        assert sorted(values) == list(range(1, 33))  # every increment its own value
        assert sorted(sky.set("ids").items()) == list(range(32))
        assert threading.active_count() >= 1


def read_x() -> object:
    return sky.dict("x").get("a", "empty")


def test_a_named_pool_attached_again_starts_with_empty_collections(clean):
    with sky.Pool(provider=sky.Local(), nodes=1, name="kept-coll", keep=True, output=None,
                  worker=sky.Worker(concurrency=2)) as pool:
        sky.dict("x")["a"] = 1
        assert pool.run(read_x) == 1
    with sky.Pool.attach("kept-coll", output=None, keep=False) as pool:
        assert pool.workers == 2  # the record keeps the thread slots: an attached client uses them
        assert pool.run(read_x) == "empty"  # the worker's connection to the first client's store was closed
        sky.dict("x")["a"] = 2
        assert pool.run(read_x) == 2


def test_a_session_keeps_its_locks_and_its_answers_when_its_connection_is_made_again(tmp_path):
    """What an SSH node's task relies on across a reconnect (tests/kinds/ssh/test_ssh_collections.py does it for
    real): a request sent again is answered, not applied twice; the session's locks stay its own while
    it is away for less than its grace, and are let go once it stays away longer."""
    import pickle
    import socket as sockets

    from skyhive.runtime.collections.store import CollectionStore, read_frame, write_frame

    with CollectionStore(str(tmp_path / "s.sock")) as store:
        def connect(session: str, grace: float) -> sockets.socket:
            sock = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
            sock.connect(store.path)
            write_frame(sock, pickle.dumps(("hello", session, grace)))
            return sock

        def ask(sock: sockets.socket, seq: int, *call: object) -> object:
            write_frame(sock, pickle.dumps((seq, *call)))
            ok, value = pickle.loads(read_frame(sock))
            if not ok:
                raise value
            return value

        a = connect("a", 3600.0)
        assert ask(a, 1, "lock", "ckpt", "acquire", (True, None)) is True
        assert ask(a, 2, "counter", "n", "add", (1,)) == 1
        a.close()  # the connection drops (the reply to 2 may have been lost)
        a = connect("a", 3600.0)
        assert ask(a, 2, "counter", "n", "add", (1,)) == 1  # sent again: the same answer, counted once
        assert ask(a, 3, "counter", "n", "add", (1,)) == 2
        assert ask(a, 4, "lock", "ckpt", "locked", ()) is True
        assert ask(a, 5, "lock", "ckpt", "release", ()) is None  # still this session's to release
        with pytest.raises(RuntimeError, match="request 2 came after request 5"):  # a late copy: refused
            ask(a, 2, "counter", "n", "add", (1,))
        assert ask(a, 6, "counter", "n", "value", ()) == 2
        b = connect("b", 0.01)
        assert ask(b, 1, "lock", "ckpt", "acquire", (True, None)) is True
        b.close()  # and it never comes back: let go after its grace
        c = connect("c", 0.0)
        assert ask(c, 1, "lock", "ckpt", "acquire", (True, WAIT)) is True
        c.close()
