"""`flush_streams`, the barrier at the end of each task: it skips work only when nothing can be pending."""

from __future__ import annotations

import os
import threading
import time

from skyhive.runtime.worker.capture import TaskStream, flush_streams


def _streams():
    sent: list[tuple[int, str]] = []
    pipes = []
    streams = []
    for n in (1, 2):
        stream = TaskStream(n, lambda s, text: sent.append((s, text)), f"<{n}>")
        r, w = os.pipe()
        stream._attach_fd(r)
        pipes.append((r, w))
        streams.append(stream)
    return tuple(streams), pipes, sent


def _close(pipes):
    for r, w in pipes:
        os.close(r)
        os.close(w)


def test_nothing_pending_sends_nothing_and_python_text_is_sent():
    streams, pipes, sent = _streams()
    try:
        flush_streams(streams)
        assert sent == []
        streams[1].write("python text")
        flush_streams(streams)
        assert sent == [(2, "python text")]
    finally:
        _close(pipes)


def test_text_waiting_in_an_fd_pipe_is_sent_before_the_barrier_returns():
    streams, pipes, sent = _streams()
    try:
        os.write(pipes[0][1], b"native ")  # what a subprocess wrote to fd 1 just before the task returned
        os.write(pipes[1][1], b"err")
        flush_streams(streams)
        assert sent == [(1, "native "), (2, "err")]
    finally:
        _close(pipes)


def test_a_send_in_progress_elsewhere_is_waited_for():
    """A pump that already took the pipe's text holds the stream's lock while it sends: the pipe is
    empty, and the barrier must still wait until that text is sent."""
    streams, pipes, sent = _streams()
    taken = threading.Event()

    def pump():
        with streams[0]._lock:  # as FdPump._pump: read under the lock, then send
            taken.set()
            time.sleep(0.2)
            sent.append((1, "from the pump"))

    thread = threading.Thread(target=pump)
    thread.start()
    try:
        taken.wait(5)
        flush_streams(streams)
        assert sent == [(1, "from the pump")]
    finally:
        thread.join()
        _close(pipes)
