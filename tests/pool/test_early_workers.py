"""A plain Local pool starts its workers before the client imports its runtime (issue 41): they import
their own modules beside the client's, and get the rest of their environment in a first frame
(`providers/local_early.py`, `runtime/worker/early.py`). Each script runs in a fresh interpreter, so that
nothing another test imported counts; how much time this saves is measured in bench/, not here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from skyhive.protocol.info import ENV_VAR as INFO_ENV
from skyhive.runtime.actors.worker_argv import WORKER_ARGV
from skyhive.runtime.onnode import early

#: records, in order, each worker spawned and each import of the pool's runtime (audit events)
ORDER = r"""
import json, sys
seen = []
def hook(event, args):
    if event == "subprocess.Popen" and "skyhive.runtime.worker" in list(map(str, args[1] or ())):
        seen.append("spawn")
    elif event == "import" and args[0] == "skyhive.runtime.actors.pool_actor" and "runtime" not in seen:
        seen.append("runtime")
sys.addaudithook(hook)
"""


def _script(code: str, cwd: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=cwd,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.rsplit("RESULT ", 1)[1])


def test_a_plain_local_pool_spawns_its_workers_before_its_runtime_is_imported(tmp_path: Path) -> None:
    result = _script(ORDER + r"""
import skyhive as sky
def nop(): return 1
with sky.Pool(provider=sky.Local(), nodes=2, output=None) as pool:
    one = pool.run(nop)
print("RESULT " + json.dumps({"seen": seen, "one": one}))
""", tmp_path)
    assert result["one"] == 1
    # both workers first, then the runtime; and no other worker spawned (each early one was taken)
    assert result["seen"] == ["spawn", "spawn", "runtime"]


def test_a_worker_started_early_has_the_environment_its_pool_gives(tmp_path: Path) -> None:
    """Its instance info, restart count, the collections, its folder — and its pool's id in the
    environment it was spawned with, where `skyhive ls`/`down` find a pool's processes."""
    result = _script(r"""
import json, os
import skyhive as sky
from tests.procs import worker_pids

def where():
    info = sky.instance_info()
    shared = sky.dict("shared")
    shared[info.node] = os.getpid()
    return {"node": info.node, "total": info.total_nodes, "pool": json.loads(os.environ["COMPUTE_POOL"])["pool_id"],
            "restart": os.environ.get("SKYHIVE_WORKER_RESTARTS"), "cwd": os.getcwd(), "pid": os.getpid(),
            "mark": os.environ.get("SKYHIVE_WORKER_EARLY")}

with sky.Pool(provider=sky.Local(), nodes=2, output=None) as pool:
    seen = pool.broadcast(where)
    found = sorted(worker_pids(pool.id))
    shared = dict(sky.dict("shared").items())
    pool_id = pool.id
print("RESULT " + json.dumps({"seen": seen, "found": found, "pool": pool_id, "shared": shared, "cwd": os.getcwd()}))
""", tmp_path)
    seen = result["seen"]
    assert [s["node"] for s in seen] == [0, 1]
    assert {s["total"] for s in seen} == {2}
    assert {s["pool"] for s in seen} == {result["pool"]}
    assert {s["cwd"] for s in seen} == {result["cwd"]}
    assert {s["mark"] for s in seen} == {None}  # the mark is gone once read: not passed to what tasks start
    assert {s["restart"] for s in seen} == {"0"}
    assert result["found"] == sorted(s["pid"] for s in seen)
    assert {int(k): v for k, v in result["shared"].items()} == {s["node"]: s["pid"] for s in seen}


LEFT = r"""
def children():
    mine = str(os.getpid())
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                rest = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if rest[1] == mine:
            found[entry] = rest[0]
    return found
"""


def test_workers_started_early_that_no_node_takes_are_ended(tmp_path: Path) -> None:
    """A pool whose nodes fail before their workers start (Local refuses more CPUs than it has) leaves
    nothing: the workers spawned early are ended and waited for when the `with` raises."""
    result = _script(ORDER + "import os\n" + LEFT + r"""
import skyhive as sky
try:
    with sky.Pool(provider=sky.Local(), nodes=2, vcpus=100_000, output=None):
        raise AssertionError("entered")
except sky.ProvisionError as exc:
    error = str(exc)
print("RESULT " + json.dumps({"seen": seen, "error": error, "left": children()}))
""", tmp_path)
    assert result["seen"][:2] == ["spawn", "spawn"]  # they were started early
    assert "cpus=100000 " in result["error"]
    assert result["left"] == {}  # no process, no zombie


def test_a_worker_started_early_whose_pool_never_sends_its_environment_exits() -> None:
    worker = subprocess.Popen([sys.executable, *WORKER_ARGV], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env={**os.environ, **early.early_env("pool-x")})
    out, err = worker.communicate(b"", timeout=60)  # its stdin closed at once
    assert (worker.returncode, out, err) == (0, b"", b"")


def test_the_provisional_pool_variable_names_the_pool() -> None:
    assert json.loads(early.early_env("pool-1")[INFO_ENV]) == {"pool_id": "pool-1"}


def test_a_start_cut_short_after_its_workers_were_taken_leaves_no_zombie(tmp_path: Path) -> None:
    """A start that times out (`start_timeout`) while its nodes have taken their early workers: the
    transports kill them, and the wait that would reap them may be cancelled with the start — each one is
    reaped all the same (it was left a zombie in about one start of five)."""
    result = _script("import json, os, time\n" + LEFT + r"""
import skyhive as sky
left = {}
for attempt in range(25):
    try:
        with sky.Pool(provider=sky.Local(), nodes=2, start_timeout=0.001, output=None):
            pass
    except sky.ProvisionError:
        pass
    deadline = time.monotonic() + 30  # (a killed worker's exit is seen at once: generous for a loaded machine)
    while children() and time.monotonic() < deadline:
        time.sleep(0.05)
    left.update(children())
    if left:
        break
print("RESULT " + json.dumps({"left": left}))
""", tmp_path)
    assert result["left"] == {}  # no process, no zombie, after any of the 25 starts


def test_a_handle_whose_reach_holds_early_workers_is_saved_without_them() -> None:
    """A managed job saves the handles of the nodes it lost (`store.save_avoided`, pickled): a Local node's
    reach that holds the workers started early (live processes, their pipes and locks) is saved as data, without
    them (`TypeError: cannot pickle '_thread.lock' object` failed the job's recovery)."""
    import pickle
    import threading

    from skyhive.providers.base import LocalReach, NodeHandle

    class Live:  # stands for an EarlyWorker: a process with its lock
        lock = threading.Lock()

        def __init__(self) -> None:
            self.held = threading.Lock()

    handle = NodeHandle(node=0, provider_id="local-p-0", private_addr="127.0.0.1",
                        reach=LocalReach(cwd="/work", build_env=True, early=(Live(), Live())))
    again = pickle.loads(pickle.dumps([handle]))[0]
    assert again == handle and again.reach.early == () and again.reach.cwd == "/work" and again.reach.build_env


def test_the_early_start_names_the_instance_info_variable_as_the_protocol_does() -> None:
    """`runtime/onnode/early.py` spells `COMPUTE_POOL` itself (the protocol package is not imported before the
    spawn); the two spellings are one."""
    assert early.INFO_ENV == INFO_ENV


#: what a plain Local pool's client imports only after its workers are spawned: the event loop's libraries, the
#: call's pickling and the wire protocol (their import is CPU the workers' start shares, instead of time the
#: client spends alone before the spawn)
AFTER_SPAWN = ("asyncio", "anyio", "cloudpickle", "msgpack", "skyhive.protocol")


def test_a_plain_local_pool_spawns_its_workers_before_it_imports_asyncio_anyio_cloudpickle_or_the_protocol(
        tmp_path: Path) -> None:
    result = _script(r"""
import json, sys
watched = %r
first = {}
spawned = []
def hook(event, args):
    if event == "subprocess.Popen" and "skyhive.runtime.worker" in list(map(str, args[1] or ())):
        spawned.append(len(first))
    elif event == "import" and args[0] in watched and args[0] not in first:
        first[args[0]] = len(spawned)
sys.addaudithook(hook)
import skyhive as sky
def nop(): return 1
with sky.Pool(provider=sky.Local(), nodes=2, output=None) as pool:
    one = pool.run(nop)
print("RESULT " + json.dumps({"first": first, "spawned": len(spawned), "one": one}))
""" % (AFTER_SPAWN,), tmp_path)
    assert result["one"] == 1 and result["spawned"] == 2
    # each watched module was first imported after both workers were spawned
    assert result["first"] == {name: 2 for name in AFTER_SPAWN}
