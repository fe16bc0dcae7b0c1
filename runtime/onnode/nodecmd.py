"""The node side of `skyhive launch`: functions the workers run (standard library only).

`prepare` gives each node its working directory with the task's workdir unpacked into it (over what
an earlier job left there: a named pool's `exec` finds what `launch -c` shipped and `setup` made, as
SkyPilot keeps `~/sky_workdir`); `run_script` runs `setup` or `run` there as a bash subprocess (the script
read from a private file, never an argument) with the
SkyPilot-style environment, after sourcing `~/.bashrc` as SkyPilot's scripts do, and returns its exit
code.

Nodes that share this machine with the user (Local) each get a home of their own (`node_home`), so a
task behaves as on a fresh machine and leaves the user's files alone: `HOME` is that directory, the
workdir is `~/sky_workdir` in it, and `~/...` file mounts land there. The subprocess writes to the worker's file descriptors 1 and 2, which the
worker forwards to the client as the task's output, live.

A cancelled task (Ctrl-C on the client, or another node failed) stops the script and every process
it started: SIGTERM, a grace period, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ...paths import private_dir, state_dir
from .instance import instance_info
from .nodeprep import extract
from .pyenv import pool_env, uses_pool_env
from ..common.procfs import proc_stat

__all__ = ["work_root", "node_home", "prepare", "remove", "node_env", "run_script", "script_file", "stop_descendants", "GRACE",
           "WORKDIR_NAME", "BASHRC_PRELUDE"]

#: The workdir's name in a node's own home (SkyPilot's `~/sky_workdir`).
WORKDIR_NAME = "sky_workdir"
#: What runs before `setup` and `run`: the node's `~/.bashrc`, as SkyPilot's task scripts start
#: (`source ~/.bashrc`), so a variable `setup` exported there is set in `run`.
BASHRC_PRELUDE = 'if [ -f "$HOME/.bashrc" ]; then . "$HOME/.bashrc"; fi\n'


#: How long a stopped script's processes get between SIGTERM and SIGKILL (below the pool's cancel_grace).
GRACE = 3.0


def work_root(pool_id: str) -> Path:
    """Where a pool's per-node working directories live on a node."""
    return state_dir() / "work" / pool_id


def node_home(pool_id: str) -> Path:
    """This node's own home for pool `pool_id` (created 0700 where missing): `HOME` of its scripts."""
    return private_dir("work", pool_id, f"node-{instance_info().node}")


def prepare(pool_id: str, archive: bytes | None, own_home: bool = False) -> str:
    """This node's working directory, `archive` (a tar.gz of the workdir) unpacked into it. With
    `own_home` it is `node_home(pool_id)/sky_workdir`, else `work/POOL/node-N` (a machine's nodes share
    it). What is there already stays (an earlier job's workdir and what its setup made, as SkyPilot's
    `~/sky_workdir` stays between `launch -c` and `exec`); the archive's files replace theirs."""
    if own_home:
        path = node_home(pool_id) / WORKDIR_NAME
    else:
        path = private_dir("work", pool_id) / f"node-{instance_info().node}"
    path.mkdir(mode=0o700, exist_ok=True)
    if archive:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            extract(tar, str(path))
    return str(path)


def remove(pool_id: str) -> None:
    shutil.rmtree(work_root(pool_id), ignore_errors=True)


def node_env(task_id: str, *, phase: str, cluster_info: str = "", num_nodes: int = 0) -> dict[str, str]:
    """The variables SkyPilot documents for `setup` and `run`, under both the SKYPILOT_* and the SKYHIVE_*
    names: NODE_RANK, NODE_IPS (one per line, head first), NUM_NODES, NUM_GPUS_PER_NODE, TASK_ID,
    CLUSTER_INFO (JSON: cluster_name, cloud, region, zone) and, during setup, SETUP_NODE_RANK and
    SETUP_NODE_IPS. `num_nodes` (a job on the first N nodes of a named pool): those N are the cluster."""
    info = instance_info()
    total = num_nodes or info.total_nodes
    ips = "\n".join(p.addr for p in sorted(info.peers, key=lambda p: p.node) if p.node < total)
    values = {
        "NODE_IPS": ips,
        "NODE_RANK": str(info.node),
        "NUM_NODES": str(total),
        "NUM_GPUS_PER_NODE": str(info.accelerators),
        "TASK_ID": task_id,
    }
    if cluster_info:
        values["CLUSTER_INFO"] = cluster_info
    if phase == "setup":  # SkyPilot's names during setup
        values["SETUP_NODE_IPS"] = ips
        values["SETUP_NODE_RANK"] = str(info.node)
    env = {f"{prefix}_{k}": v for prefix in ("SKYHIVE", "SKYPILOT") for k, v in values.items()}
    env["SKYHIVE_HEAD_PORT"] = str(info.head_port)  # a free port on the head (Local nodes share an address)
    return env


def run_script(cwd: str, script: str, task_id: str, phase: str, cluster_info: str = "",
               task_env: dict[str, str] | None = None, num_nodes: int = 0, own_home: bool = False) -> int:
    """Run `script` with bash in `cwd`, after sourcing `~/.bashrc`; its exit code (128+N if killed by
    signal N). `task_env` is the task's own variables for this script only (a named pool's job: its
    workers outlive the job); `num_nodes` a job on the pool's first N nodes (`node_env`); `own_home`:
    `cwd` is `~/sky_workdir` in the node's own home (`prepare`), which is the script's `HOME`."""
    env = {**os.environ, **(task_env or {}), "PYTHONUNBUFFERED": os.environ.get("PYTHONUNBUFFERED", "1"),
           **node_env(task_id, phase=phase, cluster_info=cluster_info, num_nodes=num_nodes)}
    if own_home:
        env["HOME"] = str(Path(cwd).parent)
        env["SKYHIVE_HOME"] = str(state_dir())  # a `skyhive` command in the script still finds this machine's pools
        import site

        if site.ENABLE_USER_SITE and "PYTHONUSERBASE" not in env and site.USER_BASE and os.path.isdir(
                site.getusersitepackages()):
            # the packages this Python sees in the user's ~/.local stay visible to the task's `python`
            # (a venv, the usual case, has no user site)
            env["PYTHONUSERBASE"] = site.USER_BASE
    ckpt = env.get("SKYHIVE_CHECKPOINT_DIR")  # on a bucket mount relative to the home: made absolute here
    if ckpt:  # (docs/storage.md)
        home = env.get("HOME") or os.path.expanduser("~")  # the node's own home where it has one
        env["SKYHIVE_CHECKPOINT_DIR"] = os.path.join(home, home + ckpt[1:] if ckpt == "~" or ckpt.startswith("~/")
                                                     else ckpt)
        if env.get("SKYHIVE_JOB_ID"):  # a managed job's folder, made here; another job's only if it asks
            with contextlib.suppress(OSError):  # (`sky.checkpoint_dir()`: an unused one is never put in its bucket)
                os.makedirs(env["SKYHIVE_CHECKPOINT_DIR"], mode=0o700, exist_ok=True)
    # the node's Python environment comes first: `python`, `pip`, `torchrun` are the ones skyhive runs with;
    # on the user's own machine (Local) that is the pool's environment, so that setup cannot change the
    # user's (`pyenv.py`; the task opts out with SKYHIVE_SETUP_ENV=user)
    bindir = os.path.dirname(sys.executable)
    path = env.get("PATH", os.defpath)
    if bindir and bindir not in path.split(os.pathsep):
        path = bindir + os.pathsep + path
    if own_home and uses_pool_env(env):
        made = pool_env(Path(cwd).parent.parent / "python-env")  # (work/POOL/python-env: the pool's nodes share it)
        env["VIRTUAL_ENV"] = str(made)
        env.pop("PYTHONHOME", None)
        path = str(made / "bin") + os.pathsep + path  # its python and pip first; the user's tools (torchrun) next
    env["PATH"] = path
    shell = shutil.which("bash") or "/bin/sh"
    watcher = None
    if phase == "run" and env.get("SKYHIVE_INTERRUPTION_WATCH"):  # a managed job's spot node (interruption.py)
        from .interruption import start_for

        watcher = start_for(env, cwd)
    path = script_file(BASHRC_PRELUDE + script, phase)
    # the script's output is copied by this task's own thread: a worker with task threads (a named
    # pool's jobs side by side) cannot tell by task what lands on its file descriptors 1 and 2
    try:
        proc = subprocess.Popen([shell, path], cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        try:
            _copy_output(proc)
            code = proc.wait()
        except BaseException:  # cancelled (the worker raises TaskCancelled here), or anything else
            stop_descendants(proc.pid, GRACE)
            proc.wait()
            raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        if watcher is not None:
            watcher.stop()
    code = 128 - code if code < 0 else code
    if code and watcher is not None and watcher.seen is not None:  # failed after its node's notice
        from .interruption import AFTER_NOTICE

        code += AFTER_NOTICE
    return code



def _copy_output(proc: subprocess.Popen[bytes]) -> None:
    """What `proc` writes to its stdout and stderr pipes, written to this thread's `sys.stdout` and
    `sys.stderr` as it comes (decoded as UTF-8, bad bytes replaced), until `proc` has exited and what
    it wrote is read. Wakes at least every 0.2 s, so that a cancelled task sees its `TaskCancelled`
    soon. A program the script left running in the background still holds the pipes: what it writes
    later goes on to this process's file descriptors 1 and 2 (the worker's own output, as it went
    before the script's output was copied), from a thread of its own, until it closes them."""
    import codecs
    import selectors

    streams = {proc.stdout: sys.stdout, proc.stderr: sys.stderr}
    decoders = {pipe: codecs.getincrementaldecoder("utf-8")("replace") for pipe in streams}
    with selectors.DefaultSelector() as sel:
        for pipe in streams:
            sel.register(pipe, selectors.EVENT_READ)  # type: ignore[arg-type]
        while sel.get_map():
            exited = proc.poll() is not None
            ready = sel.select(timeout=0 if exited else 0.2)
            if exited and not ready:
                break  # the script is over and nothing more is waiting: the rest is a background program's
            for key, _ in ready:
                pipe = key.fileobj
                data = os.read(key.fd, 65536)
                text = decoders[pipe].decode(data, final=not data)  # type: ignore[index]
                if text:
                    out = streams[pipe]  # type: ignore[index]
                    out.write(text)
                    out.flush()
                if not data:
                    sel.unregister(pipe)
                    pipe.close()  # type: ignore[union-attr]
        left = [(key.fileobj, 1 if key.fileobj is proc.stdout else 2) for key in sel.get_map().values()]
    if left:
        threading.Thread(target=_pass_on, args=(left,), name="skyhive-script-output", daemon=True).start()


def _pass_on(pipes: list[tuple[Any, int]]) -> None:
    """Copy each pipe to its file descriptor (1 or 2) until it closes."""
    import selectors

    with selectors.DefaultSelector() as sel:
        for pipe, fd in pipes:
            sel.register(pipe, selectors.EVENT_READ, fd)
        while sel.get_map():
            for key, _ in sel.select():
                data = os.read(key.fd, 65536)
                if not data:
                    sel.unregister(key.fileobj)
                    key.fileobj.close()  # type: ignore[union-attr]
                    continue
                with contextlib.suppress(OSError):
                    os.write(key.data, data)


def script_file(text: str, phase: str) -> str:
    """A new private file (0600, in the state directory's `scripts/`) holding `text`: a script is run
    from a file, never given as an argument — one argument is limited to 128 KiB (`Argument list too
    long`) and every local user reads a process's arguments (`ps`). The caller removes it."""
    fd, path = tempfile.mkstemp(prefix=f"{phase}-", suffix=".sh", dir=private_dir("scripts"))
    with open(fd, "w", encoding="utf-8", errors="surrogateescape") as fh:  # (the user's bytes as they were)
        fh.write(text)
    return path


def stop_descendants(root: int, grace: float) -> None:
    """SIGTERM `root` and every process it started; SIGKILL what is left after `grace` seconds.

    Children that were orphaned (their parent died, they were re-parented to init) are found through
    the process group when this worker leads one (Local workers do): they are in it, but no longer
    below any process of this worker.
    """
    targets = _tree(root)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in targets:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        if sig == signal.SIGKILL:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            targets = [p for p in targets if _running(p)]
            if not targets:
                return
            time.sleep(0.05)


def _tree(root: int) -> list[int]:
    """`root` and its descendants, deepest first, plus orphans of this worker's process group."""
    me = os.getpid()
    leader = os.getpgrp() == me
    children: dict[int, list[int]] = {}
    group: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = proc_stat(int(entry))
        if stat is None:
            continue
        pid, ppid, pgrp = int(entry), int(stat[1]), int(stat[2])
        children.setdefault(ppid, []).append(pid)
        if leader and pgrp == me and pid != me:
            group.append(pid)

    def below(pid: int) -> list[int]:
        out, stack = [], [pid]
        while stack:
            p = stack.pop()
            out.append(p)
            stack.extend(children.get(p, ()))
        return out

    mine = set(below(me))
    order = below(root)
    order.reverse()  # children before their parents
    return order + [p for p in group if p not in mine]




def _running(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is not None and stat[0] != "Z"
