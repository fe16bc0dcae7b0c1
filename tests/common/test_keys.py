"""Content keys (runtime/common/keys.py): a large buffer is hashed in parts spread over threads, and its key
depends only on its bytes — not on how many threads hashed it; any changed byte, and the length,
change the key."""

from __future__ import annotations

import os

import pytest

from skyhive.runtime.common import keys
from skyhive.runtime.common.keys import PARALLEL_MIN, PART, content_key

np = pytest.importorskip("numpy", reason="numpy (the dev extra) makes the typed buffers")


@pytest.fixture(scope="module")
def big() -> bytearray:
    return bytearray(os.urandom(PART)) * 5 + bytearray(os.urandom(12345))  # 5 full parts and a short one


def test_the_key_of_a_large_buffer_does_not_depend_on_the_threads(big, monkeypatch):
    expected = content_key(big)
    for helpers in (0, 1, 3):
        monkeypatch.setattr(keys, "_HELPERS", helpers)
        assert content_key(big) == expected
        assert content_key(memoryview(big)) == expected


@pytest.mark.parametrize("where", [0, PART - 1, PART, 3 * PART + 7, -1])
def test_any_changed_byte_changes_the_key(big, where):
    before = content_key(big)
    big[where] ^= 0x01
    try:
        assert content_key(big) != before
    finally:
        big[where] ^= 0x01
    assert content_key(big) == before


def test_the_length_is_part_of_the_key():
    assert content_key(bytes(PARALLEL_MIN)) != content_key(bytes(PARALLEL_MIN + 1))
    assert content_key(bytes(PARALLEL_MIN - 1)) != content_key(bytes(PARALLEL_MIN))


def test_a_typed_or_shaped_buffer_has_the_key_of_its_bytes():
    arr = np.arange(PARALLEL_MIN // 8 * 2, dtype=np.int64).reshape(2, -1)
    assert content_key(arr) == content_key(arr.tobytes())
    small = np.arange(1000, dtype=np.float32)
    assert content_key(small) == content_key(small.tobytes())
    assert len(content_key(arr)) == len(content_key(small)) == 16


def test_a_forked_child_hashes_with_threads_of_its_own(big):
    expected = content_key(big)  # the parent's helper threads exist now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its parent's helpers are gone; a stuck hash would hang here
        try:
            os.write(write, content_key(big))
        finally:
            os._exit(0)
    os.close(write)
    import select
    ready, _, _ = select.select([read], [], [], 30)
    got = os.read(read, 16) if ready else b""
    os.close(read)
    if not ready:
        os.kill(pid, 9)
    os.waitpid(pid, 0)
    assert got == expected


def test_a_helper_that_cannot_run_does_not_hold_the_key_up(big, monkeypatch):
    """The parts go to whichever thread is free: with every helper thread busy elsewhere (as on a
    core another process holds), the caller hashes them all itself, the same key, without waiting."""
    import threading

    expected = content_key(big)
    monkeypatch.setattr(keys, "_HELPERS", 1)
    pool = keys._helpers()
    release = threading.Event()
    blockers = [pool.submit(release.wait, 60) for _ in range(pool._max_workers)]
    got: list[bytes] = []
    try:
        hasher = threading.Thread(target=lambda: got.append(content_key(big)))
        hasher.start()
        hasher.join(30)
        assert not hasher.is_alive(), "content_key waited for a helper that never got to run"
    finally:
        release.set()
        for blocker in blockers:
            blocker.result()
    assert got == [expected]
