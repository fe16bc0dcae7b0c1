"""Process-table helpers for leak checks (zombies count as leaks), and reading a child's output with a
deadline (`Lines`)."""

from __future__ import annotations

import os
import queue
import re
import threading
import time
from collections.abc import Callable
from typing import IO


def state_of(pid: int) -> str | None:
    """The process state letter from /proc (R, S, Z, ...), or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def alive(pid: int) -> bool:
    """True while `pid` exists, zombies included."""
    return state_of(pid) is not None


def worker_pids(pool_id: str | None = None) -> set[int]:
    """PIDs of skyhive worker processes on this machine (any state), of one pool if `pool_id` is given
    (read from the worker's environment, so an orphaned worker is found too)."""
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read()
        except OSError:
            continue
        if b"skyhive.runtime.worker" not in cmd:
            continue
        if pool_id is not None:
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    if f'"pool_id":"{pool_id}"'.encode() not in fh.read():
                        continue
            except OSError:
                continue
        pids.add(int(entry))
    return pids


def wait_gone(pids: set[int], timeout: float = 5.0) -> set[int]:
    """Wait until none of `pids` exists; returns those still there (with zombies) after `timeout`."""
    deadline = time.monotonic() + timeout
    left = {p for p in pids if alive(p)}
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = {p for p in left if alive(p)}
    return left


class Lines:
    """A child's text stream (its `stdout` or `stderr` pipe), read line by line by a thread of its own, so
    that a test waits for the line it expects with a deadline and never blocks on a pipe whose writer lives
    on (the thread closes the pipe at its end: the test does not). Lines that do not match are kept, not fatal: a dependency's warning before skyhive's own line is
    skipped, and shown if the expected line never comes.

        out = Lines(proc.stderr)
        line = out.wait_for("forwarding 127.0.0.1:", 60, "the forward's first line")
    """

    def __init__(self, stream: IO[str] | None) -> None:
        if stream is None:
            raise ValueError("Lines needs a pipe: start the child with stdout/stderr=subprocess.PIPE")
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self.ended = False
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        try:
            for line in stream:
                self._queue.put(line)
        except (OSError, ValueError):  # closed under the thread by the test's cleanup
            pass
        finally:
            self._queue.put(None)
            stream.close()  # this thread owns the pipe: the test does not close it under a blocked read

    def _take(self, timeout: float) -> str | None:
        """The next line within `timeout` (None at the end of the stream); raises queue.Empty."""
        line = self._queue.get(timeout=max(timeout, 0))
        if line is None:
            self.ended = True
        else:
            self.seen.append(line)
        return line

    def wait_for(self, match: str | re.Pattern[str] | Callable[[str], bool], timeout: float, what: str) -> str:
        """The first line from now on that contains `match` (a substring, a compiled pattern searched, or a
        predicate), within `timeout` seconds; AssertionError naming `what` and showing what the stream said
        when it ends first or the time runs out."""
        if isinstance(match, str):
            text = match
            test: Callable[[str], bool] = lambda line: text in line  # noqa: E731
        elif isinstance(match, re.Pattern):
            pattern = match
            test = lambda line: pattern.search(line) is not None  # noqa: E731
        else:
            test = match
        deadline = time.monotonic() + timeout
        while not self.ended:
            try:
                line = self._take(deadline - time.monotonic())
            except queue.Empty:
                raise AssertionError(f"{what}: no such line within {timeout:g} s; so far:\n{self.text()}") from None
            if line is not None and test(line):
                return line
        raise AssertionError(f"{what}: the stream ended first; it said:\n{self.text()}")

    def rest(self, timeout: float = 10.0) -> str:
        """Everything the stream says until it ends or `timeout` passes, and what came before: for an
        assertion's message once the child has been stopped."""
        deadline = time.monotonic() + timeout
        while not self.ended:
            try:
                self._take(deadline - time.monotonic())
            except queue.Empty:
                break
        return self.text()

    def text(self) -> str:
        return "".join(self.seen)
