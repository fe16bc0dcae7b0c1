"""A pool log line that is valid JSON but no event object (`null`, `[]`, `3`, a string) must not break
any command that reads logs — for that pool or any other: it is skipped with a warning naming the file
and the line, and the pool's other events still count."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from skyhive.runtime.events.log import pool_log_path
from skyhive.runtime.events.types import (NodeStateChanged, OutputChunk, PoolStarted, PoolStopped, from_json,
                                          to_json)

SKYHIVE = [sys.executable, "-m", "skyhive"]
BAD = ["null", "[]", "3", '"a string"', "{}", '{"type": "node_state"}',
       # the right shape, a field of the wrong type or out of range: it would break the fold
       '{"type":"node_state","pool_id":"sick","seq":90,"ts":1.0,"node":"x","state":"ready"}',
       '{"type":"node_state","pool_id":"sick","seq":91,"ts":1.0,"node":null,"state":"ready"}',
       '{"type":"node_state","pool_id":"sick","seq":92,"ts":1.0,"node":1000000000000,"state":"ready"}',
       '{"type":"node_state","pool_id":"sick","seq":93,"ts":1.0,"node":1,"state":5}']


def skyhive(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SKYHIVE, *args], capture_output=True, text=True, timeout=120)


def write_log(pool: str, *, stopped: bool, bad: list[str]) -> None:
    """A two-node Local pool's log whose client is gone, `bad` lines after its first node events."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    now = time.time()
    seq = iter(range(1000))

    def ev(cls, **kw):  # type: ignore[no-untyped-def]
        return cls(pool_id=pool, seq=next(seq), ts=now, **kw)

    head = [ev(PoolStarted, provider="local", nodes=2, processes_per_node=1, pid=dead.pid,
               host=socket.gethostname(), provider_config={"provider": "local"})]
    head += [ev(NodeStateChanged, node=i, state=s) for i in range(2)
             for s in ("provisioning", "running", "connecting", "bootstrapping", "ready")]
    tail = [ev(OutputChunk, task=0, node=1, local_rank=0, stream="stdout", text="hello from 1\n")]
    if stopped:
        tail += [ev(NodeStateChanged, node=i, state=s) for i in range(2) for s in ("terminating", "terminated")]
        tail.append(ev(PoolStopped))
    path = pool_log_path(pool)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(to_json(e) + "\n" for e in head) + "".join(b + "\n" for b in bad)
                    + "".join(to_json(e) + "\n" for e in tail))


@pytest.mark.parametrize("line", BAD)
def test_from_json_refuses_json_that_is_no_event_object_with_a_value_error(line):
    with pytest.raises(ValueError, match="not a skyhive event"):
        from_json(line)


def test_every_command_skips_a_bad_line_naming_file_and_line_and_other_pools_are_unaffected(skyhive_home, tmp_path):
    write_log("sick", stopped=False, bad=BAD)
    write_log("fine", stopped=True, bad=[])
    path = pool_log_path("sick")
    first_bad = 1 + 10 + 1  # PoolStarted, ten node events, then the bad lines

    ls = skyhive("ls", "--json")
    assert ls.returncode == 0, ls.stderr
    (sick,) = [e for e in map(json.loads, ls.stdout.splitlines()) if e["pool"] == "sick"]
    assert sick["status"] == "client gone" and sick["nodes"] == ["ready", "ready"]
    for i in range(len(BAD)):
        assert f"{path}:{first_bad + i}: skipped, not a skyhive event" in ls.stderr, ls.stderr
    assert "Traceback" not in ls.stderr

    every = skyhive("ls", "-a", "--json")
    assert every.returncode == 0, every.stderr
    assert {e["pool"] for e in map(json.loads, every.stdout.splitlines())} == {"sick", "fine"}

    events = skyhive("events", "sick")
    assert events.returncode == 0, events.stderr
    assert len(events.stdout.splitlines()) == 1 + 10 + len(BAD) + 1  # `events` shows the file's lines as they are
    assert f"{path}:{first_bad}: skipped" in events.stderr

    logs = skyhive("logs", "sick")
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout == "[node 1] hello from 1\n"

    png = tmp_path / "t.png"
    timeline = skyhive("timeline", "sick", "-o", str(png))
    assert timeline.returncode == 0, timeline.stderr
    assert png.stat().st_size > 0

    down = skyhive("down", "--all")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "sick: stopped" in down.stdout and "fine" not in down.stdout
    after = [e for e in map(json.loads, skyhive("ls", "-a", "--json").stdout.splitlines())]
    assert {e["pool"]: e["status"] for e in after} == {"sick": "stopped", "fine": "stopped"}
    assert {e["pool"]: e["nodes"] for e in after}["sick"] == ["terminated", "terminated"]
