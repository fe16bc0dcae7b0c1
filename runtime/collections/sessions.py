"""A worker thread's session with the pool's collections: what survives its connection breaking.

A node off the client's machine (an SSH host, a cloud node) reaches the store through a socket that
the SSH connection forwards; when that connection drops and the transport reconnects, the task's
connection to the store breaks with it and the task connects again. So that nothing is lost or done
twice, each worker thread names its session (`hello`, with how long it may be away: `grace` seconds)
and numbers its requests:

- a request the store already answered (the same number again) gets the same answer again, without
  being applied twice (an `increment` whose reply was lost in the drop is not counted twice); one
  still running (a `queue.get` that blocks) is waited for, and its answer given to the new connection;
  one older than the last (a late copy) is refused;
- the locks a session holds stay held while it is away, for `grace` seconds; a session that does not
  come back (its worker was lost) lets go of them then. With `grace` 0 (the client's machine, where a
  connection breaks only when its process is gone) they are let go at once.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable
from typing import Protocol

__all__ = ["Session", "Sessions"]


class _Releases(Protocol):
    def release_all(self, held: set[str]) -> None: ...


class Session:
    """One worker thread's session: the locks it holds and its last request's answer."""

    def __init__(self, session_id: str, grace: float) -> None:
        self.id = session_id
        self.grace = grace
        self.held: set[str] = set()  # the locks this session holds
        self.connections = 0
        self.timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._seq: int | None = None
        self._answer: bytes = b""
        self._done = threading.Event()

    def answer(self, seq: int, apply: Callable[[], bytes]) -> bytes:
        """The answer to request `seq`: `apply()`'s, or, for the request answered (or being answered) last,
        that answer again."""
        with self._lock:
            if self._seq is not None and seq < self._seq:  # a late copy from a connection that broke: its
                return pickle.dumps((False, RuntimeError(f"request {seq} came after request {self._seq}")))
            again = seq == self._seq
            if not again:
                self._seq, self._answer = seq, b""
                self._done.clear()
        if again:
            self._done.wait()
            return self._answer
        try:
            self._answer = apply()
        finally:
            self._done.set()
        return self._answer


class Sessions:
    """Every session of one store, by id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._closed = False

    def attach(self, session_id: str, grace: float) -> Session:
        """A connection for `session_id` opened: its session (new, or the one it left)."""
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                session = self._sessions[session_id] = Session(session_id, grace)
            if session.timer is not None:
                session.timer.cancel()
                session.timer = None
            session.connections += 1
            return session

    def detach(self, session: Session, store: _Releases) -> None:
        """A connection of `session` closed: its locks are let go now (grace 0) or when it stays away for
        its grace."""
        with self._lock:
            session.connections -= 1
            if session.connections > 0 or self._closed:
                return
            if session.grace <= 0:
                self._end(session, store)
                return
            timer = session.timer = threading.Timer(session.grace, self._expire, (session, store))
            timer.daemon = True
            timer.start()

    def _expire(self, session: Session, store: _Releases) -> None:
        with self._lock:
            if session.connections == 0 and self._sessions.get(session.id) is session:
                self._end(session, store)

    def _end(self, session: Session, store: _Releases) -> None:
        self._sessions.pop(session.id, None)
        store.release_all(session.held)

    def close(self) -> None:
        """The store closes: no timer outlives it."""
        with self._lock:
            self._closed = True
            for session in self._sessions.values():
                if session.timer is not None:
                    session.timer.cancel()
            self._sessions.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)
