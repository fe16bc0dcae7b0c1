"""FAKE exec kind, kept (a test stand-in: nothing here is a real cluster): how a named pool of fake exec nodes
outlives its client, and how a user reaches one of its nodes — declared by the kind itself, a third party's
`KeepSupport` (`keep=` of its `NodeKind`), with no edit under `runtime/`.

- Its workers are kept as the Local kind keeps them (`LocalKeep`: detached, each on a Unix socket, found
  again by those sockets): a fake node's "machine" is this one. Each starts in its node's home.
- How a user reaches a node is the kind's own: `FakeExecAccess` runs a session through the fake's command
  runner (its `kubectl exec`: `sh -c` in the node's home with the node's environment only), and a port on
  the node's loopback through a relay it execs there (`kubectl exec -i ... -- socat - TCP:127.0.0.1:PORT`);
  it has no SSH entries.
- The record holds where its nodes are (`provider_info["root"]`, read by this module only), and `skyhive
  start` finds them again there (`relaunch_provider`).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from skyhive.providers.base import DetachedLocalReach, NodeHandle, Provider
from skyhive.runtime.kinds.local.keep import LocalKeep
from skyhive.runtime.nodes.keep import KeepContext, KeptRecord, NodeAccess, ProcessStream, StopResult
from skyhive.runtime.nodes.registry import BOOTSTRAP_OVER_SHELL, NodeKind

from .kind import MARKER, NODE_PATH, FakeExec, FakeExecReach, node_processes, node_python

__all__ = ["FakeExecKeep", "FakeExecAccess", "KEEP"]

#: What the relay exec'd on a node runs: stdin to the port, the port to stdout (the node's `socat`).
RELAY = r"""
import os, socket, sys, threading
conn = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
def up():
    while True:
        data = os.read(0, 65536)
        if not data:
            break
        conn.sendall(data)
    conn.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while True:
    data = conn.recv(65536)
    if not data:
        break
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
"""


def _home(rec: KeptRecord, node: int) -> str:
    return str(Path(rec.provider_info["root"]) / f"node-{node}")


class FakeExecAccess(NodeAccess):
    """FAKE: node `node` of a kept fake exec pool, reached through the fake's command runner only."""

    def __init__(self, rec: KeptRecord, node: int) -> None:
        self.node = node
        self.home = _home(rec, node)

    def _env(self) -> dict[str, str]:
        return {"HOME": self.home, "PATH": NODE_PATH, MARKER: self.home}

    def describe(self) -> str:
        return f"fake exec node {self.node} ({self.home})"

    def run(self, argv: Sequence[str] | None, *, tty: bool) -> int:
        command = list(argv) if argv is not None else ["sh", "-l"]
        return subprocess.call(command, cwd=self.home, env=self._env())

    async def connect(self, port: int) -> anyio.abc.ByteStream:
        command = f"exec {shlex.quote(node_python())} -c {shlex.quote(RELAY)} {int(port)}"
        process = await anyio.open_process(["sh", "-c", command], cwd=self.home, env=self._env(),
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None)
        return ProcessStream(process, grace=0)


class FakeExecKeep(LocalKeep):
    """FAKE: the fake exec kind's keep support (see the module docstring)."""

    kind = "fake_exec"
    same_machine = False  # its nodes are "other machines": their own homes, reached by their runner

    def keep_handle(self, handle: NodeHandle, ctx: KeepContext) -> NodeHandle:
        reach = handle.reach
        if isinstance(reach, DetachedLocalReach):
            return handle
        assert isinstance(reach, FakeExecReach), reach
        kept = DetachedLocalReach(cwd=reach.home, socket_dir=ctx.socket_dir)
        return NodeHandle(node=handle.node, provider_id=handle.provider_id, private_addr=handle.private_addr,
                          reach=kept, extra=handle.extra)

    def record_fields(self, provider: Provider, handles: Sequence[NodeHandle], ctx: KeepContext) -> dict[str, Any]:
        assert isinstance(provider, FakeExec), provider
        return {"cwd": str(Path(provider.root) / "node-0"), "socket_dir": ctx.socket_dir, "cluster": "",
                "provider_info": {"root": provider.root}}

    def stop(self, rec: KeptRecord, *, host_keys: Mapping[int, str] | None = None, skip: Collection[int] = (),
             keep_work: bool = False) -> StopResult:
        """What of the pool runs on its nodes besides its workers (a session's, a relay's) ended; with the
        pool taken down (not `keep_work`), its nodes released (their `.running` mark: a pod deleted)."""
        ended, done = 0, []
        for node in range(rec.nodes):
            if node in skip:
                continue
            home = _home(rec, node)
            pids = node_processes(home)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if not keep_work:
                (Path(home) / ".running").unlink(missing_ok=True)
            ended += len(pids)
            done.append(f"fake exec node {node}: {len(pids)} processes ended")
        return StopResult(ended, tuple(done))

    def access(self, rec: KeptRecord, node: int) -> NodeAccess:
        return FakeExecAccess(rec, node)

    def relaunch_provider(self, rec: KeptRecord) -> Provider:
        return FakeExec(rec.provider_info["root"])


KEEP = FakeExecKeep()

#: The kind as a distribution of the kept kind registers it: `kind.KIND` with its keep support.
KIND = NodeKind("fake_exec", "tests.kinds.fake_exec.kind:fake_exec_transport", bootstrap=BOOTSTRAP_OVER_SHELL,
                keep="tests.kinds.fake_exec.keep:KEEP")

#: Its entry points (the test writes them into a .dist-info, as `pip install` would).
KEPT_ENTRY_POINTS = """\
[skyhive.providers]
fake_exec = tests.kinds.fake_exec.kind:FakeExec

[skyhive.transports]
fake_exec = tests.kinds.fake_exec.keep:KIND
"""
