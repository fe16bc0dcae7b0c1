"""A pod as a `Shell` (what bootstrap prepares it through): every command a fresh `pods/exec` of `/bin/sh -c`,
files put as a tar stream read by `tar -x` in the pod (as `kubectl cp` does).

The environment a command gets travels on its stdin, never on a command line (which the API server's audit
log and every user of the pod's `ps` can read): the shell reads a byte count, then exactly that many bytes of
`export K='v'` lines (`head -c`, which reads no further), and runs the command; what follows on stdin is the
command's own. Without `lifeline` the command's stdin then ends. The API server does not kill a command
whose stream is closed (a timeout, a cancellation): such a command runs on until it ends or the pod is
deleted (a pool's pods are deleted when it ends); bootstrap's own script runs with `lifeline` and ends
itself when its stdin closes.
"""

from __future__ import annotations

import io
import os
import shlex
import tarfile
from collections.abc import Callable, Mapping

import anyio

from ....providers.kubernetes import PodReach
from ....providers.kubernetes_api import exec_api
from ...nodes.shell import CommandResult, Shell
from .exec import ExecStream

__all__ = ["PodShell", "env_block", "READ_ENV", "exec_command"]

#: Reads the byte count, then exactly that many bytes of `export K='v'` lines, from stdin, and runs them.
READ_ENV = 'IFS= read -r _skyhive_n && eval "$(head -c "$_skyhive_n")" && unset _skyhive_n && '


def env_block(env: Mapping[str, str] | None) -> bytes:
    """What `READ_ENV` reads: the byte count, a newline, the `export` lines (an empty block for no variables).
    Raises `ValueError` naming a variable the shell cannot export."""
    env = env or {}
    bad = [k for k in env if not k.isidentifier() or not k.isascii()]
    if bad:
        raise ValueError(f"environment variable names must be shell identifiers: {', '.join(map(repr, bad))}")
    block = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()).encode()
    return str(len(block)).encode() + b"\n" + block


async def exec_command(reach: PodReach, command: str, *, env: Mapping[str, str] | None = None,
                       stdin: bytes = b"", keep_stdin: bool = False, timeout: float | None = None,
                       on_line: Callable[[str, str], None] | None = None) -> CommandResult:
    """Run `command` with `/bin/sh -c` in the pod over one exec stream; its exit status and output. Raises
    `TimeoutError` after `timeout`; cancelling ends the stream."""
    api = exec_api(reach.kubeconfig, reach.context)
    out: dict[int, list[bytes]] = {1: [], 2: []}
    partial = {1: b"", 2: b""}
    done = anyio.Event()
    ended: list[tuple[int | None, str]] = []

    def on_data(channel: int, data: bytes) -> None:
        out[channel].append(data)
        if on_line is not None:
            *lines, partial[channel] = (partial[channel] + data).split(b"\n")
            for line in lines:
                on_line("stdout" if channel == 1 else "stderr", line.decode(errors="replace"))

    def on_end(code: int | None, error: str) -> None:
        ended.append((code, error))
        done.set()

    stream = ExecStream(api, reach.namespace, reach.pod, reach.container, ["/bin/sh", "-c", READ_ENV + command],
                        on_data=on_data, on_end=on_end)
    try:
        with anyio.fail_after(timeout) if timeout is not None else anyio.CancelScope():
            await stream.open()
            stream.write(env_block(env) + stdin)
            if not keep_stdin:
                stream.close_stdin()
            await done.wait()
    finally:
        stream.close()
    code, error = ended[0]
    if on_line is not None:
        for channel, rest in partial.items():
            if rest:
                on_line("stdout" if channel == 1 else "stderr", rest.decode(errors="replace"))
    stderr = b"".join(out[2]).decode(errors="replace")
    if code is None:
        code, stderr = 255, stderr + f"\n(pod {reach.pod}: {error})"
    return CommandResult(command, code, b"".join(out[1]).decode(errors="replace"), stderr)


class PodShell(Shell):
    """One pod as bootstrap sees it (see the module docstring)."""

    python_option = "sky.Kubernetes(python=...) or an image with python3.11+ on PATH"

    def __init__(self, reach: PodReach) -> None:
        self.reach = reach
        self.where = f"pod {reach.pod} (namespace {reach.namespace})"
        self.label = reach.pod
        self.python = reach.python

    async def run(self, command: str, *, env: Mapping[str, str] | None = None, timeout: float | None = None,
                  on_line: Callable[[str, str], None] | None = None, lifeline: bool = False) -> CommandResult:
        return await exec_command(self.reach, command, env=env, timeout=timeout, on_line=on_line, keep_stdin=lifeline)

    async def put(self, source: bytes | str | os.PathLike[str], dest: str) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            if isinstance(source, bytes):
                info = tarfile.TarInfo("payload")
                info.size, info.mode = len(source), 0o600
                tar.addfile(info, io.BytesIO(source))
            else:
                tar.add(os.fspath(source), arcname="payload")
        data = buf.getvalue()
        parent, name = os.path.dirname(dest), os.path.basename(dest)
        staging = f"{parent}/.put-{name}"
        q = shlex.quote
        command = (f"umask 077 && mkdir -p {q(staging)} && head -c {len(data)} | tar -xf - -C {q(staging)} && "
                   f"mv {q(staging + '/payload')} {q(dest)} && rmdir {q(staging)}")
        done = await exec_command(self.reach, command, stdin=data, timeout=300)
        if done.exit_status != 0:
            raise OSError(f"{self.where}: putting {dest} failed (exit {done.exit_status}): {done.stderr.strip()}")
