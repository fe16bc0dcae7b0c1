"""FAKE exec kind (a test stand-in: nothing here is a real cluster): "nodes" are directories on this machine
whose processes are started only through a command runner — each command a fresh `sh -c` with the node's
directory as its HOME and working directory, a bare PATH, and no file of the client's shared — the shape a
Kubernetes kind has over `kubectl exec` (files go through the runner too, as a tar stream: `kubectl cp`).

It lands as a third party's kind does, by adding only its provider (`FakeExec`), its transport and shell
(`FakeExecTransport`, `FakeExecShell`) and its entry points (`ENTRY_POINTS`, installed on disk by the test):
bootstrap is skyhive's over the shell (`BOOTSTRAP_OVER_SHELL`), with no edit under `runtime/`.

A node's processes carry `FAKE_EXEC_NODE=<its home>` in their environment, so `terminate` (a pod
deleted) kills them all, and a test can see that nothing of a node is left running.
"""

from __future__ import annotations

import asyncio
import io
import os
import shlex
import signal
import sys
import tarfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import anyio

from skyhive.providers.base import NodeHandle, Provider, Reach
from skyhive.runtime.kinds.local.transport import LocalTransport
from skyhive.runtime.nodes.registry import BOOTSTRAP_OVER_SHELL, NodeKind
from skyhive.runtime.nodes.shell import CommandResult, NodeEnv, Shell
from skyhive.runtime.nodes.transport import CollectionsReach, Receiver, Transport, WorkerProcess

#: The entry points a distribution of this kind declares (the test writes them into a .dist-info).
ENTRY_POINTS = """\
[skyhive.providers]
fake_exec = tests.kinds.fake_exec.kind:FakeExec

[skyhive.transports]
fake_exec = tests.kinds.fake_exec.kind:KIND
"""

MARKER = "FAKE_EXEC_NODE"
#: A node's PATH: the system's, never the client's virtualenv
NODE_PATH = "/usr/local/bin:/usr/bin:/bin"


def node_python() -> str:
    """The interpreter a fake node names (as an image's python would be): this Python's base
    installation, outside the client's virtualenv (none of its packages)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


@dataclass(frozen=True, slots=True, kw_only=True)
class FakeExecReach(Reach):
    """FAKE: a node of the fake exec kind, reached only through its command runner."""

    kind: ClassVar[str] = "fake_exec"
    home: str


def _node_env(home: str) -> dict[str, str]:
    return {"HOME": home, "PATH": NODE_PATH, MARKER: home}


async def exec_command(home: str, command: str, *, env: Mapping[str, str] | None = None, timeout: float | None = None,
                       stdin: bytes | None = None, on_line: Callable[[str, str], None] | None = None,
                       lifeline: bool = False) -> CommandResult:
    """The fake's command runner (its `kubectl exec`): `sh -c command` in the node's home with the node's
    environment only (plus `env`); `stdin` written to it; killed with its process group when cancelled."""
    proc = await asyncio.create_subprocess_exec(
        "sh", "-c", command, cwd=home, env={**_node_env(home), **(env or {})}, start_new_session=True,
        stdin=asyncio.subprocess.PIPE if (stdin is not None or lifeline) else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out: list[str] = []
    err: list[str] = []

    async def pump(stream: Any, name: str, sink: list[str]) -> None:
        async for raw in stream:
            line = raw.decode(errors="replace")
            sink.append(line)
            if on_line is not None:
                on_line(name, line.rstrip("\n"))

    try:
        with anyio.fail_after(timeout) if timeout is not None else anyio.CancelScope():
            if stdin is not None:
                proc.stdin.write(stdin)
                await proc.stdin.drain()
                if not lifeline:
                    proc.stdin.close()
            async with anyio.create_task_group() as tg:
                tg.start_soon(pump, proc.stdout, "stdout", out)
                tg.start_soon(pump, proc.stderr, "stderr", err)
            await proc.wait()
    except BaseException:
        with anyio.CancelScope(shield=True):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await proc.wait()
        raise
    finally:
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
    return CommandResult(command, proc.returncode or 0, "".join(out), "".join(err))


class FakeExecShell(Shell):
    """FAKE: a fake exec node as bootstrap sees it: commands and files through the command runner only."""

    python_option = "the fake node's python"

    def __init__(self, home: str, node: int) -> None:
        self.home = home
        self.where = f"fake exec node {node}"
        self.label = f"fake-exec-{node}"
        self.python = node_python()

    async def run(self, command: str, *, env: Mapping[str, str] | None = None, timeout: float | None = None,
                  on_line: Callable[[str, str], None] | None = None, lifeline: bool = False) -> CommandResult:
        return await exec_command(self.home, command, env=env, timeout=timeout, on_line=on_line, lifeline=lifeline)

    async def put(self, source: bytes | str | os.PathLike[str], dest: str) -> None:
        """As `kubectl cp` does it: a tar stream into `tar -x` run on the node."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            if isinstance(source, bytes):
                info = tarfile.TarInfo("payload")
                info.size, info.mode = len(source), 0o600
                tar.addfile(info, io.BytesIO(source))
            else:
                tar.add(os.fspath(source), arcname="payload")
        parent, name = os.path.dirname(dest), os.path.basename(dest)
        staging = f"{parent}/.put-{name}"
        command = (f"umask 077 && mkdir -p {shlex.quote(staging)} && tar -xf - -C {shlex.quote(staging)} && "
                   f"mv {shlex.quote(staging + '/payload')} {shlex.quote(dest)} && rmdir {shlex.quote(staging)}")
        done = await exec_command(self.home, command, stdin=buf.getvalue(), timeout=60)
        if done.exit_status != 0:
            raise OSError(f"{self.where}: putting {dest} failed (exit {done.exit_status}): {done.stderr.strip()}")


class FakeExecTransport(Transport):
    """FAKE: workers started on a fake exec node, their stdin/stdout the protocol pipe (as `kubectl exec -i`
    gives); the pipes are the Local kind's (a kind reusing a kind below it), the environment the node's."""

    def __init__(self, reach: FakeExecReach, node: int, redact: Callable[[str], str]) -> None:
        self.reach = reach
        self.node = node
        self.pipes = LocalTransport(cwd=reach.home, redact=redact)
        self.pipes.share_memory = False  # another "machine": no memfds

    def shell(self) -> Shell:
        return FakeExecShell(self.reach.home, self.node)

    def worker_python(self) -> str:
        return self.pipes.worker_python()

    async def use_env(self, env: NodeEnv) -> None:
        self.node_env = env
        await self.pipes.use_env(env)
        self.pipes.worker_env.update(_node_env(self.reach.home))

    async def start_worker(self, argv: Sequence[str], env: Mapping[str, str], receiver: Receiver, *,
                           label: str) -> WorkerProcess:
        return await self.pipes.start_worker(argv, env, receiver, label=f"{label} (fake exec)")

    async def run(self, command: str, *, env: Mapping[str, str] | None = None, timeout: float | None = None) -> CommandResult:
        return await exec_command(self.reach.home, command, env=env, timeout=timeout)

    async def reach_collections(self, client_path: str) -> CollectionsReach | str:
        return "fake exec nodes do not reach the pool's collections"

    def describe(self) -> dict[str, Any]:
        return {"transport": "fake_exec", "home": self.reach.home}


def fake_exec_transport(handle: NodeHandle, ctx: Any) -> FakeExecTransport:
    assert isinstance(handle.reach, FakeExecReach)
    return FakeExecTransport(handle.reach, handle.node, ctx.log.redact)


KIND = NodeKind("fake_exec", "tests.kinds.fake_exec.kind:fake_exec_transport", bootstrap=BOOTSTRAP_OVER_SHELL)


def node_processes(home: str) -> list[int]:
    """The pids of this user's processes that belong to the fake node at `home` (by their environment)."""
    found = []
    needle = f"{MARKER}={home}\0".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if needle in fh.read() + b"\0":
                    found.append(int(pid))
        except OSError:
            pass
    return found


class FakeExec(Provider):
    """FAKE provider: node i of a pool is the directory `root/node-i` (kept between pools, like a
    persistent volume: a second pool finds its built environment); terminating it kills its processes."""

    name = "fake_exec"

    def __init__(self, root: str | None = None) -> None:
        self.root = root or os.environ["FAKE_EXEC_ROOT"]

    def describe(self) -> dict[str, Any]:
        return {"provider": self.name, "root": self.root}

    def _home(self, i: int) -> Path:
        return Path(self.root) / f"node-{i}"

    async def launch(self, spec: Any, nodes: Sequence[int]) -> list[NodeHandle]:
        handles = []
        for i in nodes:
            home = self._home(i)
            home.mkdir(mode=0o700, parents=True, exist_ok=True)
            (home / ".running").write_text(spec.pool_id)
            handles.append(NodeHandle(node=i, provider_id=f"{spec.pool_id}.{i}", private_addr="127.0.0.1",
                                      reach=FakeExecReach(home=str(home))))
        return handles

    async def terminate(self, handles: Sequence[NodeHandle]) -> None:
        for h in handles:
            home = str(self._home(h.node))
            for pid in node_processes(home):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            (Path(home) / ".running").unlink(missing_ok=True)

    async def list_owned(self, pool_id: str) -> list[NodeHandle]:
        return [NodeHandle(node=int(p.parent.name.split("-")[1]), provider_id=f"{pool_id}.{p.parent.name}",
                           private_addr="127.0.0.1", reach=FakeExecReach(home=str(p.parent)))
                for p in sorted(Path(self.root).glob("node-*/.running")) if p.read_text() == pool_id]
