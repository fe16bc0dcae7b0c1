"""A named pool's record: what a later process needs to find its nodes again.

    <state dir>/clusters/<name>/          0700
        record.json                       0600: `ClusterRecord` (name, provider, shape, workers, autostop)
        attach.lock                       held (flock) by the one client attached to the pool
        jobs/<id>.json, jobs/<id>.log     the job queue (see `jobs.py`)
        agent.lock, agent.log              the queue agent (the lock holds its pid while it runs)
        watchdog-<host>.lock/.log          the autostop watchdog
    sockets: <record dir>/sock/ (0700), or /tmp/skyhive-<uid>/<name>-<hash>/ when that path is too long
             for a Unix socket

The event log stays where every pool's is (`pools/<name>.jsonl`): the record says where the nodes
are, the log what happened to them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import PoolInUse, PoolNotFound
from ...paths import private_dir, state_dir

__all__ = ["ClusterRecord", "WorkerEntry", "check_name", "cluster_dir", "socket_dir", "load", "save", "remove", "names", "AttachLock"]

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,62}\Z")
_SOCKET_MAX = 100  # sun_path holds 108 bytes; "n12-w3.sock" and a margin


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerEntry:
    """One detached worker of the pool: where it listens and its pid."""

    node: int
    rank: int
    pid: int
    socket: str  # on the node's host (an SSH pool's: on that remote host)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterRecord:
    """What a named pool is. `spec` is what `launch -c` compares to reuse it; `autostop_minutes`
    (None: never) ends idle workers; with `autostop_down` the pool is also removed."""

    name: str
    provider: str
    nodes: int
    processes_per_node: int
    cwd: str
    socket_dir: str
    created: float
    workers: tuple[WorkerEntry, ...] = ()
    spec: dict[str, Any] = field(default_factory=dict)
    autostop_minutes: float | None = None
    autostop_down: bool = False
    concurrency: int = 1  # worker processes per rank (`sky.Worker(concurrency=N, executor="process")`)
    task_threads: int = 1  # task threads per worker process (`sky.Worker(concurrency=N)`, the thread executor)
    watchdog_pid: int = 0  # the autostop watchdog (`worker/watchdog.py --unix-dir`), while it runs
    stopped: str = ""  # "autostop" once the watchdog stopped the pool's workers
    # what the kind that keeps the pool records of its nodes (an SSH pool: the provider as
    # `SSHCluster.recorded()` says — hosts, user, key *path*, known_hosts path, python: never a secret), and of
    # machines made to order (`cloud.py`): read only by that kind's keep support and `kept_pool.py`; the
    # directory name of the sockets on the hosts, and the host key each node's host showed when the pool
    # was created (pinned by every later connection), by node index
    provider_info: dict[str, Any] = field(default_factory=dict)
    cluster: str = ""
    host_keys: dict[str, str] = field(default_factory=dict)
    # SSH pools: what bootstrap prepared on each node's host ({"python", "pythonpath"}), by node index:
    # how a later login runs the autostop watchdog there
    node_envs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # a cloud pool whose teardown the provider did not confirm: what may still run (instance ids;
    # "shared resources" for its security group and key pair). The record is kept, and shown, until a
    # later `skyhive down NAME` finishes it (`clusters/cloud.py`)
    leaking: tuple[str, ...] = ()
    # the node kind whose keep support keeps the pool (`runtime/nodes/keep.py`): "local", "ssh" (a cloud's
    # instances too), or another package's; records written before it existed: "ssh" with a `cluster`
    keeper: str = ""

    def __post_init__(self) -> None:
        if not self.keeper:
            object.__setattr__(self, "keeper", "ssh" if self.cluster else "local")
        info = self.provider_info
        if info.get("instances") and "power_off" not in info:  # machines recorded before `power_off` existed
            power_off = str((info.get("cloud") or {}).get("shutdown_command") or "sudo shutdown -h now")
            object.__setattr__(self, "provider_info", {**info, "power_off": power_off})

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        return json.dumps(data, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, *, where: str) -> ClusterRecord:
        try:
            data = json.loads(text)
            data["workers"] = tuple(WorkerEntry(**w) for w in data.get("workers", ()))
            data["leaking"] = tuple(str(x) for x in data.get("leaking", ()))
            return cls(**data)
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"{where}: not a named-pool record ({type(exc).__name__}: {exc})") from None


def check_name(name: str) -> str:
    """`name` if it can name a pool (a letter, then up to 62 letters, digits, '.', '_', '-'), else
    `ValueError` saying so."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"{name!r} cannot name a pool: use a letter, then letters, digits, '.', '_' or '-' "
                         "(at most 63 characters)")
    return name


def cluster_dir(name: str, *, create: bool = False) -> Path:
    """The named pool's directory (0700; created with `create`)."""
    check_name(name)
    if create:
        return private_dir("clusters", name)
    return state_dir() / "clusters" / name


def socket_dir(name: str) -> str:
    """Where the pool's workers listen (the directory is made 0700 by the first worker)."""
    path = str(cluster_dir(name) / "sock")
    if len(path) + 16 > _SOCKET_MAX:
        digest = hashlib.sha256(str(state_dir()).encode()).hexdigest()[:8]
        path = f"/tmp/skyhive-{os.getuid()}/{name}-{digest}"
    return path


def load(name: str) -> ClusterRecord:
    """The record of pool `name`; raises `PoolNotFound` naming it (and the pools there are)."""
    path = cluster_dir(name) / "record.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        known = names()
        hint = f" (named pools here: {', '.join(known)})" if known else " (there are no named pools here)"
        raise PoolNotFound(f"no named pool {name!r}{hint}; `skyhive launch -c {name} TASK.yaml` creates it") from None
    return ClusterRecord.from_json(text, where=str(path))


def save(record: ClusterRecord) -> None:
    """Write the record (0600), replacing the old one atomically."""
    directory = cluster_dir(record.name, create=True)
    tmp = directory / f".record.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(record.to_json())
    os.replace(tmp, directory / "record.json")
    _write_entries(record)


def _write_entries(record: ClusterRecord) -> None:
    """A pool whose nodes speak SSH: its SSH entries follow its record (each node's `NodeAccess.ssh_config`
    writes them, `skyhive ssh-config`); a kind not installed here, or without access, has none."""
    import logging

    from ...errors import ProvisionError
    from ..nodes.keep import keep_support

    try:
        support = keep_support(record.keeper)
        if support is None:
            return
        for node in range(record.nodes):
            support.access(record, node).ssh_config()
    except (OSError, ValueError, ProvisionError) as exc:  # the record is what matters: `skyhive ssh` writes
        # them again, or says why
        logging.getLogger("skyhive.clusters").warning("pool %s: its SSH entries were not written: %s", record.name, exc)


def remove(name: str) -> None:
    """Forget pool `name`: its record, jobs and socket directory."""
    try:
        record = load(name)
    except (PoolNotFound, ValueError):
        record = None
    if record is not None and record.socket_dir:  # (a pool on other hosts has its sockets there: none here)
        shutil.rmtree(record.socket_dir, ignore_errors=True)
    shutil.rmtree(cluster_dir(name), ignore_errors=True)
    from ..kinds.ssh.keep_files import remove_config

    remove_config(name)  # its SSH entries, where its nodes spoke SSH


def names() -> list[str]:
    """The named pools that have a record, sorted."""
    root = state_dir() / "clusters"
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "record.json").is_file())


class AttachLock:
    """The pool's attach lock: one client at a time (flock on `attach.lock`, which names its holder).
    `try_acquire()` never blocks; `release()` is idempotent."""

    def __init__(self, name: str, *, who: str = "") -> None:
        self.name = name
        self.who = who
        self._fd = -1

    def try_acquire(self) -> bool:
        fd = os.open(cluster_dir(self.name, create=True) / "attach.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}{' (' + self.who + ')' if self.who else ''}\n".encode(), 0)
        self._fd = fd
        return True

    def busy(self) -> PoolInUse:
        """The error for a lock that stays held, naming its holder."""
        try:
            with open(cluster_dir(self.name) / "attach.lock", encoding="utf-8", errors="replace") as fh:
                holder = fh.read().strip() or "another process"
        except OSError:
            holder = "another process"
        return PoolInUse(f"pool {self.name!r} is in use by {holder}; wait for it to finish "
                         f"(or `skyhive cancel`/`skyhive down` it)")

    def release(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing releases the lock
