"""The detached worker: a relay that keeps a worker daemon alive across dropped SSH connections.

    python -m skyhive.runtime.worker.server --socket PATH [--idle-timeout S] [--replay-limit BYTES]

It creates the socket's directory (0700, ours) and listens on the Unix socket `PATH` (0600), forks
into the background (its own session and process group, stdin from /dev/null, stdout/stderr to
`PATH.log`), starts the ordinary worker daemon (`python -m skyhive.runtime.worker`) as its child on
pipes, and prints one JSON line — `{"pid": ..., "worker_pid": ..., "socket": ...}` — before the
foreground process exits. The client reaches the socket through SSH stream-local forwarding: no TCP
port is opened.

Between the socket and the worker's pipes it runs a resumable link (`protocol.resume`): the worker's
frames are numbered and kept until the client acknowledges them; when the connection drops, the
worker keeps running (it sees one unbroken stream), and a client that connects again with
`Hello(resume_from=N)` gets every frame after N, then the stream goes on. With no client for
`--idle-timeout` seconds, the relay closes the worker's input — the worker ends its tasks and exits —
and exits too. When the worker exits, the relay tells the client (`Goodbye`), waits until the client
has acknowledged every frame (or the idle timeout), writes the exit status to `PATH.exit`, removes
the socket and exits.

One thread, one `select` loop, non-blocking I/O. It imports only the standard library and
`skyhive.protocol` (the node needs nothing else for it).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import time
from collections import deque
from typing import Any

from ...protocol.codec import DEFAULT_MAX_FRAME
from ...protocol.errors import ProtocolError
from ...protocol.messages import PROTOCOL_VERSION, Ack, Goodbye, Hello, Resume, Welcome
from ...protocol.resume import Inbox, Outbox, encode_control

__all__ = ["main", "Relay", "prepare_socket"]

# Reads stay under glibc's mmap threshold (128 KiB): a larger bytes object is mmapped and unmapped
# for every read, which costs more than the read itself.
_READ_SIZE = 64 * 1024

#: Bytes queued towards one side before we stop reading from the other (flow control).
HIGH_WATER = 4 << 20
ACK_DELAY = 0.2
_IOV_MAX = 512


def _log(msg: str) -> None:
    sys.stderr.write(f"skyhive-relay[{os.getpid()}] {time.strftime('%H:%M:%S')} {msg}\n")
    sys.stderr.flush()


def prepare_socket(path: str) -> socket.socket:
    """A listening Unix socket at `path` (0600) in a directory only we can open (0700, ours).

    Raises `OSError`/`RuntimeError` naming the problem (a directory owned by someone else, a live
    daemon already on that path).
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise RuntimeError(f"{directory} is not a directory owned by uid {os.getuid()}")
    if st.st_mode & 0o077:
        os.chmod(directory, 0o700)
    if os.path.lexists(path):
        probe = socket.socket(socket.AF_UNIX)
        try:
            probe.connect(path)
        except OSError:
            os.unlink(path)  # a socket nobody listens on: left by a daemon that died
        else:
            raise RuntimeError(f"a worker is already listening on {path}")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(8)
    return sock


class _Out:
    """Bytes queued for one non-blocking file descriptor."""

    def __init__(self) -> None:
        self.queue: deque[Any] = deque()
        self.size = 0

    def add(self, pieces: list[Any]) -> None:
        for p in pieces:
            n = len(memoryview(p).cast("B")) if not isinstance(p, bytes) else len(p)
            if n:
                self.queue.append(p)
                self.size += n

    def clear(self) -> None:
        self.queue.clear()
        self.size = 0

    def flush(self, fd: int) -> None:
        """Write as much as the descriptor takes now. Raises `OSError` if it is broken."""
        q = self.queue
        while q:
            batch = [q[i] for i in range(min(len(q), _IOV_MAX))]
            try:
                n = os.writev(fd, batch)
            except BlockingIOError:
                return
            self.size -= n
            while n:
                head = memoryview(q[0]).cast("B")
                if n >= len(head):
                    n -= len(head)
                    q.popleft()
                else:
                    q[0] = head[n:]
                    n = 0


class Relay:
    """The select loop between the listening socket, the current client and the worker's pipes."""

    def __init__(self, listener: socket.socket, worker: subprocess.Popen[bytes], *, path: str,
                 idle_timeout: float, replay_limit: int) -> None:
        self.listener = listener
        self.worker = worker
        self.path = path
        self.idle_timeout = idle_timeout
        self.replay_limit = replay_limit
        assert worker.stdin is not None and worker.stdout is not None
        self.w_in = worker.stdin.fileno()
        self.w_out = worker.stdout.fileno()
        os.set_blocking(self.w_in, False)
        os.set_blocking(self.w_out, False)
        self.client: socket.socket | None = None
        self.client_fd = -1
        self.handshaken = False
        self.sessions = 0
        self.from_client = Inbox()  # the client's frames, cut whole and counted
        self.from_worker = Inbox()  # only to cut the worker's output into whole frames
        self.outbox = Outbox()  # the worker's frames, until the client acknowledges them
        self.to_client = _Out()
        self.to_worker = _Out()
        self.worker_eof = False
        self.worker_closed = False  # we closed its stdin
        self.exit_status: int | None = None
        self.goodbye_sent = False
        self.away_since = time.monotonic()
        self.last_ack = time.monotonic()
        self.terminate = False

    # ---- client connections ------------------------------------------------------------------------

    def accept(self) -> None:
        conn, _ = self.listener.accept()
        conn.setblocking(False)
        if self.client is not None:
            _log("a new client connection replaces the current one")
            self.drop_client()
        self.client, self.client_fd = conn, conn.fileno()
        self.handshaken = False
        self.goodbye_sent = False
        self.from_client.reset()
        self.to_client.clear()

    def drop_client(self) -> None:
        if self.client is not None:
            try:
                self.client.close()
            except OSError:
                pass
        self.client, self.client_fd = None, -1
        self.handshaken = False
        self.to_client.clear()
        self.from_client.reset()
        self.away_since = time.monotonic()

    def refuse(self, why: str) -> None:
        _log(f"refusing the client: {why}")
        welcome = Welcome(protocol_version=PROTOCOL_VERSION, python_version="", skyhive_version="",
                          max_frame=DEFAULT_MAX_FRAME, pid=os.getpid(), error=why)
        try:
            assert self.client is not None
            self.client.setblocking(True)
            self.client.settimeout(1.0)
            self.client.sendall(encode_control(welcome))
        except OSError:
            pass
        self.drop_client()

    def read_client(self) -> None:
        assert self.client is not None
        try:
            data = self.client.recv(_READ_SIZE)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.drop_client()
            return
        try:
            items = self.from_client.feed(data)
        except ProtocolError as exc:
            self.refuse(f"bad frame: {exc}")
            return
        for item in items:
            if isinstance(item, memoryview):
                if not self.handshaken:
                    self.refuse("the first frame on a connection must be a control Hello")
                    return
                self.to_worker.add([bytes(item)])
            elif isinstance(item, Hello):
                if not self.resume(item):
                    return
            elif isinstance(item, Ack):
                try:
                    self.outbox.ack(item.seq)
                except ProtocolError as exc:
                    self.refuse(str(exc))
                    return
            else:
                self.refuse(f"unexpected control message {type(item).__name__}")
                return
        if self.from_client.ack_due():
            self.send_ack()

    def resume(self, hello: Hello) -> bool:
        if self.handshaken:
            self.refuse("a second Hello on one connection")
            return False
        if hello.protocol_version != PROTOCOL_VERSION:
            self.refuse(f"protocol version mismatch: the client speaks version {hello.protocol_version}, "
                        f"this worker speaks version {PROTOCOL_VERSION} (install the same skyhive on both sides)")
            return False
        try:
            if hello.resume_from < 0:
                raise ProtocolError("a resumable link starts with Hello(resume_from >= 0)")
            if self.sessions == 0 and hello.resume_from != 0:
                raise ProtocolError(f"first connection asks to resume from frame {hello.resume_from}")
            pieces = self.outbox.replay(hello.resume_from)
        except ProtocolError as exc:
            self.refuse(f"cannot resume: {exc}")
            return False
        if self.sessions:
            _log(f"client reconnected: replaying worker frames after {hello.resume_from} "
                 f"({self.outbox.sent - hello.resume_from} frames), holding {self.from_client.received} of its own")
        self.sessions += 1
        self.handshaken = True
        self.to_client.add([encode_control(Resume(from_seq=hello.resume_from, received=self.from_client.received))])
        self.to_client.add(pieces)
        return True

    def send_ack(self) -> None:
        if self.client is not None and self.handshaken:
            self.to_client.add([self.from_client.ack()])
            self.last_ack = time.monotonic()

    # ---- the worker --------------------------------------------------------------------------------

    def read_worker(self) -> None:
        try:
            data = os.read(self.w_out, _READ_SIZE)
        except BlockingIOError:
            return
        if not data:
            self.worker_eof = True
            return
        frames = [item for item in self.from_worker.feed(data) if isinstance(item, memoryview)]
        self.outbox.record(frames)
        if self.client is not None and self.handshaken:
            self.to_client.add(frames)

    def close_worker_input(self, why: str) -> None:
        if not self.worker_closed:
            _log(f"closing the worker's input: {why}")
            self.worker_closed = True
            self.to_worker.clear()
            try:
                os.close(self.w_in)
            except OSError:
                pass

    # ---- the loop ----------------------------------------------------------------------------------

    def run(self) -> int:
        while True:
            now = time.monotonic()
            if self.terminate and self.exit_status is None:
                self.close_worker_input("terminated")
            if self.worker_eof and self.exit_status is None:
                self.exit_status = self.worker.wait()
                _log(f"worker exited with status {self.exit_status}")
            if self.exit_status is not None:
                if self.client is None or self.terminate:
                    if self.terminate or self.outbox.sent == self.outbox.acked or now - self.away_since > self.idle_timeout:
                        return self.exit_status
                elif self.handshaken and not self.goodbye_sent:
                    self.to_client.add([encode_control(Goodbye(exit_status=self.exit_status))])
                    self.goodbye_sent = True
            elif self.client is None and now - self.away_since > self.idle_timeout:
                self.close_worker_input(f"no client for {self.idle_timeout:g} s")
            if self.from_client.unacked and now - self.last_ack > ACK_DELAY:
                self.send_ack()
            if self.client is not None and self.to_client.size:
                try:
                    self.to_client.flush(self.client_fd)
                except OSError:
                    self.drop_client()
            if self.to_worker.size and not self.worker_closed:
                try:
                    self.to_worker.flush(self.w_in)
                except OSError as exc:
                    if exc.errno != errno.EPIPE:
                        raise
                    self.close_worker_input("its input broke")
            rlist: list[Any] = [self.listener]
            wlist: list[int] = []
            if self.client is not None:
                if self.to_worker.size < HIGH_WATER:
                    rlist.append(self.client_fd)
                if self.to_client.size:
                    wlist.append(self.client_fd)
            if not self.worker_eof and self.outbox.bytes < self.replay_limit and self.to_client.size < HIGH_WATER:
                rlist.append(self.w_out)
            if self.to_worker.size and not self.worker_closed:
                wlist.append(self.w_in)
            timeout = 1.0
            if self.from_client.unacked:
                timeout = ACK_DELAY
            try:
                readable, writable, _ = select.select(rlist, wlist, [], timeout)
            except InterruptedError:
                continue
            if self.listener in readable:
                try:
                    self.accept()
                except OSError as exc:
                    _log(f"accept failed: {exc}")
            if self.client is not None and self.client_fd in readable:
                self.read_client()
            if self.w_out in readable:
                self.read_worker()
            del writable  # flushed at the top of the next round


def _daemonize(log_path: str) -> tuple[int, int]:
    """Fork into the background. Returns (write end of the ready pipe, 0) in the child; the parent
    prints what the child reports and exits."""
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(w)
        chunks = []
        while chunk := os.read(r, 4096):
            chunks.append(chunk)
        report = b"".join(chunks).decode(errors="replace").strip()
        os.waitpid(pid, os.WNOHANG)
        if report.startswith("{"):
            print(report, flush=True)
            os._exit(0)
        print(report or f"the worker server exited before it was ready (see {log_path})", file=sys.stderr, flush=True)
        os._exit(1)
    os.close(r)
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    logfd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(logfd, 1)
    os.dup2(logfd, 2)
    os.close(logfd)
    return w, 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m skyhive.runtime.worker.server")
    ap.add_argument("--socket", required=True, help="Unix socket path (its directory becomes 0700)")
    ap.add_argument("--idle-timeout", type=float, default=600.0, help="exit after this long without a client")
    ap.add_argument("--replay-limit", type=int, default=64 << 20, help="bytes of unacknowledged worker frames kept")
    ap.add_argument("--foreground", action="store_true", help="do not fork (for debugging)")
    args = ap.parse_args(argv)
    path = args.socket
    try:
        listener = prepare_socket(path)
    except (OSError, RuntimeError) as exc:
        print(f"cannot listen on {path}: {exc}", file=sys.stderr, flush=True)
        return 1
    ready_fd = -1
    if not args.foreground:
        ready_fd, _ = _daemonize(path + ".log")
    terminate: list[bool] = []
    relay: Relay | None = None

    def on_term(signum: int, frame: Any) -> None:
        terminate.append(True)
        if relay is not None:
            relay.terminate = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    code = 1
    try:
        worker = subprocess.Popen(
            [sys.executable, "-m", "skyhive.runtime.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            close_fds=True,
        )
        report = json.dumps({"pid": os.getpid(), "worker_pid": worker.pid, "socket": path})
        if ready_fd >= 0:
            os.write(ready_fd, report.encode())
            os.close(ready_fd)
            ready_fd = -1
        else:
            print(report, flush=True)
        relay = Relay(listener, worker, path=path, idle_timeout=args.idle_timeout, replay_limit=args.replay_limit)
        relay.terminate = bool(terminate)
        code = relay.run()
    except BaseException as exc:  # noqa: BLE001 - reported in the log and through the ready pipe
        _log(f"relay failed: {type(exc).__name__}: {exc}")
        if ready_fd >= 0:
            os.write(ready_fd, f"worker server failed: {type(exc).__name__}: {exc}".encode())
            os.close(ready_fd)
    finally:
        for p in (path,):
            try:
                os.unlink(p)
            except OSError:
                pass
        try:
            with open(path + ".exit", "w") as fh:
                fh.write(f"{code}\n")
        except OSError:
            pass
        _log(f"exiting ({code})")
        if os.getpgid(0) == os.getpid():  # detached: we lead the group; end what the tasks left behind
            try:
                os.killpg(0, signal.SIGKILL)
            except OSError:
                pass
    return code


if __name__ == "__main__":
    os._exit(main())
