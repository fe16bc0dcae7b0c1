"""Commands on this machine, as a `Shell`: what the Local transport (and Slurm's srun, whose nodes share
this machine's files) gives bootstrap. `run_here` runs one `sh -c` command in its own process group,
killed with its group when cancelled or out of time."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

import anyio

from ...nodes.shell import CommandResult, Shell

__all__ = ["LocalShell", "run_here"]


async def run_here(command: str, *, env: Mapping[str, str] | None = None, timeout: float | None = None,
                   cwd: str | None = None, on_line: Callable[[str, str], None] | None = None,
                   lifeline: bool = False) -> CommandResult:
    """Run `command` with `sh` on this machine (its own session), `env` added to ours; its exit status
    and output. Cancelling or `timeout` (`TimeoutError`) kills its process group."""
    proc = await asyncio.create_subprocess_shell(
        command, stdin=subprocess.PIPE if lifeline else subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True)
    out: list[str] = []
    err: list[str] = []

    async def pump(stream: asyncio.StreamReader | None, name: str, sink: list[str]) -> None:
        assert stream is not None
        async for raw in stream:
            line = raw.decode(errors="replace")
            sink.append(line)
            if on_line is not None:
                on_line(name, line.rstrip("\n"))

    try:
        with anyio.fail_after(timeout) if timeout is not None else anyio.CancelScope():
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
        if proc.stdin is not None:
            proc.stdin.close()
    return CommandResult(command, proc.returncode or 0, "".join(out), "".join(err))


class LocalShell(Shell):
    """This machine, for a node whose workers run this machine's Python and see its files."""

    same_machine = True

    def __init__(self, *, where: str = "this machine", cwd: str | None = None, build_env: bool = True,
                 python: str | None = None) -> None:
        self.where = where
        self.cwd = cwd
        self.build_env = build_env
        self.python = python

    async def run(self, command: str, *, env: Mapping[str, str] | None = None, timeout: float | None = None,
                  on_line: Callable[[str, str], None] | None = None, lifeline: bool = False) -> CommandResult:
        return await run_here(command, env=env, timeout=timeout, cwd=self.cwd, on_line=on_line, lifeline=lifeline)

    async def put(self, source: bytes | str | os.PathLike[str], dest: str) -> None:
        target = Path(dest)
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if isinstance(source, bytes):
            target.write_bytes(source)
        else:
            import shutil  # (on use: a pool that puts no files does not import it, nor bz2 and lzma)

            if Path(source).is_dir():
                shutil.copytree(source, target, dirs_exist_ok=True)
            else:
                shutil.copy2(source, target)
