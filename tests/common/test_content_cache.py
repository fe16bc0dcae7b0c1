"""The content cache (protocol/cache.py, runtime/worker/bufcache.py): a large buffer already sent to
a worker goes by reference the next time; a reference the worker cannot resolve is asked for with
`Missing` and sent as chunks (never an error); a task that writes into its argument does not change
the cached copy; and the same through a real Local pool.
"""

from __future__ import annotations

import os

import pytest

from skyhive.protocol import (
    Connection,
    LocalProtocolError,
    Missing,
    RemoteProtocolError,
    Role,
    Submit,
)
from skyhive.protocol.cache import KEY_SIZE, NO_KEY, ContentIndex
from skyhive.runtime.worker.bufcache import MemfdStore

MiB = 1 << 20
K1, K2 = b"\x01" * KEY_SIZE, b"\x02" * KEY_SIZE
#: the store's two ways in: through a shared mapping (the pipe worker) or by pwrite (the socket worker)
MAPPED = pytest.mark.parametrize("mapped", [True, False], ids=["mapped", "pwrite"])


def pair(store_bytes: int = 64 * MiB, mapped: bool = True) -> tuple[Connection, Connection, MemfdStore]:
    client, worker = Connection(Role.CLIENT), Connection(Role.WORKER, store=MemfdStore(store_bytes, mapped=mapped))
    worker.receive_data(client.hello("x", "3.11", cache_bytes=store_bytes))
    client.receive_data(worker.send(_welcome()))
    return client, worker, worker.store  # type: ignore[return-value]


def _welcome():
    from skyhive.protocol import Welcome
    from skyhive.protocol.messages import PROTOCOL_VERSION
    return Welcome(protocol_version=PROTOCOL_VERSION, python_version="3.11", skyhive_version="x", max_frame=1 << 26)


def submit(task_id: int, buffers, keys: bytes = b"", cached=()) -> Submit:
    return Submit(task_id=task_id, fn_id=b"f", fn=b"", args=b"a", buffer_sizes=tuple(len(b) for b in buffers),
                  buffer_keys=keys, cached=tuple(cached))


def deliver(client: Connection, worker: Connection, msg: Submit, buffers, *, skip=(), only=None,
            bytewise: bool = False) -> list:
    data = bytearray(client.send(msg)) if only is None else bytearray()
    for header, piece in client.send_buffers(msg.task_id, buffers, 256 * 1024, skip=skip, only=only):
        data += header + bytes(piece)
    if not bytewise:
        return worker.receive_data(bytes(data))
    out = []
    for i in range(0, len(data), 4093):  # odd pieces: frames split anywhere
        out += worker.receive_data(bytes(data[i:i + 4093]))
    return out


@MAPPED
def test_a_keyed_buffer_is_kept_and_then_resolved_by_reference_without_chunks(mapped):
    client, worker, store = pair(mapped=mapped)
    big, small = os.urandom(2 * MiB), b"tiny"
    [first] = deliver(client, worker, submit(1, [big, small], K1 + NO_KEY), [big, small], bytewise=True)
    assert bytes(first.buffers[0]) == big and bytes(first.buffers[1]) == small
    assert store.statistics()["buffers"] == 1 and store.used == len(big)
    # second time: only the Submit frame travels, and the worker hands the same content back
    frame = client.send(submit(2, [big, small], K1 + NO_KEY, cached=[0]))
    assert len(frame) < 200
    data = frame + b"".join(h + bytes(p) for h, p in client.send_buffers(2, [big, small], skip=(0,)))
    [second] = worker.receive_data(data)
    assert bytes(second.buffers[0]) == big and bytes(second.buffers[1]) == small
    assert store.hits == 1


@MAPPED
def test_a_task_writing_into_its_cached_argument_changes_its_own_copy_only(mapped):
    client, worker, store = pair(mapped=mapped)
    big = os.urandom(MiB)
    [first] = deliver(client, worker, submit(1, [big], K1), [big])
    view = memoryview(first.buffers[0])
    view[:4] = b"XXXX"  # a task doing `arr[:4] = ...` on its argument
    [second] = deliver(client, worker, submit(2, [big], K1, cached=[0]), [big], skip=(0,))
    assert bytes(second.buffers[0]) == big  # the cache still holds what the client sent
    memoryview(second.buffers[0])[-1:] = b"Y"
    [third] = deliver(client, worker, submit(3, [big], K1, cached=[0]), [big], skip=(0,))
    assert bytes(third.buffers[0]) == big


@MAPPED
def test_an_evicted_buffer_is_asked_for_with_missing_and_then_completes(mapped):
    client, worker, store = pair(store_bytes=3 * MiB, mapped=mapped)
    a, b = os.urandom(2 * MiB), os.urandom(2 * MiB)
    deliver(client, worker, submit(1, [a], K1), [a])
    deliver(client, worker, submit(2, [b], K2), [b])  # over the budget: `a` is evicted
    assert store.statistics()["buffers"] == 1
    out = deliver(client, worker, submit(3, [a], K1, cached=[0]), [a], skip=(0,))
    assert out == [Missing(task_id=3, indices=(0,))]
    data = worker.send(out[0])  # the worker sends it; the client reads it
    assert client.receive_data(data) == [Missing(task_id=3, indices=(0,))]
    [done] = deliver(client, worker, submit(3, [a], K1), [a], only=(0,))
    assert done.task_id == 3 and bytes(done.buffers[0]) == a
    assert K1 in store._held  # kept again


def test_a_worker_without_a_store_asks_for_every_buffer_sent_by_reference():
    client, worker = Connection(Role.CLIENT), Connection(Role.WORKER)
    worker.receive_data(client.hello("x", "3.11"))
    client.receive_data(worker.send(_welcome()))
    a = os.urandom(MiB)
    out = deliver(client, worker, submit(1, [a, b"x"], K1 + NO_KEY, cached=[0]), [a, b"x"], skip=(0,))
    assert out == [Missing(task_id=1, indices=(0,))]
    [done] = deliver(client, worker, submit(1, [a], K1), [a, b"x"], only=(0,))
    assert bytes(done.buffers[0]) == a and bytes(done.buffers[1]) == b"x"


@MAPPED
def test_a_reference_to_a_buffer_still_arriving_waits_for_it_instead_of_asking_again(mapped):
    client, worker, store = pair(mapped=mapped)
    a = os.urandom(2 * MiB)
    wire = bytearray(client.send(submit(1, [a], K1)))
    wire += client.send(submit(2, [a], K1, cached=[0]))  # sent before task 1's chunks (map lanes)
    for header, piece in client.send_buffers(1, [a]):
        wire += header + bytes(piece)
    out = worker.receive_data(bytes(wire))
    assert [type(m).__name__ for m in out] == ["Submit", "Submit"]
    assert [m.task_id for m in out] == [1, 2]
    assert bytes(out[1].buffers[0]) == a
    assert store.statistics()["buffers"] == 1


@pytest.mark.parametrize("cached, keys, what", [
    ((0,), b"", "without a key"),
    ((0,), NO_KEY, "without a key"),
    ((3,), K1, "without a key"),
    ((), K1 + b"\x00", "bytes of buffer_keys"),
    ((0, 0), K1, "twice"),
])
def test_malformed_cache_fields_are_refused_on_both_sides(cached, keys, what):
    client, worker, _ = pair()
    bad = submit(1, [b"x" * 10], keys, cached=cached)
    with pytest.raises(LocalProtocolError, match=what):
        client.send(bad)
    from skyhive.protocol.codec import encode
    with pytest.raises(RemoteProtocolError, match=what):
        worker.receive_data(encode(bad))


def test_content_index_mirrors_an_lru_by_bytes():
    index = ContentIndex(10)
    index.add(K1, 6)
    index.add(K2, 4)
    assert index.touch(K1)  # K2 is now the least recently used
    index.add(b"\x03" * KEY_SIZE, 3)
    assert K1 in index and K2 not in index and index.used == 9
    index.add(b"\x04" * KEY_SIZE, 11)  # larger than the whole budget: not held
    assert b"\x04" * KEY_SIZE not in index
    with pytest.raises(ValueError, match="capacity"):
        ContentIndex(-1)


@MAPPED
def test_the_store_releases_its_memory_files_when_evicting_and_closing(mapped):
    store = MemfdStore(3 * MiB, mapped=mapped)
    before = len(os.listdir("/proc/self/fd"))
    big = store.allocate(4 * MiB)  # larger than the budget: the task's alone, nothing held after
    big[0 : 4 * MiB] = b"z" * (4 * MiB)
    alone = store.keep(b"\x09" * KEY_SIZE, big)
    assert bytes(alone[-1:]) == b"z" and store.used == 0
    alone.close()
    del big
    assert len(os.listdir("/proc/self/fd")) == before
    for i in range(4):
        buf = store.allocate(MiB)
        buf[0:MiB] = bytes([i]) * MiB
        kept = store.keep(bytes([i + 1]) * KEY_SIZE, buf)
        assert bytes(kept[:1]) == bytes([i])
        kept.close()
    assert store.statistics()["buffers"] == 3 and store.used == 3 * MiB
    assert len(os.listdir("/proc/self/fd")) == before + 3
    store.close()
    assert len(os.listdir("/proc/self/fd")) == before and store.used == 0


def _fill(store: MemfdStore, key: bytes, data: bytes):
    target = store.allocate(len(data))
    target[0 : len(data)] = data
    return target, store.keep(key, target)


def _inode(store: MemfdStore, target) -> int:
    return os.fstat(store._arriving[id(target)]).st_ino


@MAPPED
def test_a_full_store_refills_a_file_nobody_maps_with_exactly_the_new_bytes(mapped):
    store = MemfdStore(2 * MiB, mapped=mapped)
    before = len(os.listdir("/proc/self/fd"))
    first, kept = _fill(store, K1, b"a" * (2 * MiB))
    inode = os.fstat(store._held[K1][0]).st_ino
    kept.close()  # the task is done with its argument
    del first, kept
    small = os.urandom(MiB + 5)  # smaller than what the file held: nothing of the old bytes may show
    target = store.allocate(len(small))  # the budget is full: K1 is evicted now, its file refilled
    assert store.refilled == 1 and K1 not in store._held and _inode(store, target) == inode
    target[0 : len(small)] = small
    kept = store.keep(K2, target)
    assert len(kept) == len(small) and bytes(kept) == small
    assert os.fstat(store._held[K2][0]).st_size == len(small)
    kept.close()
    del target, kept
    store.close()
    assert len(os.listdir("/proc/self/fd")) == before


@MAPPED
@pytest.mark.parametrize("task", ["reads", "wrote into it"])
def test_a_file_a_task_still_maps_is_not_refilled_and_the_task_keeps_its_bytes(mapped, task):
    store = MemfdStore(2 * MiB, mapped=mapped)
    old = os.urandom(2 * MiB)
    _, kept = _fill(store, K1, old)
    again = store.lookup(K1, len(old))  # a later task's argument, by reference: still alive
    expected = bytearray(old)
    if task == "wrote into it":
        memoryview(again)[:3] = b"XYZ"
        expected[:3] = b"XYZ"
    kept.close()
    new = os.urandom(2 * MiB)
    _, kept2 = _fill(store, K2, new)
    assert store.refilled == 0  # a fresh file: the old one is still mapped
    assert bytes(again) == bytes(expected) and bytes(kept2) == new
    again.close()
    kept2.close()
    _, kept3 = _fill(store, b"\x03" * KEY_SIZE, os.urandom(2 * MiB))  # K2's file, unmapped now, is refilled
    assert store.refilled == 1
    kept3.close()
    store.close()


def test_a_file_the_client_passed_is_never_refilled_by_the_worker():
    store = MemfdStore(MiB)
    fd = os.memfd_create("client-file")
    os.pwrite(fd, b"c" * MiB, 0)
    kept = store.keep_file(K1, fd, MiB)
    kept.close()
    target = store.allocate(MiB)  # evicts the client's file: closed, not refilled
    assert store.refilled == 0 and K1 not in store._held
    target[0:MiB] = b"n" * MiB
    store.keep(K2, target).close()
    store.close()


def test_a_file_target_takes_exactly_the_slice_it_is_given():
    store = MemfdStore(8 * MiB, mapped=False)
    target = store.allocate(MiB)
    target[MiB - 3 : MiB] = b"end"
    target[0:5] = memoryview(b"start")
    target[MiB - 3 :] = b"end"  # (an open end: up to the buffer's)
    for bad in (slice(0, 4), slice(MiB - 2, MiB + 1), slice(0, 10, 2), slice(-5, 0)):
        with pytest.raises(ValueError, match="cannot write"):
            target[bad] = b"12345"
    kept = store.keep(K1, target)
    assert bytes(kept[:5]) == b"start" and bytes(kept[-3:]) == b"end" and bytes(kept[5:-3]) == bytes(MiB - 8)
    kept.close()
    store.close()


# ---- through a pool ----------------------------------------------------------------------------------

np = pytest.importorskip("numpy", reason="numpy (the dev extra) makes the large arguments")
import functools  # noqa: E402

import skyhive as sky  # noqa: E402


#: no heartbeat during a test, so the frames a client sends are the calls' frames alone
QUIET = {"heartbeat_interval": 60.0, "heartbeat_timeout": 120.0}


def total(arr, extra=0):
    return int(arr.sum()) + extra


def bump_and_total(arr):
    arr += 1  # writes into the argument: the worker's cached copy must not change
    return int(arr.sum())


def channels_of(pool):
    return [c for n in pool._runtime.nodes for c in n.usable_channels()]


def chunk_frames(pool) -> int:
    """Frames the client sent, plus the buffers it passed in shared memory (one each)."""
    return sum(c.conn.frames_sent for c in channels_of(pool)) + SHARED_SENT[0]


SHARED_SENT = [0]


@pytest.fixture(params=["pipe", "shared memory"])
def local_path(request, monkeypatch):
    """Local workers reached through the pipe alone, or with shared memory for large buffers."""
    from skyhive.runtime.common import shm
    from skyhive.runtime.kinds.local.transport import LocalTransport
    if request.param == "pipe":
        monkeypatch.setattr(LocalTransport, "share_memory", False)
    real = shm.send_fds
    SHARED_SENT[0] = 0

    def counting(sock, task_id, indices, fds, **kw):
        SHARED_SENT[0] += len(indices) * 8  # as many as the 1 MiB chunks of an 8 MiB buffer
        return real(sock, task_id, indices, fds, **kw)

    monkeypatch.setattr(shm, "send_fds", counting)
    return request.param


@pytest.mark.anyio
async def test_the_same_large_argument_travels_once_per_worker(local_path):
    arr = np.arange(1 << 20, dtype=np.int64)  # 8 MiB
    async with sky.Pool(nodes=2, **QUIET) as pool:
        assert await pool.broadcast(total, arr) == [int(arr.sum())] * 2
        before = chunk_frames(pool)
        assert await pool.broadcast(total, arr) == [int(arr.sum())] * 2
        assert chunk_frames(pool) - before == 2  # one Submit per worker, no chunk
        # a changed array is a new key: sent whole, and the worker sees the change
        arr[0] = 10**9
        before = chunk_frames(pool)
        assert await pool.run(total, arr) == int(arr.sum())
        assert chunk_frames(pool) - before > 8


@pytest.mark.anyio
async def test_a_task_mutating_its_cached_argument_does_not_change_the_next_call(local_path):
    arr = np.zeros(1 << 20, dtype=np.int64)
    async with sky.Pool(nodes=1) as pool:
        assert [await pool.run(bump_and_total, arr) for _ in range(3)] == [1 << 20] * 3
        assert int(arr.sum()) == 0


@pytest.mark.anyio
async def test_a_worker_that_lacks_a_referenced_buffer_gets_it_sent_and_the_call_succeeds(local_path):
    arr = np.arange(1 << 20, dtype=np.int64)
    async with sky.Pool(nodes=1, cache_min=MiB, **QUIET) as pool:
        [channel] = channels_of(pool)
        from skyhive.runtime.common.keys import content_key
        from skyhive.runtime.common.serialize import dump_args
        _, buffers = dump_args(total, (arr,), {})
        channel.cache.add(content_key(buffers[0]), len(memoryview(buffers[0]).cast("B")))  # a wrong belief
        assert await pool.run(total, arr) == int(arr.sum())  # Missing -> sent -> ran
        before = chunk_frames(pool)
        assert await pool.run(total, arr) == int(arr.sum())
        assert chunk_frames(pool) - before == 1  # held now


@pytest.mark.anyio
async def test_a_map_sharing_one_large_argument_sends_it_once_per_worker(local_path):
    arr = np.arange(1 << 20, dtype=np.int64)  # 8 MiB inside the function (functools.partial)
    async with sky.Pool(nodes=2, **QUIET) as pool:
        before = chunk_frames(pool)
        out = await pool.map(functools.partial(total, arr), range(200), chunksize=10)
        assert out == [int(arr.sum()) + i for i in range(200)]
        frames = chunk_frames(pool) - before
    one_copy = (arr.nbytes >> 20) + 1  # 1 MiB chunks of the function's pickle, per worker
    assert frames <= 20 + 2 * one_copy, frames  # 20 Submits + one copy per worker


def sha1(data):
    import hashlib
    return hashlib.sha1(data).hexdigest()


@pytest.mark.anyio
@pytest.mark.slow
async def test_over_ssh_the_second_send_is_a_reference_and_a_wrong_belief_falls_back(sshd_host):
    from tests.kinds.ssh.test_ssh_pool import ssh_for
    import hashlib
    blob = bytearray(os.urandom(4 * MiB))  # (no numpy on the test host's worker)
    async with sky.Pool(provider=ssh_for(sshd_host), nodes=1, **QUIET) as pool:
        assert await pool.run(sha1, blob) == hashlib.sha1(blob).hexdigest()
        before = chunk_frames(pool)
        assert await pool.run(sha1, blob) == hashlib.sha1(blob).hexdigest()
        assert chunk_frames(pool) - before == 1  # the Submit alone
        [channel] = channels_of(pool)
        other = bytearray(os.urandom(4 * MiB))
        from skyhive.runtime.common.keys import content_key
        channel.cache.add(content_key(other), len(other))  # believed held, which the worker is not
        before = chunk_frames(pool)
        assert await pool.run(sha1, other) == hashlib.sha1(other).hexdigest()
        assert chunk_frames(pool) - before > 4  # sent after all, on the worker's Missing


def bump_view(view):
    view[0] ^= 0xFF  # a task writing into its argument (a memoryview, as a numpy array would be)
    return sha1(view)


@pytest.mark.anyio
@pytest.mark.slow
async def test_over_ssh_a_task_writing_into_its_cached_argument_leaves_the_cache_as_sent(sshd_host):
    from tests.kinds.ssh.test_ssh_pool import ssh_for
    import hashlib
    blob = bytearray(os.urandom(4 * MiB))
    changed = bytearray(blob)
    changed[0] ^= 0xFF
    async with sky.Pool(provider=ssh_for(sshd_host), nodes=1, **QUIET) as pool:
        for _ in range(3):  # arrives (into the cache by pwrite), then twice by reference
            assert await pool.run(bump_view, memoryview(blob)) == hashlib.sha1(changed).hexdigest()
        assert bytes(blob) != bytes(changed)


def keep_and_digest(view):
    import builtins
    builtins._skyhive_test_kept = view  # a task that keeps its argument (in a global) after it ends
    return sha1(view)


def digest_kept():
    import builtins
    return sha1(builtins._skyhive_test_kept)


def store_refills() -> int:
    import gc
    from skyhive.runtime.worker.daemon import WorkerDaemon
    [worker] = [o for o in gc.get_objects() if isinstance(o, WorkerDaemon)]
    return worker.conn.store.statistics()["refilled"]


@pytest.mark.anyio
@pytest.mark.slow
async def test_over_ssh_a_full_cache_refills_files_nobody_maps_and_never_one_a_task_kept(sshd_host):
    from tests.kinds.ssh.test_ssh_pool import ssh_for
    import hashlib
    blobs = [bytearray(os.urandom(4 * MiB)) for _ in range(5)]
    async with sky.Pool(provider=ssh_for(sshd_host), nodes=1, cache_bytes=8 * MiB, **QUIET) as pool:
        assert await pool.run(keep_and_digest, memoryview(blobs[0])) == hashlib.sha1(blobs[0]).hexdigest()
        for blob in blobs[1:]:  # each evicts the oldest: blobs[0]'s file is kept mapped, the others not
            assert await pool.run(sha1, memoryview(blob)) == hashlib.sha1(blob).hexdigest()
        assert await pool.run(store_refills) >= 2
        assert await pool.run(digest_kept) == hashlib.sha1(blobs[0]).hexdigest()


@pytest.mark.anyio
@pytest.mark.slow
async def test_over_ssh_a_connection_cut_while_a_large_argument_arrives_loses_no_byte(make_sshd):
    import hashlib

    import anyio
    from tests.kinds.ssh.test_ssh_pool import ssh_for
    server = make_sshd()
    blob = bytearray(os.urandom(96 * MiB))
    async with sky.Pool(provider=ssh_for(server), nodes=1, **QUIET) as pool:
        transport = pool._runtime.nodes[0].transport
        got: dict[str, str] = {}

        async def call() -> None:
            got["digest"] = await pool.run(sha1, memoryview(blob), timeout=120)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await anyio.sleep(0.05)  # (a 96 MiB argument takes ~0.1 s here: cut it on its way)
            assert await anyio.to_thread.run_sync(server.kill_sessions), "no sshd session to kill"
            assert "digest" not in got  # cut before the call ended
        assert got["digest"] == hashlib.sha1(blob).hexdigest()
        assert transport.connects >= 2
        before = chunk_frames(pool)
        assert await pool.run(sha1, memoryview(blob)) == got["digest"]
        assert chunk_frames(pool) - before == 1  # it was kept whole: the second call is a reference


@pytest.mark.anyio
async def test_with_the_cache_off_every_call_sends_the_bytes(local_path):
    arr = np.arange(1 << 20, dtype=np.int64)
    async with sky.Pool(nodes=1, cache_bytes=0, **QUIET) as pool:
        [channel] = channels_of(pool)
        assert channel.cache is None
        for _ in range(2):
            before = chunk_frames(pool)
            assert await pool.run(total, arr) == int(arr.sum())
            assert chunk_frames(pool) - before > 8  # the whole 8 MiB, each time
    with pytest.raises(ValueError, match="cache_bytes"):
        sky.Pool(nodes=1, cache_bytes=-1)
