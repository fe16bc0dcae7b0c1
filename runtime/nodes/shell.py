"""`Shell`: what bootstrap needs of any node — run a command there, put a file there, and the facts that
say how to prepare it — and `NodeEnv`, what bootstrap prepared (the interpreter and paths workers run with).

Each transport provides its node's shell (`Transport.shell()`): SSH over its connection, Local over
subprocesses on this machine, Slurm through srun or the login node's SSH connection. Bootstrap
(`runtime/bootstrap/`) prepares any node through it and hands the `NodeEnv` back to the transport
(`Transport.use_env`), so it never asks which transport it has — the role SkyPilot's command runners
play for its clouds and Kubernetes.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

__all__ = ["Shell", "NodeEnv", "Prepared", "CommandResult"]


@dataclass(frozen=True, slots=True)
class CommandResult:
    """A command's exit status and output."""

    command: str
    exit_status: int
    stdout: str
    stderr: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeEnv:
    """What bootstrap prepared on a node: the interpreter and paths its workers run with."""

    #: the interpreter that runs workers (a built venv's, or the node's own)
    python: str
    #: the user's home on the node ("" when bootstrap did not look)
    home: str = ""
    #: put first on the workers' `PYTHONPATH` (the shipped runtime, the Image's files, ...)
    pythonpath: tuple[str, ...] = ()
    #: the workers' working directory (None: the transport's own)
    cwd: str | None = None
    #: where the node's workers put their sockets
    run_dir: str = ""
    #: the environment directory bootstrap built ("" for none): removed when the pool ends unless kept
    env_dir: str = ""


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a bootstrap returns: the detail of the node's `ready` event ("env ab12 cached", or "") and
    the environment its workers run with (None: the transport's defaults stand)."""

    detail: str = ""
    env: NodeEnv | None = None


class Shell(abc.ABC):
    """One node as bootstrap sees it. Subclasses implement `run` and `put`; the attributes are facts
    about the node, with the defaults of a node that shares nothing with this machine."""

    #: the node in messages ("host alice@10.0.0.5", "fake exec node 2")
    where: str = "the node"
    #: the node in log lines, one word ("alice@10.0.0.5:2222")
    label: str = "node"
    #: the host named by the errors bootstrap raises (`ProvisionError.host`), None for none
    host: str | None = None
    #: the interpreter the node's configuration names (None: bootstrap looks for python3.X, then python3)
    python: str | None = None
    #: how a user names another interpreter for this kind of node (said when none fits)
    python_option: str = "python=..."
    #: a command that must succeed before bootstrap starts (a fresh cloud machine's first boot), or None
    ready_command: str | None = None
    #: seconds idle after which the node shuts itself down (a watchdog started by bootstrap; 0: none)
    idle_shutdown: float = 0.0
    #: what that watchdog runs to shut the node down
    shutdown_command: str = ""
    #: a command bootstrap runs last, lifting the boot-time limit a cloud node's boot script set ("" for none)
    boot_limit_off: str = ""
    #: True when the node runs this machine's Python and sees its files (Local, Slurm sharing this
    #: machine's file system): bootstrap checks — or builds — the Image here instead of over `run`
    same_machine: bool = False
    #: (same machine only) whether bootstrap may build the Image's environment when this Python does not
    #: satisfy it (`Local(build_env=False)` refuses such a pool instead)
    build_env: bool = True
    #: (same machine only) the workers' working directory here (None: the client's)
    cwd: str | None = None

    @abc.abstractmethod
    async def run(self, command: str, *, env: Mapping[str, str] | None = None, timeout: float | None = None,
                  on_line: Callable[[str, str], None] | None = None, lifeline: bool = False) -> CommandResult:
        """Run `command` with `sh` on the node; its exit status and output. `env` reaches the command
        without appearing on a command line; `on_line(stream, line)` hears output lines as they come
        ("stdout"/"stderr"); with `lifeline` the command's stdin stays open while it runs (the bootstrap
        script dies with us when it closes). `timeout` raises `TimeoutError`; cancelling ends the command."""

    @abc.abstractmethod
    async def put(self, source: bytes | str | os.PathLike[str], dest: str) -> None:
        """Put `source` — bytes, or a local file or directory (copied whole) — at the absolute path
        `dest` on the node, its missing parents created private (0700)."""

    def keep_secret(self, values: Iterable[str]) -> None:
        """Values this shell must never show in a log line (the Image's secrets). Default: it logs no
        commands, nothing to do."""
