"""What a task calls: `sky.dict(name)`, `sky.set(name)`, `sky.counter(name)`, `sky.queue(name)`,
`sky.barrier(name, n)`, `sky.lock(name)` — handles on the pool's collections (`store.py`), made by
name: the same name gives the same collection on every node. Each operation is one request to the
store; each thread of a worker keeps its own connection to it. Every method has an `*_async` twin
(`await cache.get_async(key)`) that runs it in a thread.

On a node the store is the one named by the worker's environment; in the client, the active pool's
(`with pool:`). Elsewhere, or on a node that cannot reach the store (Slurm), a `RuntimeError` says so.
A broken connection is made again and the request sent again (answered once: `sessions.py`): at once
on the client's machine, for up to `SKYHIVE_COLLECTIONS_RESUME` seconds on a node that reaches the
store through its SSH connection while that connection is re-made.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import itertools
import os
import pickle
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from .store import ENV_VAR, RESUME_ENV, UNREACHABLE_ENV, read_frame, write_frame

__all__ = ["SharedDict", "SharedSet", "Counter", "Queue", "Barrier", "Lock", "CONSISTENCY", "store_path"]

#: Skyward's `consistency=` values: every operation goes to the one copy, so both are strong.
CONSISTENCY = ("eventual", "strong")
_local = threading.local()
_MISSING = object()


def store_path() -> str:
    """The socket of the pool's collections seen from here (see the module docstring)."""
    path = os.environ.get(ENV_VAR)
    if path:
        return path
    unreachable = os.environ.get(UNREACHABLE_ENV)
    if unreachable:
        raise RuntimeError(unreachable)
    from ..common.active import current

    pool = current()
    store = getattr(getattr(pool, "pool", pool), "_collections", None)
    if store is not None:
        return str(store.path)
    raise RuntimeError("sky.dict/set/counter/queue/barrier/lock need a pool: call them in a task, or inside "
                       "`with sky.Pool(...) as pool:` in the client")


def _resume_seconds() -> float:
    """How long a broken connection to the store is retried: a forwarded store (an SSH node) comes back
    once the node's connection is re-made; a store on this machine is tried once more."""
    try:
        return max(0.0, float(os.environ.get(RESUME_ENV, "0")))
    except ValueError:
        return 0.0


def _session() -> tuple[str, int]:
    """This thread's session id and its next request number (`sessions.py`)."""
    session = getattr(_local, "session", None)
    if session is None:
        session = _local.session = uuid.uuid4().hex
        _local.seq = itertools.count(1)
    return session, next(_local.seq)


def _connection(path: str, session: str, grace: float) -> socket.socket:
    conns: builtins.dict[str, socket.socket] | None = getattr(_local, "conns", None)
    if conns is None:
        conns = _local.conns = {}
    sock = conns.get(path)
    if sock is None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            write_frame(sock, pickle.dumps(("hello", session, grace)))
        except OSError:
            sock.close()
            raise
        conns[path] = sock
    return sock


def _call(kind: str, name: str, op: str, *args: Any) -> Any:
    path = store_path()
    resume = _resume_seconds()
    session, seq = _session()
    request = pickle.dumps((seq, kind, name, op, args), protocol=5)
    deadline, attempt = 0.0, 0
    while True:
        attempt += 1
        try:
            sock = _connection(path, session, resume)
            write_frame(sock, request)
            frame: bytes | None = read_frame(sock)
            problem = "" if frame is not None else "the pool's collections closed (the pool's client is gone?)"
        except OSError as exc:
            frame, problem = None, f"cannot reach the pool's distributed collections at {path}: {exc}"
        if frame is not None:
            break
        broken = _local.conns.pop(path, None)
        if broken is not None:
            broken.close()
        if attempt == 1:  # the same request again: answered once by the store however often it is sent
            deadline = time.monotonic() + resume
        elif time.monotonic() >= deadline:
            raise RuntimeError(f"sky.{kind}({name!r}).{op}: {problem} (the pool's client is gone?)")
        else:  # a forwarded store: the node's SSH connection is being re-made
            time.sleep(min(0.05 * attempt, 0.5))
    ok, value = pickle.loads(frame)  # noqa: S301 - from the pool's own 0600 socket
    if not ok:
        raise value
    return value


def _check(kind: str, name: object, consistency: str) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"sky.{kind}(name): need a non-empty str, got {name!r}")
    if consistency not in CONSISTENCY:
        raise ValueError(f"sky.{kind}({name!r}, consistency={consistency!r}): use one of {', '.join(CONSISTENCY)}")
    return name


def _with_async(cls: type) -> type:
    """Add `NAME_async` for each public method: the method run in a thread (`asyncio.to_thread`)."""
    for attr, fn in builtins.list(vars(cls).items()):
        if callable(fn) and not attr.startswith("_"):
            def make(method: Callable[..., Any]) -> Callable[..., Any]:
                @functools.wraps(method)
                async def run(self: Any, *args: Any, **kwargs: Any) -> Any:
                    return await asyncio.to_thread(method, self, *args, **kwargs)
                return run
            setattr(cls, f"{attr}_async", make(fn))
    return cls


class _Named:
    kind = ""

    def __init__(self, name: str, *, consistency: str = "eventual") -> None:
        self.name = _check(self.kind, name, consistency)
        self.consistency = consistency

    def __repr__(self) -> str:
        return f"sky.{self.kind}({self.name!r})"

    def __reduce__(self) -> Any:  # a handle travels as its name: it is the same collection there
        return (type(self), (self.name,), None)

    def _do(self, op: str, *args: Any) -> Any:
        return _call(self.kind, self.name, op, *args)


@_with_async
class SharedDict(_Named):
    """`sky.dict(name)`: a key-value store every node shares (`d[k]`, `d[k] = v`, `del d[k]`, `k in d`,
    `get`, `pop`, `update`, `setdefault`, `len`, `keys`, `items`, `clear`)."""

    kind = "dict"

    def __getitem__(self, key: Any) -> Any:
        return self._do("getitem", key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._do("set", key, value)

    def __delitem__(self, key: Any) -> None:
        self._do("delete", key)

    def __contains__(self, key: object) -> bool:
        return bool(self._do("contains", key))

    def __len__(self) -> int:
        return int(self._do("len"))

    def get(self, key: Any, default: Any = None) -> Any:
        return self._do("get", key, default)

    def set(self, key: Any, value: Any) -> None:
        self._do("set", key, value)

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        return self._do("pop", key, default is not _MISSING, None if default is _MISSING else default)

    def update(self, other: Any = (), **kwargs: Any) -> None:
        self._do("update", {**builtins.dict(other), **kwargs})

    def setdefault(self, key: Any, default: Any = None) -> Any:
        return self._do("setdefault", key, default)

    def keys(self) -> builtins.list[Any]:
        return builtins.list(self._do("keys"))

    def items(self) -> builtins.list[tuple[Any, Any]]:
        return builtins.list(self._do("items"))

    def clear(self) -> None:
        self._do("clear")


@_with_async
class SharedSet(_Named):
    """`sky.set(name)`: unique values every node shares (`v in s`, `len(s)`, `add`, `discard`, `items`)."""

    kind = "set"

    def __contains__(self, value: object) -> bool:
        return bool(self._do("contains", value))

    def __len__(self) -> int:
        return int(self._do("len"))

    def add(self, value: Any) -> bool:
        """Add `value`; True when it was not there yet (check-and-add in one step)."""
        return bool(self._do("add", value))

    def discard(self, value: Any) -> None:
        self._do("discard", value)

    def items(self) -> builtins.list[Any]:
        return builtins.list(self._do("items"))


@_with_async
class Counter(_Named):
    """`sky.counter(name)`: an integer every node shares; each change is atomic (`increment`,
    `decrement`, `reset`, `value`, `int(c)`)."""

    kind = "counter"

    @property
    def value(self) -> int:
        return int(self._do("value"))

    def __int__(self) -> int:
        return self.value

    def increment(self, n: int = 1) -> int:
        """Add `n`; the new value."""
        return int(self._do("add", n))

    def decrement(self, n: int = 1) -> int:
        """Subtract `n`; the new value."""
        return int(self._do("add", -n))

    def reset(self, value: int = 0) -> int:
        return int(self._do("reset", value))


@_with_async
class Queue(_Named):
    """`sky.queue(name)`: a FIFO every node shares (`put`, `get(timeout=None)` — None when nothing came
    within `timeout` seconds —, `empty`, `len`)."""

    kind = "queue"

    def put(self, value: Any) -> None:
        self._do("put", value)

    def get(self, timeout: float | None = None) -> Any:
        return self._do("get", timeout)

    def empty(self) -> bool:
        return int(self._do("len")) == 0

    def __len__(self) -> int:
        return int(self._do("len"))


@_with_async
class Barrier(_Named):
    """`sky.barrier(name, n)`: `wait()` returns once `n` tasks (anywhere in the pool) have called it; it
    is then ready for the next round. `timeout` (seconds, None: none) bounds a wait: past it the barrier
    is broken and every waiter gets `threading.BrokenBarrierError` (a lost node's task never arrives)."""

    kind = "barrier"

    def __init__(self, name: str, n: int, *, consistency: str = "eventual", timeout: float | None = None) -> None:
        super().__init__(name, consistency=consistency)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"sky.barrier({name!r}, n={n!r}): need a positive number of participants")
        self.n = n
        self.timeout = timeout

    def __reduce__(self) -> Any:
        return (type(self), (self.name, self.n), {"timeout": self.timeout})

    def __setstate__(self, state: builtins.dict[str, Any]) -> None:
        self.timeout = state["timeout"]

    def wait(self) -> int:
        """Block until `n` tasks wait; this one's arrival index (0..n-1)."""
        return int(self._do("wait", self.n, self.timeout))

    def reset(self) -> None:
        """Back to its first round (Skyward's `reset()`): tasks waiting now get
        `threading.BrokenBarrierError`; with none waiting, nothing changes (a barrier is ready for its
        next round anyway)."""
        self._do("reset", self.n, self.timeout)


@_with_async
class Lock(_Named):
    """`sky.lock(name)`: mutual exclusion across the pool (`acquire`, `release`, `with lock:`). A lock
    held by a task whose worker is lost is released (its connection closed)."""

    kind = "lock"

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        return bool(self._do("acquire", blocking, timeout))

    def release(self) -> None:
        self._do("release")

    def locked(self) -> bool:
        return bool(self._do("locked"))

    def __enter__(self) -> Lock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
