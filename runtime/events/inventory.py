"""Pools found from their event logs: list them, follow them, and clean up after a crashed client.

Everything here reads the JSONL logs under `state_dir()/pools/` and nothing else: a pool's state is
`fold(events)`; whether its client still runs is a look at the recorded pid (with the process's start
time checked against the log, so a recycled pid is not mistaken for the client).

`down` on a pool whose client is gone rebuilds the provider from the log (`providers.registry`),
destroys what it still owns, kills the Local worker processes (and anything left in their process
groups) that the log recorded, and appends the closing events, so the log says the pool stopped.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import anyio

from ...errors import PoolInUse, PoolNotFound
from ...protocol.info import ENV_VAR
from ...providers.base import ProvisionError
from ...providers.registry import from_description
from .lifecycle import NodeState, check_transition
from ...paths import state_dir
from .state import PoolState, fold
from .types import Event, NodeStateChanged, PoolStarted, PoolStopped, WorkerStateChanged, from_json, to_json
from ..common.procfs import proc_stat
from ..common import bridge

__all__ = ["PoolNotFound", "PoolInUse", "LogTail", "PoolEntry", "DownReport", "pools_dir", "read", "scan",
           "find", "client_of", "down", "owned_summary", "DOWN_REASON"]

DOWN_REASON = "cleaned up by skyhive down"
log = logging.getLogger("skyhive.inventory")
#: Slack when matching a process's start time with the log's timestamps (btime has 1 s resolution).
_CLOCK_SLACK = 2.0
_KILL_GRACE = 3.0
#: A log without a PoolStarted event younger than this may belong to a pool that is starting.
_YOUNG = 60.0


def pools_dir() -> Path:
    return state_dir() / "pools"


class LogTail:
    """Reads a pool's log incrementally: complete lines only (a line being written waits for its end)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.bad_lines = 0
        self._partial = b""
        self._line = 0  # the number of the last complete line read (1-based, blank ones counted)

    def lines(self) -> list[str]:
        """The complete lines added since the last call."""
        return [line for _, line in self.numbered()]

    def numbered(self) -> list[tuple[int, str]]:
        """The complete lines added since the last call, each with its line number in the file."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self._partial + data
        *complete, self._partial = data.split(b"\n")
        first, self._line = self._line + 1, self._line + len(complete)
        return [(first + i, line.decode("utf-8", errors="replace")) for i, line in enumerate(complete) if line.strip()]

    def events(self) -> list[Event]:
        """The events added since the last call. A line that is no event (garbage, or valid JSON that
        is no event object: `null`, `[]`, `3`) is skipped with a warning naming the file and the line,
        and counted in `bad_lines`: one bad line must not keep any command from the rest."""
        out = []
        for number, line in self.numbered():
            try:
                out.append(from_json(line))
            except (ValueError, TypeError) as exc:
                self.skipped(number, exc)
        return out

    def skipped(self, number: int, exc: BaseException) -> None:
        """Count line `number` as bad and warn, naming the file and the line."""
        self.bad_lines += 1
        log.warning("%s:%d: skipped, not a skyhive event (%s)", self.path, number, exc)


@dataclass(frozen=True, slots=True)
class PoolEntry:
    """One pool log: its state, its `PoolStarted` record and whether its client still runs."""

    pool_id: str
    path: Path
    state: PoolState
    started: PoolStarted | None
    client: str  # "alive", "gone", "remote" (started on another host: cannot tell), "" once stopped or leaking
    bad_lines: int = 0
    #: when the first of its nodes ran (the cloud bills from there); None: none ever ran
    billed_from: float | None = None

    @property
    def status(self) -> str:
        if self.state.status == "stopped":
            return "stopped"
        if self.state.status == "leaking":  # closed, but the provider did not confirm everything gone
            return "leaking"
        if self.started is None:
            return "empty"
        if self.state.status == "detached":  # a named pool between clients (`skyhive status`)
            return "kept (named pool)"
        return {"alive": "running", "gone": "client gone", "remote": f"running on {self.state.host}"}[self.client]

    @property
    def machine(self) -> str:
        """The instance type its provider chose ("" when the provider does not choose machines)."""
        plan = self.started.plan if self.started is not None else {}
        return str(plan.get("instance_type") or "")

    def cost(self, now: float) -> tuple[float, float] | None:
        """(estimated cost per hour, spent so far) in USD from the provider's plan, or None if unpriced.
        The pool is counted from its first node that ran to its stop (or `now`); a pool none of whose
        nodes ever ran (it failed before, e.g. without credentials) cost nothing and shows no cost."""
        plan = self.started.plan if self.started is not None else {}
        per_hour = plan.get("cost_per_hour")
        if not isinstance(per_hour, (int, float)) or not self.state.started or self.billed_from is None:
            return None
        end = self.state.stopped or now
        return float(per_hour), float(per_hour) * max(0.0, end - self.billed_from) / 3600

    @property
    def needs_down(self) -> bool:
        return self.state.status != "stopped"


def read(path: Path) -> PoolEntry:
    tail = LogTail(path)
    events = tail.events()
    state = fold(events)  # batched: one `apply` per event copied the state ~9 times per node
    started, ran = _current(events)
    return PoolEntry(pool_id=path.stem, path=path, state=state, started=started,
                     client=_client(state, started), bad_lines=tail.bad_lines, billed_from=ran)


def _current(events: list[Event]) -> tuple[PoolStarted | None, float | None]:
    """The `PoolStarted` of the pool the log is about now, and when its first node ran. A named pool's log
    holds every pool that had its name, one after another (each stopped before the next started), and
    each attach of a kept pool adds a `PoolStarted` to the same pool: the one that counts (its provider,
    machine and price) is the first after the last `PoolStopped` before the end."""
    started: PoolStarted | None = None
    ran: float | None = None
    closed = False
    for ev in events:
        if isinstance(ev, PoolStarted) and (started is None or closed):
            started, ran, closed = ev, None, False
        elif isinstance(ev, PoolStopped):
            closed = True
        elif ran is None and started is not None and isinstance(ev, NodeStateChanged) and ev.state == "running":
            ran = ev.ts
    return started, ran


def scan(*, include_stopped: bool = False) -> list[PoolEntry]:
    """Every pool with a log, oldest first (stopped ones only with `include_stopped`)."""
    folder = pools_dir()
    entries = [read(p) for p in folder.glob("*.jsonl")] if folder.is_dir() else []
    entries = [e for e in entries if include_stopped or e.needs_down]
    return sorted(entries, key=lambda e: (e.state.started or e.path.stat().st_mtime, e.pool_id))


def find(pool: str) -> PoolEntry:
    """The pool whose id is `pool`, or the only one whose id starts with it."""
    path = pools_dir() / f"{pool}.jsonl"
    if "/" not in pool and path.is_file():
        return read(path)
    folder = pools_dir()
    matches = sorted(p for p in folder.glob("*.jsonl") if p.stem.startswith(pool)) if folder.is_dir() else []
    if len(matches) == 1:
        return read(matches[0])
    if not matches:
        raise PoolNotFound(f"no pool {pool!r} in {folder} (`skyhive ls -a` lists them)")
    raise PoolNotFound(f"{pool!r} matches {len(matches)} pools: {', '.join(p.stem for p in matches[:5])}; "
                       f"give more of the id")


# ---- processes ---------------------------------------------------------------------------------------


def _boot_time() -> float:
    with open("/proc/stat") as fh:
        for line in fh:
            if line.startswith("btime "):
                return float(line.split()[1])
    return 0.0


def _started_at(stat: list[str]) -> float:
    return _boot_time() + int(stat[19]) / os.sysconf("SC_CLK_TCK")


def _is_live(pid: int, *, not_after: float) -> bool:
    """`pid` runs (not a zombie) and started no later than `not_after` (so it is not a recycled pid)."""
    stat = proc_stat(pid) if pid > 0 else None
    return stat is not None and stat[0] != "Z" and _started_at(stat) <= not_after + _CLOCK_SLACK


def _client(state: PoolState, started: PoolStarted | None) -> str:
    if state.status in ("stopped", "leaking") or started is None:  # its client is done with it
        return ""
    return client_of(started)


def client_of(started: PoolStarted) -> str:
    """Whether the client that started a pool runs: "alive", "gone", or "remote" (another host: unknown)."""
    if started.host != socket.gethostname():
        return "remote"
    return "alive" if _is_live(started.pid, not_after=started.ts) else "gone"


def _pool_of(pid: int) -> str | None:
    """The pool id in the `COMPUTE_POOL` variable a process was started with (workers and their children)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            environ = fh.read()
    except OSError:
        return None
    prefix = ENV_VAR.encode() + b"="
    for item in environ.split(b"\0"):
        if item.startswith(prefix):
            try:
                return str(json.loads(item[len(prefix):])["pool_id"])
            except (ValueError, KeyError, TypeError):
                return None
    return None


def _leftovers(pool_id: str) -> list[int]:
    """Live processes of this machine, of our user, that belong to `pool_id`: its workers and what their
    tasks started.

    They are recognised by the pool id in the environment they inherited from the worker (the
    `COMPUTE_POOL` variable), which also finds a task's children that left the worker's process group.
    Only our own user's: Local workers run as us, and a process of another user with that pool id is
    a worker an SSH host runs here for its login user — the provider's `destroy` (over SSH, as that
    user) is what stops it, not root on this machine.
    """
    found = []
    uid = os.getuid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
        except OSError:
            continue
        stat = proc_stat(int(entry))
        if stat is not None and stat[0] != "Z" and _pool_of(int(entry)) == pool_id:
            found.append(int(entry))
    return found


def _kill(pids: list[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + _KILL_GRACE
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if (s := proc_stat(p)) is not None and s[0] != "Z"]
            time.sleep(0.05)
        if not pids:
            return


# ---- down --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DownReport:
    pool_id: str
    killed: int
    destroyed: int
    already_stopped: bool = False
    warning: str = ""  # with force: what could not be done (the pool was recorded stopped anyway)


def down(pool: PoolEntry, *, force: bool = False, why: str = "", leftovers: bool = True,
         destroy: bool = True) -> DownReport:
    """Clean up `pool`: kill what its log says still runs, destroy what its provider owns, record it stopped.

    Raises `PoolInUse` if its client still runs (unless `force`), `ProvisionError` if its provider
    cannot be rebuilt or fails to destroy its nodes (the log is then left as it was; with `force` the
    pool is recorded stopped anyway and the report's `warning` says what may be left — except a
    `leaking` pool, which stays so until its provider confirms). With
    `leftovers=False` the caller ends the pool's processes itself (a named pool: its name is not
    unique on this machine, so processes are not looked up by it).
    """
    with open(pool.path, "r+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one `down` at a time per pool
        pool = read(pool.path)
        if not pool.needs_down:
            return DownReport(pool.pool_id, 0, 0, already_stopped=True)
        if pool.started is None and time.time() - pool.path.stat().st_mtime < _YOUNG and not force:
            raise PoolInUse(f"pool {pool.pool_id} is just starting (its log has no events yet); "
                            f"try again in a minute, or pass --force")
        if pool.client == "alive" and not force:
            raise PoolInUse(f"pool {pool.pool_id} is in use by process {pool.state.pid}: stop that program "
                            f"(its pool closes itself), or pass --force to tear it down anyway")
        if pool.client == "remote" and not force:
            raise PoolInUse(f"pool {pool.pool_id} was started on host {pool.state.host}: run `skyhive down` "
                            f"there, or pass --force to destroy its nodes from here")
        warning = ""
        try:
            destroyed = _destroy(pool) if destroy else 0  # (`skyhive stop`: the machines are kept)
        except ProvisionError as exc:
            if not force or pool.state.status == "leaking":  # a known leak is never recorded done unconfirmed
                raise
            destroyed, warning = 0, f"{exc} (its nodes may still run)"
        killed = 0
        if pool.client != "remote" and leftovers:  # processes of this pool on this machine (Local workers)
            found = _leftovers(pool.pool_id)
            _kill(found)
            killed = len(found)
            shutil.rmtree(state_dir() / "work" / pool.pool_id, ignore_errors=True)
        _append_closing(lock, pool, why=why or _why(pool))
    return DownReport(pool.pool_id, killed, destroyed, warning=warning)


def _why(pool: PoolEntry) -> str:
    if pool.client == "gone":
        return f"{DOWN_REASON}: client process {pool.state.pid} was gone"
    if pool.client == "alive":
        return f"{DOWN_REASON} --force while client process {pool.state.pid} ran"
    return DOWN_REASON


def owned_summary(pool: PoolEntry, timeout: float = 10.0) -> str:
    """What the pool's provider says it still holds ("job 12 RUNNING"), for `skyhive ls`; "" when the
    provider cannot tell cheaply (`Provider.owned_summary`), or the query failed (logged)."""
    if pool.started is None or not pool.needs_down:
        return ""
    try:
        provider = from_description(pool.started.provider_config or {"provider": pool.started.provider})
    except ProvisionError:
        return ""
    async def ask() -> str | None:
        with anyio.fail_after(timeout):
            return await provider.owned_summary(pool.pool_id)

    try:
        return bridge.run(ask) or ""
    except Exception as exc:  # noqa: BLE001 - ls must list the other pools
        log.warning("pool %s: could not ask the %s provider what it holds: %s", pool.pool_id, provider.name, exc)
        return "?"


def _destroy(pool: PoolEntry) -> int:
    if pool.started is None:
        return 0
    provider = from_description(pool.started.provider_config or {"provider": pool.started.provider})
    if pool.started.nodes > 0:
        # a provider naming hosts: only those the pool used (replacements took spares, in list order; an
        # elastic pool's nodes added later have indices past its start's count)
        provider = provider.for_nodes(max(pool.started.nodes, len(pool.state.nodes)) + pool.state.replacements)

    async def destroy() -> int:
        with anyio.fail_after(300):
            return len(await provider.down(pool.pool_id))  # its nodes (by tag), then what prepare made

    try:
        return bridge.run(destroy)
    except ProvisionError:
        raise
    except TimeoutError:
        raise ProvisionError(f"pool {pool.pool_id}: the {provider.name} provider did not destroy its nodes "
                             f"within 300 s; run `skyhive down {pool.pool_id}` again") from None
    except Exception as exc:  # a cloud SDK's own error: say who failed, keep the cause
        raise ProvisionError(f"pool {pool.pool_id}: the {provider.name} provider failed to destroy its nodes: "
                             f"{type(exc).__name__}: {exc}; run `skyhive down {pool.pool_id}` again") from exc


def _append_closing(fh: IO[bytes], pool: PoolEntry, *, why: str) -> None:
    """Append the events that close the pool: workers stopped, nodes terminated, pool stopped."""
    # a client killed mid-write leaves a torn last line: drop it, so ours start on a line of their own
    fh.seek(0, os.SEEK_END)
    size = fh.tell()
    if size:
        fh.seek(max(0, size - 65536))
        tail = fh.read()
        cut = size - (len(tail) - (tail.rfind(b"\n") + 1)) if b"\n" in tail else size
        if cut < size:
            fh.truncate(cut)
    state = pool.state
    seq = state.last_seq + 1
    now = time.time()
    out: list[Event] = []

    def add(cls: type[Event], **fields: object) -> None:
        nonlocal seq
        out.append(cls(pool_id=pool.pool_id, seq=seq, ts=now, **fields))  # type: ignore[arg-type]
        seq += 1

    for node in state.nodes:
        for w in node.workers:
            if w.state not in ("stopped", "lost"):
                add(WorkerStateChanged, node=node.node, local_rank=w.local_rank, state="stopped", pid=w.pid,
                    detail=why)  # (`skyhive stop NAME` too: not "cleaned up by skyhive down")
        current = NodeState(node.state)
        for target in (NodeState.TERMINATING, NodeState.TERMINATED):
            if current not in (target, NodeState.TERMINATED):
                check_transition(node.node, current, target)
                add(NodeStateChanged, node=node.node, state=target.value, detail=why)
                current = target
    add(PoolStopped, error=why)
    fh.seek(0, os.SEEK_END)
    fh.write("".join(to_json(ev) + "\n" for ev in out).encode("utf-8"))
    fh.flush()
    os.fsync(fh.fileno())
