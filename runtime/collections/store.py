"""Where a pool's distributed collections live: in the client process, served to the workers.

`CollectionStore` holds every named collection of one pool and serves them on a Unix socket (0600, in
a 0700 directory) by one thread per connection; a worker's task connects once per thread, says which
session it is (`("hello", session_id, grace)`, see `sessions.py`) and sends requests: a 4-byte
big-endian length and a pickle of `(seq, kind, name, op, args)`, answered by a pickle of
`(True, value)` or `(False, exception)`. Blocking operations (`queue.get`, `barrier.wait`,
`lock.acquire`) block only their connection's thread.

What this means for a pool (docs/collections.md):

- the collections live in the client: a node that is lost (its worker killed, the machine gone)
  loses nothing of them; what a lost worker held is let go (its locks are released when its
  connection closes, or, on a node whose connection may be re-made, when its session stays away for
  that long: `sessions.py`), and a barrier waits for arrivals that will not come only until its timeout;
- they last as long as the pool's client: closing the pool drops them (a named pool attached again
  starts with empty collections, served at the same socket path);
- every operation goes to the one copy, so every read sees every write before it (Skyward's
  `consistency="strong"`; `"eventual"` is accepted and is as strong);
- nodes that share the client's machine reach the socket itself (Local, named Local pools); SSH and
  cloud nodes reach it through their SSH connection, which forwards a private socket on the host to it
  (`transport/ssh_collections.py`), again after a reconnect; Slurm nodes get a clear error from
  `sky.dict(...)` & co. (their transport is srun's I/O: docs/collections.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import selectors
import socket
import struct
import threading
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...paths import private_dir
from .sessions import Session, Sessions

if TYPE_CHECKING:
    from ..nodes.transport import CollectionsReach

__all__ = ["CollectionStore", "ENV_VAR", "RESUME_ENV", "UNREACHABLE_ENV", "KINDS", "collections_env", "socket_path",
           "read_frame", "write_frame"]

#: The workers' variable naming the store's socket (as the node sees it).
ENV_VAR = "SKYHIVE_COLLECTIONS"
#: Seconds a worker keeps trying to reach a forwarded store while its node's connection is re-made.
RESUME_ENV = "SKYHIVE_COLLECTIONS_RESUME"
#: Set instead of ENV_VAR on a node that cannot reach the store: why (the error its tasks get).
UNREACHABLE_ENV = "SKYHIVE_COLLECTIONS_UNREACHABLE"
KINDS = ("dict", "set", "counter", "queue", "barrier", "lock")
_HEADER = struct.Struct(">I")
log = logging.getLogger("skyhive.collections")
_MAX_FRAME = 64 << 20


def read_frame(sock: socket.socket) -> bytes | None:
    """One length-prefixed frame, or None at the end of the stream."""
    head = _recv(sock, 4)
    if head is None:
        return None
    (size,) = _HEADER.unpack(head)
    if size > _MAX_FRAME:
        raise OSError(f"a collections frame of {size} bytes is over the {_MAX_FRAME >> 20} MiB limit")
    return _recv(sock, size) if size else b""


def write_frame(sock: socket.socket, data: bytes) -> None:
    if len(data) > _MAX_FRAME:
        raise ValueError(f"a value of {len(data)} bytes pickled is over the {_MAX_FRAME >> 20} MiB limit of a "
                         "collection's item")
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv(sock: socket.socket, n: int) -> bytes | None:
    parts, got = [], 0
    while got < n:
        piece = sock.recv(n - got)
        if not piece:
            return None
        parts.append(piece)
        got += len(piece)
    return b"".join(parts)


def collections_env(reach: CollectionsReach | str) -> dict[str, str]:
    """A worker's variables for the store, as its node reaches it (`Transport.reach_collections`): the
    path and how long to retry it, or, on a node that cannot reach it, why (ENV_VAR then empty)."""
    if isinstance(reach, str):
        return {ENV_VAR: "", UNREACHABLE_ENV: reach}
    return {ENV_VAR: reach.path, RESUME_ENV: f"{reach.resume:g}"}


def socket_path(pool_id: str) -> str:
    """The store's socket for pool `pool_id`: stable per pool, so a named pool's detached workers find
    the store of whichever client is attached. Under the state directory, or a private temporary
    directory when that path would be too long for a Unix socket."""
    path = str(private_dir("collections") / f"{pool_id}.sock")
    if len(path.encode()) <= 100:
        return path
    import tempfile  # (only for a path too long for a socket)

    short = Path(tempfile.gettempdir()) / f"skyhive-{os.getuid()}"
    short.mkdir(mode=0o700, exist_ok=True)
    os.chmod(short, 0o700)
    return str(short / f"{pool_id[:60]}.sock")


class _Collections:
    """The named collections and the locks that guard them (one condition for all: operations are short)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.dicts: dict[str, dict[Any, Any]] = {}
        self.sets: dict[str, set[Any]] = {}
        self.counters: dict[str, int] = {}
        self.queues: dict[str, deque[Any]] = {}
        self.barriers: dict[str, threading.Barrier] = {}
        self.locks: dict[str, threading.Lock] = {}

    def call(self, kind: str, name: str, op: str, args: tuple[Any, ...], held: set[str]) -> Any:
        if kind not in KINDS:
            raise ValueError(f"no collection kind {kind!r} (kinds: {', '.join(KINDS)})")
        return getattr(self, f"_{kind}")(name, op, *args, held=held)

    def _dict(self, name: str, op: str, *args: Any, held: set[str]) -> Any:
        with self.cond:
            d = self.dicts.setdefault(name, {})
            if op == "get":
                key, default = args
                return d.get(key, default)
            if op == "getitem":
                if args[0] not in d:
                    raise KeyError(args[0])
                return d[args[0]]
            if op == "set":
                d[args[0]] = args[1]
                return None
            if op == "delete":
                if args[0] not in d:
                    raise KeyError(args[0])
                del d[args[0]]
                return None
            if op == "contains":
                return args[0] in d
            if op == "pop":
                key, has_default, default = args
                if key not in d and not has_default:
                    raise KeyError(key)
                return d.pop(key, default)
            if op == "update":
                d.update(args[0])
                return None
            if op == "setdefault":
                return d.setdefault(args[0], args[1])
            if op == "len":
                return len(d)
            if op == "keys":
                return list(d)
            if op == "items":
                return list(d.items())
            if op == "clear":
                d.clear()
                return None
        raise ValueError(f"sky.dict: no operation {op!r}")

    def _set(self, name: str, op: str, *args: Any, held: set[str]) -> Any:
        with self.cond:
            s = self.sets.setdefault(name, set())
            if op == "add":  # True when it was not there yet (one round trip for check-and-add)
                new = args[0] not in s
                s.add(args[0])
                return new
            if op == "discard":
                s.discard(args[0])
                return None
            if op == "contains":
                return args[0] in s
            if op == "len":
                return len(s)
            if op == "items":
                return list(s)
        raise ValueError(f"sky.set: no operation {op!r}")

    def _counter(self, name: str, op: str, *args: Any, held: set[str]) -> Any:
        with self.cond:
            value = self.counters.setdefault(name, 0)
            if op == "add":
                value = self.counters[name] = value + args[0]
            elif op == "reset":
                value = self.counters[name] = args[0]
            elif op != "value":
                raise ValueError(f"sky.counter: no operation {op!r}")
            return value

    def _queue(self, name: str, op: str, *args: Any, held: set[str]) -> Any:
        with self.cond:
            q = self.queues.setdefault(name, deque())
            if op == "put":
                q.append(args[0])
                self.cond.notify_all()
                return None
            if op == "get":  # None after `timeout` seconds with nothing to take (Skyward's contract)
                (timeout,) = args
                if not self.cond.wait_for(lambda: bool(q), timeout=timeout):
                    return None
                return q.popleft()
            if op == "len":
                return len(q)
        raise ValueError(f"sky.queue: no operation {op!r}")

    def _barrier(self, name: str, op: str, *args: Any, held: set[str]) -> Any:
        parties, timeout = args
        with self.cond:
            barrier = self.barriers.get(name)
            if barrier is None:
                barrier = self.barriers[name] = threading.Barrier(parties)
            elif barrier.parties != parties:
                raise ValueError(f"sky.barrier({name!r}, n={parties}): it exists with n={barrier.parties}")
        if op == "reset":
            barrier.reset()
            return None
        if op != "wait":
            raise ValueError(f"sky.barrier: no operation {op!r}")
        return barrier.wait(timeout=timeout)

    def _lock(self, name: str, op: str, *args: Any, held: set[str]) -> Any:
        with self.cond:
            lock = self.locks.setdefault(name, threading.Lock())
        if op == "acquire":
            blocking, timeout = args
            got = lock.acquire(blocking, -1 if timeout is None else timeout)
            if got:
                held.add(name)
            return got
        if op == "release":
            if name not in held:
                raise RuntimeError(f"sky.lock({name!r}).release(): this task does not hold it")
            held.discard(name)
            lock.release()
            return None
        if op == "locked":
            return lock.locked()
        raise ValueError(f"sky.lock: no operation {op!r}")

    def release_all(self, held: set[str]) -> None:
        """A session ended (its task or worker is gone): the locks it held are released."""
        for name in list(held):
            held.discard(name)
            with contextlib.suppress(RuntimeError):
                self.locks[name].release()


def _serve(server: _Server, conn: socket.socket) -> None:
    """One worker connection, in a thread of its own: a session's requests answered in order."""
    collections, sessions = server.collections, server.sessions
    session: Session | None = None
    server.open_connections.add(conn)
    try:
        hello = read_frame(conn)
        if hello is None:
            return
        tag, session_id, grace = pickle.loads(hello)  # noqa: S301 - a 0600 socket of this user
        if tag != "hello":
            return
        session = sessions.attach(str(session_id), float(grace))
        while True:
            frame = read_frame(conn)
            if frame is None:
                return
            seq, kind, name, op, args = pickle.loads(frame)  # noqa: S301 - as above
            data = session.answer(seq, lambda: _apply(collections, kind, name, op, args, session))
            write_frame(conn, data)
    except OSError:
        return
    except Exception as exc:  # noqa: BLE001 - not our frames: this connection ends, the store goes on
        log.warning("the pool's collections: a connection sent what is not a request (%s: %s); closed",
                    type(exc).__name__, exc)
        return
    finally:
        server.open_connections.discard(conn)
        if session is not None:
            sessions.detach(session, collections)
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_WR)
        conn.close()


def _apply(collections: _Collections, kind: str, name: str, op: str, args: Any, session: Session) -> bytes:
    try:
        reply: tuple[bool, Any] = (True, collections.call(kind, name, op, tuple(args), session.held))
    except Exception as exc:  # noqa: BLE001 - goes back to the task that asked
        reply = (False, exc)
    try:
        return pickle.dumps(reply, protocol=5)
    except Exception as exc:  # noqa: BLE001 - an unpicklable stored value
        return pickle.dumps((False, TypeError(f"cannot send the value back: {exc}")))


class _Server:
    """The listening socket (a thread per connection, as socketserver's ThreadingMixIn does, without
    importing it: every pool starts a store)."""

    def __init__(self, path: str, collections: _Collections) -> None:
        self.collections = collections
        self.sessions = Sessions()
        self.open_connections: set[socket.socket] = set()
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.socket.bind(path)
            self.socket.listen(64)
        except BaseException:
            self.socket.close()
            raise
        self.socket.setblocking(False)  # (woken by the selector: `accept` never waits)

    def fileno(self) -> int:
        return self.socket.fileno()

    def handle_request(self) -> None:
        """Take the connection waiting (if another wake-up took it, nothing) and serve it in a thread."""
        try:
            conn, _ = self.socket.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            log.warning("the pool's collections: accepting a connection failed: %s", exc)
            return
        conn.setblocking(True)
        threading.Thread(target=_serve, args=(self, conn), name="skyhive-collections-conn", daemon=True).start()

    def server_close(self) -> None:
        self.socket.close()


class CollectionStore:
    """One pool's collections, served on `path` while started (`start`/`close`; a context manager).

    The accepting thread waits on the listening socket and on a wake-up pipe, never on a timer:
    `close` writes to the pipe and the thread ends at once (socketserver's `serve_forever` polls for
    its shutdown flag every `poll_interval`, which every pool's close waited out: ~0.25 s on average)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.collections = _Collections()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._wake: tuple[int, int] | None = None

    def start(self) -> CollectionStore:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a client of this pool that died left it
        old = os.umask(0o177)
        try:
            self._server = _Server(self.path, self.collections)
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        self._wake = os.pipe2(os.O_CLOEXEC)
        self._thread = threading.Thread(target=_accept, args=(self._server, self._wake[0]),
                                        name="skyhive-collections", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop accepting, end the workers' connections, remove the socket; returns at once (the
        accepting thread is woken, not polled)."""
        server, self._server = self._server, None
        if server is None:
            return
        assert self._wake is not None and self._thread is not None
        wake_r, wake_w = self._wake
        os.write(wake_w, b"x")
        self._thread.join(timeout=10.0)  # (it ends as soon as it reads the pipe)
        if self._thread.is_alive():
            log.warning("the pool's collections: the accepting thread did not end")
        else:
            os.close(wake_r)
        os.close(wake_w)
        server.server_close()
        server.sessions.close()
        for conn in list(server.open_connections):  # the workers' connections end with the pool's collections
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def __enter__(self) -> CollectionStore:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _accept(server: _Server, wake: int) -> None:
    """The accepting thread: each connection handed to a thread of its own (`_serve`) as it comes,
    until `wake` is readable (`CollectionStore.close`)."""
    with selectors.DefaultSelector() as selector:
        selector.register(server.fileno(), selectors.EVENT_READ)
        selector.register(wake, selectors.EVENT_READ)
        while True:
            ready = selector.select()
            if any(key.fd == wake for key, _ in ready):
                return
            server.handle_request()
