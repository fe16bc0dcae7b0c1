"""srun transport: worker processes on the nodes of a Slurm allocation, over `srun`'s pipes.

Each worker is one job step, `srun --jobid J -w NODE -N1 -n1 --overlap -u python -m
skyhive.runtime.worker`: srun carries its stdin/stdout byte for byte, so they are the protocol pipe, as
with the Local transport (whose pipe machinery this reuses). `--overlap` lets the steps share the
allocation (the holding job keeps it) and each other's CPUs and GPUs. The environment (`COMPUTE_POOL`,
the image's variables) travels with srun (`--export=ALL`, its default). The pipes are a `LocalTransport`'s,
held (not inherited): `SrunTransport` is a transport of its own kind.

GPUs: every step on a node sees all the GPUs Slurm gave the job there (`CUDA_VISIBLE_DEVICES` as Slurm
sets it). With several workers per node, worker `local_rank` keeps its share of that list, in Slurm's
order: with 2 GPUs and 2 workers, "0" and "1".

Ending a worker: when its pipe closes, the worker exits; killing srun (SIGKILL) ends the remote task
within seconds; cancelling the job (the provider's `terminate`) ends every step at once.

A node can be lost while its worker still answers: when its slurmd dies the step goes on, until the
controller ends the job (`SlurmdTimeout` later, srun then exits 0). So while a worker runs, the node is
also watched through the provider (`Provider.node_problem`: its slurmd refuses connections, or
Slurm's controller flags the node as not responding); once it does, the worker is declared lost with
that sentence (naming the Slurm node and the cause) and its srun ended.

Mode 1 (`SrunTransport`): srun runs on this machine. Mode 2 (`SrunSSHTransport`): srun runs on the
login node over the SSH transport's connection (an exec channel whose stdin/stdout are the pipe), and
bootstrap prepares the environment there, in the login user's home, which the nodes share.
"""

from __future__ import annotations

import json
import logging
import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio

from ....protocol.info import ENV_VAR
from ....providers.slurm import SlurmReach
from ...nodes.shell import NodeEnv, Shell
from ...nodes.transport import CollectionsReach, CommandResult, Receiver, Transport, WorkerProcess
from ..local.transport import LocalTransport, LocalWorker

__all__ = ["SrunTransport", "srun_argv", "NodeWatch", "SLURM_COLLECTIONS"]

#: What a task on a Slurm node gets from `sky.dict` & co.: a worker's only way to the client is srun's
#: I/O (the protocol pipe), with no second channel for the collections' own connections.
SLURM_COLLECTIONS = ("sky.dict/set/counter/queue/barrier/lock are not served to Slurm nodes: their workers "
                     "reach the client only through srun's I/O (docs/collections.md); use the frameworks' "
                     "collectives, or a store of your own reachable from the nodes")

# Keep worker LOCAL_RANK's share of the GPUs Slurm set for the step: $1 = local rank, $2 = workers on
# the node, then the command. POSIX sh; the list is split on commas without touching "$@".
_NARROW = r'''r=$1 n=$2; shift 2
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  old=$IFS; IFS=,; c=0
  for d in $CUDA_VISIBLE_DEVICES; do c=$((c + 1)); done
  k=$((c / n))
  if [ "$k" -ge 1 ]; then
    i=0; keep=
    for d in $CUDA_VISIBLE_DEVICES; do
      if [ "$i" -ge $((r * k)) ] && [ "$i" -lt $((r * k + k)) ]; then keep=${keep:+$keep,}$d; fi
      i=$((i + 1))
    done
    CUDA_VISIBLE_DEVICES=$keep; export CUDA_VISIBLE_DEVICES
  fi
  IFS=$old
fi
exec "$@"'''


def srun_argv(reach: SlurmReach, argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
    """`argv` as one job step on the reach's node; with several workers per node (read from the
    worker's `COMPUTE_POOL` in `env`), wrapped to keep this worker's share of the GPUs."""
    step = ["srun", f"--jobid={reach.job_id}", f"--nodelist={reach.node_name}", "--nodes=1", "--ntasks=1",
            "--overlap", "--unbuffered", "--quiet", "--kill-on-bad-exit=1"]
    info = json.loads(env[ENV_VAR]) if env and ENV_VAR in env else {}
    per_node = int(info.get("processes_per_node", 1))
    if per_node > 1:
        return [*step, "sh", "-c", _NARROW, "sh", str(int(info.get("local_rank", 0))), str(per_node), *argv]
    return [*step, *argv]


log = logging.getLogger("skyhive.transport")


class NodeWatch:
    """Watches one Slurm node while its workers run: every `interval`, `problem()` (the provider's
    `node_problem` for the node); the first answer fails each running worker there with it (its
    `lost_reason`, then its srun killed: the channel closes with that reason). `spawn` starts a task in
    the pool's task group."""

    def __init__(self, problem: Callable[[], Awaitable[str | None]], *, interval: float, grace: float,
                 spawn: Callable[..., None]) -> None:
        self.problem = problem
        self.interval = interval
        self.grace = grace
        self.spawn = spawn

    def start(self, worker: WorkerProcess, receiver: Receiver) -> None:
        self.spawn(self._watch, worker, receiver)

    async def _watch(self, worker: WorkerProcess, receiver: Receiver) -> None:
        while worker.returncode is None:
            await anyio.sleep(self.interval)
            if worker.returncode is not None:
                return
            try:
                why = await self.problem()
            except Exception as exc:  # noqa: BLE001 - asking is best effort: the heartbeats still watch
                log.debug("asking about a Slurm node: %s", exc)
                continue
            if why is not None and worker.returncode is None:
                log.warning("%s: its worker (srun pid %d) is lost", why, worker.pid)
                if receiver.lost_reason is None:
                    receiver.lost_reason = why
                await self._end(worker)
                return

    async def _end(self, worker: WorkerProcess) -> None:
        """End a worker on a node whose slurmd is gone: Slurm cannot end its step there, and killing
        our srun would leave the worker running under its slurmstepd. Closing its stdin does end it
        (srun forwards the end of input straight to the step, no slurmd involved; a worker exits when
        its input ends); srun then exits with the step. Killed after `grace` if it has not."""
        try:
            worker.link.close()
        except Exception as exc:  # noqa: BLE001 - a pipe already closing: killing is all that is left
            log.debug("closing a Slurm worker's input: %s", exc)
        with anyio.move_on_after(self.grace):
            await worker.wait()
        if worker.returncode is None:
            worker.kill()


class SrunTransport(Transport):
    """Mode 1: srun runs on this machine; the worker's pipes are srun's (see the module docstring)."""

    def __init__(self, reach: SlurmReach, *, redact: Any = None, watch: NodeWatch | None = None) -> None:
        # the pipes to srun are a Local transport's; no memfds: the worker runs on a Slurm node
        self.local = LocalTransport(python=reach.python, cwd=reach.cwd, redact=redact)
        self.local.share_memory = False
        self.reach = reach
        self.watch = watch

    def describe(self) -> dict[str, Any]:
        return {"transport": "srun", "job_id": self.reach.job_id, "node": self.reach.node_name}

    def worker_python(self) -> str:
        return self.local.worker_python()

    def shell(self) -> Shell:
        """This machine's: the nodes share its file system, so bootstrap checks the Image against this
        Python, as for Local (never building one: `build_env` off)."""
        from ..local.shell import LocalShell

        return LocalShell(where=f"Slurm node {self.reach.node_name}", cwd=self.local.cwd, build_env=False)

    async def use_env(self, env: NodeEnv) -> None:
        self.node_env = env
        await self.local.use_env(env)

    async def reach_collections(self, client_path: str) -> CollectionsReach | str:
        """Not on Slurm nodes: see `SLURM_COLLECTIONS`."""
        return SLURM_COLLECTIONS

    async def start_worker(self, argv: Sequence[str], env: Mapping[str, str], receiver: Receiver, *,
                           label: str) -> LocalWorker:
        worker = await self.local.start_worker(srun_argv(self.reach, argv, env), env, receiver,
                                               label=f"{label} ({self.reach.node_name})")
        if self.watch is not None:
            self.watch.start(worker, receiver)
        return worker

    async def run(self, command: str, *, env: Mapping[str, str] | None = None,
                  timeout: float | None = None) -> CommandResult:
        """Run a shell command on the node, as one more step of the job."""
        wrapped = shlex.join(srun_argv(self.reach, ["sh", "-c", command]))
        result = await self.local.run(wrapped, env=env, timeout=timeout)
        return CommandResult(command, result.exit_status, result.stdout, result.stderr)

    async def close(self) -> None:
        await self.local.close()
