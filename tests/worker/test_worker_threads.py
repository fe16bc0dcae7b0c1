"""The worker's own threads never leak into a task's world: a `fork()` inside a task prints nothing
(no thread of ours shadows a method CPython calls after fork), and a `Cancel` deferred while an output
thread writes a frame is delivered to the task's thread, not raised in the output thread."""

from __future__ import annotations

import os
import signal
import threading
import time

import anyio
import pytest

import skyhive as sky
from skyhive.runtime.worker.capture import Flusher
from skyhive.runtime.worker.daemon import _CANCEL_SIGNAL, TaskCancelled, WorkerDaemon

LIMIT = 120


def fork_children(n):
    """What a DataLoader with num_workers=n does: fork, let the child run Python, reap it."""
    import threading as _threading

    codes = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            _threading.Thread(target=lambda: None).start()  # the child runs Python threads too
            os._exit(7)
        codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    return codes


@pytest.mark.anyio
async def test_fork_inside_a_task_prints_nothing():
    async with sky.Pool(nodes=1, output=None) as pool:
        with anyio.fail_after(LIMIT):
            result = await pool.run(fork_children, 3, capture=True)
    assert result.value == [7, 7, 7]
    assert result.stderr == "", result.stderr  # was: "Exception ignored in _after_fork ... TypeError"
    assert result.stdout == ""


def test_flusher_does_not_shadow_thread_internals():
    """The attribute clash itself: `Thread._stop` is a method CPython's `_after_fork` calls."""
    flusher = Flusher((), lambda: None)
    assert callable(flusher._stop)
    assert not isinstance(flusher._stop, threading.Event)


def test_a_deferred_cancel_finished_by_an_output_thread_reaches_the_main_thread():
    r_in, w_in = os.pipe()
    r_out, w_out = os.pipe()
    worker = WorkerDaemon(r_in, w_out)
    old = signal.signal(_CANCEL_SIGNAL, worker._on_cancel_signal)
    thread_errors: list[BaseException] = []

    def output_thread_writes_a_frame() -> None:
        try:
            with worker.write_lock:
                worker._write(b"frame")  # the frame that held the Cancel back ends here
        except BaseException as exc:  # noqa: BLE001 - what we check is that nothing gets here
            thread_errors.append(exc)

    try:
        worker.current = worker.cancel_requested = 7
        worker.in_user_code = True
        worker._cancel_deferred = True  # a Cancel arrived while that thread was writing
        writer = threading.Thread(target=output_thread_writes_a_frame, name="skyhive-fd2")
        with pytest.raises(TaskCancelled):
            writer.start()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # the task's thread, computing
                time.sleep(0.01)
        writer.join(LIMIT)
        assert thread_errors == []
        assert os.read(r_out, 100) == b"frame"
    finally:
        signal.signal(_CANCEL_SIGNAL, old)
        for fd in (r_in, w_in, r_out, w_out):
            os.close(fd)
