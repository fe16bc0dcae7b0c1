"""The provisioning display: what it shows (folded from events, no terminal), and that a real pool
draws it on a terminal (a pty) and stays quiet on a pipe."""

from __future__ import annotations

import asyncio
import io
import os
import pty
import select
import subprocess
import sys
import textwrap

import pytest

from skyhive.runtime.events.stream import EventStream
from skyhive.runtime.events.types import NodeProgress, NodeStateChanged
from skyhive.runtime.output.progress import DETAIL_LIMIT, ProvisioningDisplay, ProvisioningView, wants_display


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def state(node: int, name: str, detail: str = "") -> NodeStateChanged:
    return NodeStateChanged(pool_id="p", seq=0, ts=0.0, node=node, state=name, detail=detail)


def progress(node: int, detail: str = "", provider_state: str = "") -> NodeProgress:
    return NodeProgress(pool_id="p", seq=0, ts=0.0, node=node, detail=detail, provider_state=provider_state)


def test_each_node_shows_its_stage_the_clouds_own_state_and_its_step():
    clock = Clock()
    view = ProvisioningView(3, clock=clock)
    for i in range(3):
        view.apply(state(i, "provisioning"))
    view.apply(progress(0, "aws: pending (provisioning)", provider_state="pending"))
    view.apply(state(1, "running"))
    view.apply(state(1, "connecting"))
    view.apply(state(2, "bootstrapping"))
    view.apply(progress(2, "environment: pip"))
    clock.now += 4
    lines = view.lines("p1")
    assert lines[0] == "pool p1: 0/3 nodes ready (4.0 s)"
    assert lines[1] == "  node 0  provisioning (pending): aws: pending (provisioning)  4s"
    assert lines[2] == "  node 1  connecting  4s"
    assert lines[3] == "  node 2  bootstrapping: environment: pip  4s"
    assert not view.done
    for i in range(3):
        view.apply(state(i, "ready", detail="cached" if i else ""))
    assert view.done
    assert view.lines("p1")[1:] == ["  node 0  ready", "  node 1  ready (cached)", "  node 2  ready (cached)"]


def test_a_big_pool_is_counts_per_state_and_its_failures():
    view = ProvisioningView(DETAIL_LIMIT + 84, clock=Clock())
    for i in range(100):
        view.apply(state(i, "ready" if i < 90 else "connecting"))
    for i in (91, 95):
        view.apply(state(i, "failed", detail="HostUnreachable: 10.0.0.9:22 refused"))
    lines = view.lines("big")
    assert lines[0].startswith("pool big: 90/100 nodes ready")
    assert lines[1] == "  connecting 8 · ready 90 · failed 2"
    assert lines[2:] == ["  node 91: failed: HostUnreachable: 10.0.0.9:22 refused",
                         "  node 95: failed: HostUnreachable: 10.0.0.9:22 refused"]
    assert len(lines) == 4  # never a line per node


def test_events_of_other_kinds_or_unknown_nodes_change_nothing():
    view = ProvisioningView(1, clock=Clock())
    assert not view.apply(state(5, "ready"))
    assert view.apply(state(0, "ready"))


@pytest.mark.anyio
async def test_the_summary_counts_the_events_that_arrived_just_before_the_start_ended():
    # The pool's start ends (and stops the display) in the same turn of the loop as its last node's
    # "ready" event: the display's task has not taken that event yet. The screen's last frame and the
    # summary left behind must count it (CI once printed "1 bootstrapping, 1 ready" for a ready pool).
    screen = io.StringIO()
    display = ProvisioningDisplay("p-sum", 2, stream=screen)
    events = EventStream(1 << 20, lambda _: None)
    runner = asyncio.create_task(display.run(events))
    events.put(state(0, "ready"))
    events.put(state(1, "bootstrapping"))
    for _ in range(5):  # the display takes and draws both
        await asyncio.sleep(0)
    assert events.pending == 0 and display.view.counts() == {"ready": 1, "bootstrapping": 1}
    events.put(state(1, "ready", detail="cached"))  # ... and the start ends before its task runs again
    await display.stop()
    await runner
    text = screen.getvalue()
    assert "skyhive: pool p-sum: 2 ready (" in text, text
    assert "node 1  ready (cached)" in text, text  # drawn in the last frame too


def test_the_display_is_drawn_only_on_a_terminal_unless_asked():
    class Stream:
        def __init__(self, tty: bool) -> None:
            self.tty = tty

        def isatty(self) -> bool:
            return self.tty

    assert wants_display(None, Stream(True)) and not wants_display(None, Stream(False))
    assert wants_display(True, Stream(False)) and not wants_display(False, Stream(True))


PROGRAM = textwrap.dedent("""
    import skyhive as sky
    with sky.Pool(provider=sky.Local(), nodes=2, name={name!r}) as pool:
        print("RESULT", pool.broadcast(lambda: 7), flush=True)
""")


def run_program(name: str, *, tty: bool) -> tuple[str, str]:
    """Run a 2-node Local pool in a child; (stdout, stderr) as bytes decoded, stderr on a pty if `tty`."""
    code = PROGRAM.format(name=name)
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm"}
    if not tty:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout, done.stderr
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=slave,
                            stdin=subprocess.DEVNULL, env=env)
    os.close(slave)
    chunks: list[bytes] = []
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 120)
            if not ready:
                break
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed its side
                break
            if not data:
                break
            chunks.append(data)
        out, _ = proc.communicate(timeout=60)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, b"".join(chunks).decode(errors="replace")
    return out.decode(), b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
def test_a_pool_started_on_a_terminal_draws_each_stage_and_leaves_a_summary():
    out, err = run_program("p-progress-tty", tty=True)
    assert "RESULT [7, 7]" in out
    assert "pool p-progress-tty: 0/2 nodes ready" in err  # drawn from the first event on
    for stage in ("provisioning", "connecting", "bootstrapping"):
        assert stage in err, err
    assert "\x1b[" in err  # drawn as a live display (cursor movement), not as log lines
    assert "skyhive: pool p-progress-tty: 2 ready (" in err  # what stays on the screen


@pytest.mark.slow
def test_a_pool_started_off_a_terminal_draws_nothing():
    out, err = run_program("p-progress-pipe", tty=False)
    assert "RESULT [7, 7]" in out
    assert "nodes ready" not in err and "skyhive: pool" not in err and "\x1b[" not in err
