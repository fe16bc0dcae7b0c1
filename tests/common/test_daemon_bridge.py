"""One detached-daemon skeleton (`runtime/common/daemon.py`) and one sync→async bridge
(`runtime/common/bridge.py`) (issue 37, done-when 4): the queue agent, the managed controller and the
autostop watchdog are `daemon.serve` with a body; nothing else under `runtime/` runs an event loop."""

from __future__ import annotations

import ast
import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from skyhive.runtime.common import bridge, daemon

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "runtime"


def _loop_runs(path: Path, root: Path = ROOT) -> list[str]:
    """Each `asyncio.run(...)` / `anyio.run(...)` call in the file (also `from asyncio import run`)."""
    tree = ast.parse(path.read_text(), str(path))
    aliases = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
               and n.module in ("asyncio", "anyio") for a in n.names if a.name == "run"}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if (isinstance(f, ast.Attribute) and f.attr == "run" and isinstance(f.value, ast.Name)
                and f.value.id in ("asyncio", "anyio")) or (isinstance(f, ast.Name) and f.id in aliases):
            found.append(f"{path.relative_to(root)}:{node.lineno}")
        # `ex.submit(asyncio.run, ...)`: the function passed, not called
        for arg in node.args:
            if isinstance(arg, ast.Attribute) and arg.attr == "run" and isinstance(arg.value, ast.Name) \
                    and arg.value.id in ("asyncio", "anyio"):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_event_loop_is_started_under_runtime_but_by_the_bridge():
    found = [site for path in sorted(RUNTIME.rglob("*.py")) if path != RUNTIME / "common" / "bridge.py"
             for site in _loop_runs(path)]
    assert not found, "run coroutines through runtime/common/bridge.py:\n" + "\n".join(found)


def test_the_loop_finder_sees_each_way_of_starting_a_loop(tmp_path):
    src = tmp_path / "x.py"
    src.write_text("import asyncio, anyio\nfrom anyio import run as go\nasyncio.run(f())\nanyio.run(f)\n"
                   "ex.submit(asyncio.run, f())\ngo(f)\nloop.run_until_complete(f())\n")
    assert [s.rpartition(":")[2] for s in _loop_runs(src, tmp_path)] == ["3", "4", "5", "6"]


def test_the_daemons_are_the_skeleton_with_a_body():
    """No daemon of this machine takes its lock, writes its pid or detaches by itself."""
    daemons = ["runtime/control/agent.py", "runtime/control/managed/controller.py", "runtime/clusters/autostop.py",
               "runtime/worker/watchdog.py"]
    for rel in daemons:
        text = (ROOT / rel).read_text()
        tree = ast.parse(text)
        names = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
        assert "fcntl" not in names and "daemonize" not in names, rel
        assert "daemon" in names, f"{rel} does not use runtime/common/daemon.py"
        assert "os.pwrite" not in text and "sys.argv" not in text, rel
    assert "daemon.ensure(" in (ROOT / "runtime/control/agent.py").read_text()
    assert "daemon.ensure(" in (ROOT / "runtime/control/managed/controller.py").read_text()
    assert "daemon.start(" in (ROOT / "runtime/kinds/local/keep.py").read_text()  # the autostop watchdog's


# ---- the bridge -----------------------------------------------------------------------------------------


async def _where(x: int) -> tuple[int, str]:
    await asyncio.sleep(0)
    return x + 1, threading.current_thread().name


async def _fails() -> None:
    raise LookupError("no such pool 'p'")


def test_the_bridge_runs_a_coroutine_here_and_returns_or_raises():
    assert bridge.run(_where, 1) == (2, threading.current_thread().name)
    with pytest.raises(LookupError, match="no such pool 'p'"):
        bridge.run(_fails)
    assert not bridge.in_loop()


def test_the_bridge_runs_in_a_thread_of_its_own_when_asked_or_when_a_loop_runs_here():
    value, where = bridge.run(_where, 1, thread=True, name="skyhive-test")
    assert value == 2 and where.startswith("skyhive-test")

    async def inside() -> tuple[int, str]:
        assert bridge.in_loop()
        return bridge.run(_where, 5)  # sync code called from async code: a loop cannot start here

    value, where = asyncio.run(inside())
    assert value == 6 and where.startswith("skyhive-bridge")


# ---- the skeleton, as a real detached process ------------------------------------------------------

FAKE_DAEMON = '''
import os, sys, time
from skyhive.runtime.common import daemon

def main():
    arg = daemon.argument(None, "fake_daemon", "DIR")
    if arg is None:
        return 2
    def started():
        with open(os.path.join(arg, "starts"), "a") as fh:
            fh.write("%d\\n" % os.getpid())
    def on_term():
        open(os.path.join(arg, "termed"), "w").close()
    def body(lease):
        import logging
        logging.getLogger("fake").warning("at work")
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(arg, "termed")) and time.monotonic() < deadline:
            time.sleep(0.05)
        return 0
    return daemon.serve(os.path.join(arg, "d.lock"), os.path.join(arg, "d.log"), body, started=started,
                        log_name="fake-daemon", on_term=on_term)

if __name__ == "__main__":
    os._exit(main())
'''


def _wait(what: str, cond, deadline: float = 60.0) -> None:
    end = time.monotonic() + deadline
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_the_skeleton_starts_one_daemon_detached_and_ends_it_cleanly_on_sigterm(tmp_path, monkeypatch):
    (tmp_path / "fake_daemon.py").write_text(FAKE_DAEMON)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    state = tmp_path / "state"
    state.mkdir()
    lock = str(state / "d.lock")
    assert daemon.holder(lock) is None
    pid = daemon.ensure("fake_daemon", str(state), lock_path=lock, what="the fake daemon")
    try:
        assert isinstance(pid, int) and pid > 0 and pid != os.getpid()
        assert daemon.holder(lock) == pid and (state / "d.lock").read_text() == str(pid)
        assert (state / "starts").read_text() == f"{pid}\n"  # `started` ran before the starter heard of it
        # once only: ensure finds it, a second start finds the lock held and names the holder
        assert daemon.ensure("fake_daemon", str(state), lock_path=lock, what="the fake daemon") == pid
        assert daemon.start("fake_daemon", str(state), what="the fake daemon") == {"already": True, "pid": pid}
        assert (state / "starts").read_text() == f"{pid}\n"
        assert os.getsid(pid) == pid  # its own session: detached
        _wait("its log line", lambda: f"fake-daemon[{pid}]" in (state / "d.log").read_text())
        os.kill(pid, signal.SIGTERM)  # `on_term` runs instead of the default end: the body returns
        _wait("the lock let go", lambda: daemon.holder(lock) is None)
        assert (state / "termed").exists() and (state / "d.lock").read_text() == ""
    finally:
        left = daemon.holder(lock)
        if left and left > 0:
            os.kill(left, signal.SIGKILL)


def test_a_daemon_that_does_not_start_is_named_with_what_it_said(tmp_path, monkeypatch):
    (tmp_path / "fake_daemon.py").write_text(FAKE_DAEMON)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    with pytest.raises(RuntimeError, match=r"the fake daemon did not start: usage: python -m fake_daemon DIR"):
        daemon.start("fake_daemon", what="the fake daemon")  # no argument: usage, exit 2
    with pytest.raises(RuntimeError, match=r"the fake daemon did not start: .*No module named"):
        daemon.start("no_such_daemon_module", what="the fake daemon")
