"""`Slurm`: a pool is one allocation on a Slurm cluster you already have. Implements
`providers.base.Provider`.

- `launch` submits one holding job for all the pool's nodes (`sbatch --wrap` of a script that only
  sleeps; job name `skyhive-<pool id>`, always with a time limit) and returns at once; an impossible
  request that `sbatch` refuses is a `SlurmError` (a `ProvisionError`) quoting Slurm.
- `wait_running` polls `squeue` until the job runs, reporting "pending (<Slurm's reason>)" each time the
  reason changes; a reason that can never be satisfied (`PartitionConfig`, ...) is an immediate
  `SlurmError`, and so is still pending after `pending_timeout`. The nodes are the job's node list in
  Slurm's order (node 0, the head, first); their addresses are Slurm's `NodeAddr`.
- Workers are not this module's business: the handles carry a `SlurmReach` (job id, node name) and the
  runtime's `srun` transport starts each worker with `srun --jobid J -w NODE --overlap`, its
  stdin/stdout the protocol pipe.
- `terminate` cancels the job (`scancel`) and waits, bounded, until Slurm no longer lists it;
  `list_owned` finds a pool's job by its name (for `skyhive down`).

Mode 1: Slurm's commands run on this machine. Mode 2 (`login="user@host"`): they run on that login node
over SSH (`providers.slurm_cmd.SSHRunner`), and so do the workers' `srun`s.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import anyio

from .accelerators import is_generic
from .features import Feature, Features
from .base import ClusterSpec, NodeHandle, Provider, ProvisionError, Reach, SSHReach
from .slurm_health import NodeHealth
from .slurm_cmd import CommandRunner, Completed, SlurmUnreachable, LocalRunner, SlurmError, SSHRunner

__all__ = ["Slurm", "SlurmReach", "job_name", "gres_for", "UNSATISFIABLE"]

log = logging.getLogger("skyhive.providers.slurm")

#: Pending reasons Slurm keeps forever for this job: waiting cannot help.
UNSATISFIABLE = {
    "PartitionConfig": "the request does not fit the partition (more nodes, CPUs or GPUs than it has)",
    "PartitionNodeLimit": "more nodes than the partition allows a job",
    "PartitionTimeLimit": "the time limit is longer than the partition allows",
    "BadConstraints": "no node has the requested features/constraint",
    "InvalidAccount": "the account is not valid",
    "InvalidQOS": "the QOS is not valid",
    "QOSMaxNodePerJobLimit": "more nodes than the QOS allows a job",
    "AssocMaxNodesPerJobLimit": "more nodes than the association allows a job",
    "AssocMaxWallDurationPerJobLimit": "the time limit is longer than the association allows",
    "QOSMaxWallDurationPerJobLimit": "the time limit is longer than the QOS allows",
    "PartitionDown": "the partition is down",
    "PartitionInactive": "the partition is inactive",
    "DependencyNeverSatisfied": "a dependency can never be satisfied",
}
_ENDED = {"CANCELLED", "COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
          "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED"}
_TIME = re.compile(r"^(\d+-)?\d+(:\d+){0,2}$")
_POOL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,120}$")
#: The holding job's script: it only keeps the allocation (its time limit ends it at the latest). One
#: process, no child: a `while sleep` loop's sleep can outlive a cancelled job where Slurm tracks
#: processes by parentage (proctrack/linuxproc) and the shell dies first (seen in the tests).
_HOLD = "exec sleep 2147483647"


def job_name(pool_id: str) -> str:
    """The Slurm job name of a pool's allocation."""
    if not _POOL_ID.match(pool_id):
        raise ProvisionError(f"pool id {pool_id!r} cannot name a Slurm job: use letters, digits, '.', '_', '-'")
    return f"skyhive-{pool_id}"


def gres_for(accelerator: str | None, gres: str | None) -> str | None:
    """The `--gres` request: `gres` verbatim when given, else from `accelerator` ("A100:4" ->
    "gpu:a100:4", "A100" -> "gpu:a100:1"; Slurm's GPU type names are lower case by convention). The
    generic "gpu:2" (any two GPUs, Slurm's own spelling) names no model: "gpu:2"."""
    if gres:
        return gres
    if not accelerator:
        return None
    model, _, count = accelerator.partition(":")
    if not model or (count and (not count.isdigit() or int(count) < 1)):
        raise ValueError(f"accelerator {accelerator!r} is not 'MODEL' or 'MODEL:COUNT'")
    if is_generic(model):
        return f"gpu:{int(count or 1)}"
    return f"gpu:{model.lower()}:{int(count or 1)}"


def _gpus_in(gres: str | None) -> tuple[str | None, int]:
    """(GPU type, GPUs per node) of a gres request ("gpu:a100:2" -> ("a100", 2), "gpu:2" -> (None, 2))."""
    for item in (gres or "").split(","):
        parts = item.strip().split(":")
        if parts[0] == "gpu":
            count = int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1
            kind = parts[1] if len(parts) == 3 else None
            return kind, count
    return None, 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmReach(Reach):
    """A node of a Slurm allocation: workers start there with `srun --jobid job_id -w node_name`.
    `login` is the SSH login node in Mode 2 (None: the `srun` runs on this machine)."""

    kind: ClassVar[str] = "slurm"
    job_id: str
    node_name: str
    python: str | None = None
    cwd: str | None = None
    login: SSHReach | None = None


@dataclass(slots=True)
class _Job:
    """What `wait_running` learned about one allocation (shared by its nodes' handles)."""

    state: str = ""
    reason: str = ""
    nodes: list[tuple[str, str]] | None = None  # (Slurm node name, NodeAddr), in Slurm's order
    lock: anyio.Lock | None = None
    count: int = 0  # nodes asked for (0: a job this provider did not launch)
    released: set[int] | None = None  # positions terminated so far
    polled: float = 0.0  # when squeue was last asked (time.monotonic)


class Slurm(Provider):
    """A Slurm cluster you already have: `sky.Slurm(partition="gpu", time_limit="2:00:00")`.

    - `partition`, `account`, `qos`, `constraint`: as `sbatch -p/-A/-q/-C` (default: Slurm's).
    - `time_limit`: the allocation's limit, minutes (int) or Slurm's "[D-]HH:MM:SS" forms; required to be
      finite, so that a lost client cannot hold nodes forever. Default 60 minutes.
    - `gres`: a `--gres` request per node verbatim ("gpu:2"); else derived from the pool's
      `accelerator` ("A100:4" -> "gpu:a100:4").
    - `login`: "user@host[:port]" of a login node: Slurm's commands and the workers' `srun` run there
      over SSH (`key`, `known_hosts`: as for `sky.SSH`; without `known_hosts` the login node's key is
      pinned on first contact). Default: this machine is the login node.
    - `python`: the interpreter on the nodes; default this one's path in Mode 1 (a shared file system),
      the environment bootstrap builds in the login user's (shared) home in Mode 2.
    - `pending_timeout`: how long the job may stay pending before the pool fails (default 600 s);
      `poll_interval`: the longest wait between two `squeue` while it is pending (from 20 ms, doubling).
    - `sbatch_args`: more `sbatch` options, verbatim.
    """

    @classmethod
    def infra(cls, text: str, parts: Sequence[str], **files: str | None) -> dict[str, Any]:
        """`slurm` (this machine's), `slurm/LOGIN` (reached by logging in to LOGIN, `*`: this machine's) or
        `slurm/LOGIN/PARTITION`."""
        if len(parts) > 2 or any(not part for part in parts):
            raise ValueError(f"{text!r}: expected slurm, slurm/LOGIN or slurm/LOGIN/PARTITION")
        options = [("login", parts[0])] if parts and parts[0] != "*" else []
        if len(parts) == 2:
            options.append(("partition", parts[1]))
        return {"options": tuple(options)}

    name = "slurm"
    features = Features(cannot={
        Feature.KEEP: "a Slurm allocation ends with the client's job (srun steps are children of it); keeping one "
                      "would need a batch job holding the allocation, which is not built"})
    chooses = frozenset({"accelerator"})  # as a gres request (see `gres_for`)
    transient_errors: ClassVar[tuple[type[BaseException], ...]] = (SlurmUnreachable,)
    state_map: ClassVar[dict[str, str]] = {
        "pending": "provisioning", "configuring": "provisioning", "running": "running",
        "completing": "terminating", "suspended": "failed",
        **{s.lower(): "terminated" for s in ("CANCELLED", "COMPLETED", "TIMEOUT", "PREEMPTED", "DEADLINE")},
        **{s.lower(): "failed" for s in ("FAILED", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY")},
    }
    command_timeout = 30.0
    terminate_timeout = 30.0

    def __init__(self, *, partition: str | None = None, account: str | None = None, qos: str | None = None,
                 time_limit: int | str = 60, gres: str | None = None, constraint: str | None = None,
                 login: str | None = None, key: str | None = None, known_hosts: str | None = None,
                 python: str | None = None, cwd: str | None = None, pending_timeout: float = 600.0,
                 poll_interval: float = 1.0, sbatch_args: Sequence[str] = (), connect_timeout: float = 10.0) -> None:
        if isinstance(time_limit, bool) or not isinstance(time_limit, (int, str)):
            raise ValueError(f"Slurm(time_limit={time_limit!r}): minutes (int) or '[D-]HH:MM:SS'")
        if isinstance(time_limit, int) and time_limit < 1:
            raise ValueError(f"Slurm(time_limit={time_limit}): must be at least 1 minute")
        if isinstance(time_limit, str) and not _TIME.match(time_limit.strip()):
            raise ValueError(f"Slurm(time_limit={time_limit!r}): not a Slurm time ('MM', 'HH:MM:SS', "
                             "'D-HH:MM'); an unlimited allocation is not allowed")
        if pending_timeout <= 0 or poll_interval <= 0:
            raise ValueError("Slurm(pending_timeout=..., poll_interval=...) must be > 0")
        if isinstance(sbatch_args, str):
            raise ValueError("Slurm(sbatch_args=...) is a list of arguments, not one string")
        self.partition, self.account, self.qos, self.constraint = partition, account, qos, constraint
        self.time_limit = time_limit
        self.gres = gres
        self.login, self.key, self.known_hosts = login, key, known_hosts
        self.python, self.cwd = python, cwd
        self.pending_timeout, self.poll_interval = float(pending_timeout), float(poll_interval)
        self.sbatch_args = tuple(sbatch_args)
        self.connect_timeout = connect_timeout
        self.runner: CommandRunner = (SSHRunner(login, key=key, known_hosts=known_hosts, connect_timeout=connect_timeout)
                                      if login else LocalRunner())
        self._jobs: dict[str, _Job] = {}
        # pools whose launch here stopped before anything could be submitted (the login node not reached,
        # or its host key refused): nothing of theirs exists, so `list_owned` need not (cannot) ask Slurm
        self._unsubmitted: set[str] = set()
        # Mode 1 (this machine is the login node, so it reaches the nodes): their slurmd is probed too
        self._health = NodeHealth(self.runner, timeout=self.command_timeout, max_age=min(1.0, self.poll_interval),
                                  probe=not login)

    def __repr__(self) -> str:
        where = f" login={self.login!r}" if self.login else ""
        return f"Slurm(partition={self.partition!r}, time_limit={self.time_limit!r}{where})"

    # ---- commands ----------------------------------------------------------------------------------

    async def _run(self, *argv: str, check: bool = True) -> Completed:
        try:
            done = await self.runner.run(argv, timeout=self.command_timeout)
        except TimeoutError:
            raise SlurmUnreachable(f"{self.runner.where}: `{' '.join(argv)}` did not finish within "
                                   f"{self.command_timeout:g} s") from None
        return done.check(self.runner.where) if check else done

    def sbatch_argv(self, spec: ClusterSpec, count: int) -> list[str]:
        """The `sbatch` command that asks for a pool's allocation of `count` nodes."""
        argv = ["sbatch", "--parsable", f"--job-name={job_name(spec.pool_id)}", f"--nodes={count}",
                "--ntasks-per-node=1", f"--time={self.time_limit}", "--output=/dev/null", "--error=/dev/null",
                "--chdir=/tmp", "--no-requeue", f"--comment=skyhive pool {spec.pool_id}"]
        for flag, value in (("--partition", self.partition), ("--account", self.account), ("--qos", self.qos),
                            ("--constraint", self.constraint), ("--gres", gres_for(spec.accelerator, self.gres))):
            if value:
                argv.append(f"{flag}={value}")
        return [*argv, *self.sbatch_args, f"--wrap={_HOLD}"]

    def plan(self, spec: ClusterSpec) -> dict[str, Any]:
        """What the pool asks Slurm for, before submitting (declared in `Provider.plan`): one
        allocation of `spec.nodes` nodes with its time limit, partition and per-node gres. Slurm sets
        no price; `cpus`/`memory_gb` are not requested (`sbatch_args` can: `--cpus-per-task`, `--mem`).
        Raises `ValueError` for an accelerator that is not `MODEL[:COUNT]`."""
        gres = gres_for(spec.accelerator, self.gres)
        parts = [f"{spec.nodes} node{'s' if spec.nodes != 1 else ''}",
                 f"partition {self.partition}" if self.partition else "the default partition",
                 f"time limit {self.time_limit}" + (" min" if isinstance(self.time_limit, int) else "")]
        if gres:
            parts.append(f"gres {gres} per node")
        where = f" via {self.login}" if self.login else ""
        return {"summary": f"one Slurm allocation{where}: " + ", ".join(parts), "nodes": spec.nodes,
                "partition": self.partition, "time_limit": self.time_limit, "gres": gres}

    # ---- the phases -----------------------------------------------------------------------------

    async def launch(self, spec: ClusterSpec, nodes: Sequence[int]) -> list[NodeHandle]:
        """Submit one holding job for these node indices (declared in `Provider.launch`). Raises
        `SlurmError` quoting `sbatch` when Slurm refuses the request (`SlurmUnreachable` when its
        controller does not answer: then a job sbatch may have made is cancelled by name)."""
        nodes = list(nodes)
        argv = self.sbatch_argv(spec, len(nodes))
        self._unsubmitted.discard(spec.pool_id)
        try:  # the login node reached and its key checked before anything is submitted
            await self.runner.ready(timeout=self.command_timeout)
        except TimeoutError:
            self._unsubmitted.add(spec.pool_id)
            raise SlurmUnreachable(f"{self.runner.where}: not reached within {self.command_timeout:g} s") from None
        except BaseException:
            self._unsubmitted.add(spec.pool_id)
            raise
        # shielded (and bounded by command_timeout): a cancellation must not lose the id of a job that
        # sbatch created; it is delivered right after, and the caller terminates the handles
        with anyio.CancelScope(shield=True):
            try:
                out = (await self._run(*argv)).stdout
            except SlurmUnreachable:
                await self._cancel_by_name(spec.pool_id)  # the job may exist although sbatch did not say
                raise
            except SlurmError as exc:
                raise type(exc)(f"Slurm refused the allocation for pool {spec.pool_id} ({len(nodes)} nodes): "
                                f"{exc}") from None
        job_id = out.strip().split(";")[0]
        if not job_id.isdigit():
            raise SlurmError(f"sbatch printed {out.strip()!r}, not a job id")
        log.info("pool %s: Slurm job %s submitted for %d nodes", spec.pool_id, job_id, len(nodes))
        self._jobs[job_id] = _Job(lock=anyio.Lock(), count=len(nodes), released=set())
        kind, per_node = _gpus_in(gres_for(spec.accelerator, self.gres))
        model = spec.accelerator.partition(":")[0] if spec.accelerator else (kind.upper() if kind else None)
        model = None if is_generic(model) else model  # "gpu:2": GPUs of whatever model the node has
        return [
            NodeHandle(node=i, provider_id=f"slurm:{job_id}:{pos}", private_addr="", state="PENDING",
                       reach=self._reach(job_id, ""), accelerators=per_node, accelerator=model,
                       extra={"job_id": job_id, "position": pos, "job_name": job_name(spec.pool_id)})
            for pos, i in enumerate(nodes)
        ]

    def _reach(self, job_id: str, node_name: str) -> SlurmReach:
        login = None
        if isinstance(self.runner, SSHRunner):
            r = self.runner
            login = SSHReach(host=r.host, port=r.port, user=r.user, key=self.key, known_hosts=self.known_hosts,
                             host_key=r.host_key, python=self.python)
        python = self.python or (None if self.login else sys.executable)
        return SlurmReach(job_id=job_id, node_name=node_name, python=python, cwd=self.cwd, login=login)

    async def wait_running(self, handle: NodeHandle, report: Callable[[str], None]) -> NodeHandle:
        """Wait until the node's job runs (declared in `Provider.wait_running`); `report` gets
        "pending (<reason>)" as Slurm's reason changes, then "running"."""
        job_id = str(handle.extra["job_id"])
        job = self._jobs.setdefault(job_id, _Job(lock=anyio.Lock()))
        assert job.lock is not None
        seen = ""
        deadline = time.monotonic() + self.pending_timeout
        delay = 0.02  # most jobs on an idle cluster run within a second: look often at first
        while True:
            async with job.lock:  # the job's nodes share one squeue: whoever comes first asks
                if job.nodes is None and time.monotonic() - job.polled >= delay / 2:
                    await self._poll(job_id, job)
                    job.polled = time.monotonic()
            shown = "running" if job.nodes is not None else (
                f"{job.state.lower()} ({job.reason})" if job.reason and job.reason != "None" else job.state.lower())
            if shown != seen:
                seen = shown
                log.info("Slurm job %s, node %d: %s", job_id, handle.node, shown)
                report(shown)
            if job.nodes is not None:
                break
            if job.state == "PENDING" and job.reason in UNSATISFIABLE:
                raise SlurmError(f"Slurm will never start job {job_id}: it is pending with reason "
                                 f"{job.reason!r} ({UNSATISFIABLE[job.reason]})", node=handle.node)
            if job.state in _ENDED or job.state == "GONE":
                raise SlurmError(f"Slurm job {job_id} ended before it ran ({job.state}"
                                 + (f", reason {job.reason}" if job.reason else "") + ")", node=handle.node)
            if time.monotonic() > deadline:
                raise SlurmError(f"Slurm job {job_id} was still {shown} after pending_timeout="
                                 f"{self.pending_timeout:g} s", node=handle.node)
            await anyio.sleep(delay)
            delay = min(delay * 2, self.poll_interval)
        pos = int(handle.extra["position"])
        if pos >= len(job.nodes):
            raise ProvisionError(f"Slurm job {job_id} has {len(job.nodes)} nodes, not {pos + 1}")
        name, addr = job.nodes[pos]
        return replace(handle, private_addr=addr, state="RUNNING", reach=replace(handle.reach, node_name=name))

    async def _poll(self, job_id: str, job: _Job) -> None:
        try:
            done = await self._run("squeue", "-h", "-j", job_id, "-o", "%T|%r|%N", check=False)
        except SlurmUnreachable as exc:
            log.warning("Slurm job %s: %s (polling again)", job_id, exc)
            return
        line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        if done.status != 0 and "Invalid job id" not in done.stderr:
            done.check(self.runner.where)
        if not line:
            job.state, job.reason = "GONE", "no longer listed by squeue (cancelled, or ended)"
            return
        job.state, job.reason, nodelist = (line.split("|") + ["", ""])[:3]
        if job.state == "RUNNING" and nodelist:
            job.nodes = await self._nodes(nodelist)

    async def _nodes(self, nodelist: str) -> list[tuple[str, str]]:
        """(node name, NodeAddr) of each node of a Slurm node list, in Slurm's order."""
        names = (await self._run("scontrol", "show", "hostnames", nodelist)).stdout.split()
        out = (await self._run("scontrol", "-o", "show", "node", nodelist)).stdout
        addrs: dict[str, str] = {}
        for line in out.splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            if "NodeName" in fields:
                addrs[fields["NodeName"]] = fields.get("NodeAddr") or fields["NodeName"]
        return [(n, addrs.get(n, n)) for n in names]

    async def node_problem(self, handle: NodeHandle) -> str | None:
        """Whether the node is lost (declared in `Provider.node_problem`): in Mode 1 its slurmd refusing
        connections at its NodeAddr; else the controller's verdict, a node that does not respond (its
        slurmd is gone) or is down, named with Slurm's state and reason; see `slurm_health`."""
        reach = handle.reach
        if not isinstance(reach, SlurmReach) or not reach.node_name:
            return None
        return await self._health.problem(reach.node_name, handle.private_addr)

    async def terminate(self, handles: Sequence[NodeHandle]) -> None:
        """Give these nodes back (declared in `Provider.terminate`). The allocation is one job: it is
        cancelled (`scancel`) once every node this provider launched in it has been terminated (at
        once or one by one, as the pool's node actors do), or at once for handles of a job it did not
        launch (`list_owned`, `skyhive down`); then this waits, at most `terminate_timeout` s, until
        Slurm no longer lists it, or lists it as COMPLETING only on nodes `node_problem` named lost
        (Slurm drops it once its controller marks them DOWN). A job already gone is fine. Raises
        `SlurmError` naming a job Slurm still lists after that."""
        by_job: dict[str, set[int]] = {}
        for h in handles:
            job_id = str(h.extra.get("job_id") or h.provider_id.split(":")[1])
            by_job.setdefault(job_id, set()).add(int(h.extra.get("position", 0)))
        jobs = []
        for job_id, positions in sorted(by_job.items()):
            job = self._jobs.get(job_id)
            if job is not None and job.count and job.released is not None:
                job.released |= positions
                if len(job.released) < job.count:
                    log.info("Slurm job %s: node(s) %s released; the allocation stays until all %d are",
                             job_id, sorted(positions), job.count)
                    continue
            jobs.append(job_id)
        if not jobs:
            return
        with anyio.CancelScope(shield=True):
            await self._run("scancel", *jobs, check=False)
            deadline = time.monotonic() + self.terminate_timeout
            left = jobs
            while left:
                done = await self._run("squeue", "-h", "-j", ",".join(left), "-o", "%i|%T|%N", check=False)
                listed = [ln.split("|") for ln in done.stdout.split() if ln.count("|") == 2]
                left = [job_id for job_id, _, _ in listed]
                if not left or await self._only_on_lost_nodes(listed):
                    break
                if time.monotonic() > deadline:
                    raise SlurmError(f"Slurm still lists job(s) {', '.join(left)} {self.terminate_timeout:g} s "
                                     "after scancel")
                await anyio.sleep(0.1)
            for job in jobs:
                self._jobs.pop(job, None)
            log.info("Slurm job(s) %s cancelled", ", ".join(jobs))

    async def _only_on_lost_nodes(self, listed: list[list[str]]) -> bool:
        """Whether every job squeue still lists (id, state, nodes) after scancel is COMPLETING only on
        nodes named lost by `node_problem` (their slurmd is gone: nothing of the job runs there, the
        worker was ended through its input). Slurm keeps such a job until its controller marks the
        node DOWN (SlurmdTimeout later, 300 s by default), which no close should wait for."""
        if not self._health.lost or any(state != "COMPLETING" or not nodes for _, state, nodes in listed):
            return False
        for job_id, _, nodes in listed:
            names = set((await self._run("scontrol", "show", "hostnames", nodes)).stdout.split())
            if not names or not names <= self._health.lost:
                return False
            log.warning("Slurm job %s is cancelled; Slurm lists it as COMPLETING on lost node(s) %s until "
                        "its controller marks them DOWN", job_id, ", ".join(sorted(names)))
        return True

    async def list_owned(self, pool_id: str) -> list[NodeHandle]:
        """The pool's job(s), found by name among this user's jobs (declared in `Provider.list_owned`)."""
        if pool_id in self._unsubmitted:  # this provider's launch never reached Slurm: nothing was made
            return []
        done = await self._run("squeue", "-h", "--me", "-n", job_name(pool_id), "-o", "%i|%T|%N")
        handles = []
        for line in done.stdout.split():
            job_id, state, _nodes = (line.split("|") + ["", ""])[:3]
            handles.append(NodeHandle(node=0, provider_id=f"slurm:{job_id}:0", private_addr="", state=state,
                                      reach=self._reach(job_id, ""),
                                      extra={"job_id": job_id, "position": 0, "job_name": job_name(pool_id)}))
        return handles

    async def cleanup(self, pool_id: str) -> None:
        """Close the SSH connection to the login node, if any (declared in `Provider.cleanup`): the
        allocation itself goes with `terminate`. (A later pool reconnects.)"""
        await self.runner.close()

    async def _cancel_by_name(self, pool_id: str) -> None:
        try:
            await self._run("scancel", "--me", f"--name={job_name(pool_id)}", check=False)
        except SlurmError as exc:
            log.error("pool %s: could not cancel its Slurm job by name (%s); `skyhive down %s` will",
                      pool_id, exc, pool_id)

    async def owned_summary(self, pool_id: str) -> str | None:
        """"job 12 RUNNING" for each of the pool's jobs Slurm still lists, or "no job" (declared in
        `Provider.owned_summary`; one `squeue`)."""
        handles = await self.list_owned(pool_id)
        return ", ".join(f"job {h.extra['job_id']} {h.state}" for h in handles) or "no job"

    def describe(self) -> dict[str, Any]:
        return {"provider": self.name, "partition": self.partition, "account": self.account, "qos": self.qos,
                "time_limit": self.time_limit, "gres": self.gres, "constraint": self.constraint,
                "login": self.login, "key": self.key, "known_hosts": self.known_hosts, "python": self.python,
                "cwd": self.cwd, "pending_timeout": self.pending_timeout, "sbatch_args": list(self.sbatch_args)}
