"""Ctrl-C caught by the script (issue 36 point 11): a script that catches `KeyboardInterrupt` around a
pool call and goes on using the pool. Ctrl-C used to land anywhere in the call, the hand-over to the
pool's event loop included: then the call went on running unseen (the next call queued behind it: a
"hang" until a second Ctrl-C), or the interrupt surfaced outside the script's `try`. Now it surfaces
only where the call waits, after the call was cancelled on the node; the next call runs at once.

A real subprocess gets a real SIGINT, many times: each round prints a marker line just before its call,
and the test sends SIGINT as soon as it reads it (so it lands somewhere in the call: the race), then
waits for the round's next call to answer — every wait bounded, no sleep."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

from tests.procs import wait_gone

ROUNDS = 12

SCRIPT = textwrap.dedent("""\
    import os, sys, time
    import skyhive as sky

    def long_work(k):
        print("worker-pid", os.getpid(), flush=True)
        time.sleep(600)  # (cancelled on the node: never finishes)
        return "FINISHED"

    def quick(k):
        return k * 10

    with sky.Pool(provider=sky.Local(), nodes=1, output=None) as pool:
        for k in range(int(sys.argv[1])):
            try:
                print("CALLING", k, flush=True)
                {call}
                print("NOT INTERRUPTED", k, flush=True)
            except KeyboardInterrupt:
                print("CAUGHT", k, flush=True)
            print("AFTER", k, pool.run(quick, k), flush=True)
    print("END", flush=True)
    """)


class Lines:
    """A child's stdout, line by line, each wait bounded (a reader thread; never a blocking read here)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.q: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.q.put(line.rstrip("\n"))
        self.q.put(None)

    def until(self, wanted: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line {wanted!r} within {timeout} s; seen: {self.seen[-10:]}")
            try:
                line = self.q.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"the script ended before {wanted!r}; seen: {self.seen[-10:]}")
            self.seen.append(line)
            if line.startswith(wanted):
                return line


def run_rounds(tmp_path, call: str) -> None:
    path = tmp_path / "script.py"
    path.write_text(SCRIPT.format(call=call))
    proc = subprocess.Popen([sys.executable, str(path), str(ROUNDS)], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        lines = Lines(proc)
        for k in range(ROUNDS):
            lines.until(f"CALLING {k}", timeout=120)
            proc.send_signal(signal.SIGINT)  # lands somewhere in the round's call: the race
            # the interrupted call was cancelled (its worker freed) and the next one answers: a call
            # left running would hold the one worker for 600 s
            assert lines.until(f"AFTER {k}") == f"AFTER {k} {k * 10}"
        lines.until("END")
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err  # never "as if uncaught"
    assert [line for line in lines.seen if line.startswith(("CAUGHT", "NOT INTERRUPTED"))] == \
        [f"CAUGHT {k}" for k in range(ROUNDS)], lines.seen  # every Ctrl-C reached the script's `except`
    assert "Traceback" not in err and "skyhive: interrupted" not in err, err
    workers = {int(line.split()[1]) for line in lines.seen if line.startswith("worker-pid")}
    assert wait_gone(workers, timeout=30) == set()  # nothing left running


def test_a_caught_ctrl_c_cancels_the_call_and_the_pool_goes_on(tmp_path):
    run_rounds(tmp_path, "pool.run(long_work, k)")


def test_a_caught_ctrl_c_in_a_broadcast_and_in_a_stream(tmp_path):
    run_rounds(tmp_path, "pool.broadcast(long_work, k) if k % 2 else list(pool.stream(long_work, k))")
