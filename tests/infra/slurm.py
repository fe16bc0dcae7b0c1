"""A real Slurm cluster on one machine: munged, slurmctld and N slurmd nodes in network namespaces.

Needs root and the Slurm packages (``bash .ci/system-deps.sh`` installs them). Layout of one
:class:`SlurmCluster` (``TOKEN`` is random, recorded with our pid):

- directory ``/tmp/skyslurm-<TOKEN>`` (0755): ``slurm.conf`` and ``gres.conf``, the controller's state,
  each node's spool, the daemons' logs, a private munged (its own key and socket, run as ``munge``),
  the fake GPUs (``dev/<node>/nvidiaN``: character devices 195:N made with mknod; nothing opens them,
  Slurm only needs ``File=`` to be one to set ``CUDA_VISIBLE_DEVICES``);
- bridge ``skysb<TOKEN>`` with ``10.214.X.1/24`` (``X``: the first free /24, so parallel runs differ;
  distinct from :mod:`tests.infra.netns`'s 10.213.0.0/16);
- the controller in the root network namespace on the bridge address and a free port, in its own
  UTS namespace (hostname ``skyslurm-ctl``);
- node ``i`` (1-based): network namespace ``skyslurm-<TOKEN>-<i>``, address ``10.214.X.(i+1)``, hostname
  ``skyslurm-n<i>``. Its slurmd enters the namespace with ``nsenter --net`` (not ``ip netns exec``, which
  remounts /sys and breaks slurmd's cgroup plugin), in its own UTS namespace and its own mount namespace
  where ``/etc/hosts`` maps every node's hostname (gloo resolves its own hostname);
- partition ``debug`` (default) with every node; each node declares ``gpus`` GPUs of type ``a100``.
- optionally a login host (:meth:`SlurmCluster.add_login_host`): namespace ``skyslurm-<TOKEN>-login`` on
  the same bridge with a real sshd (:class:`tests.infra.sshd.Sshd`), whose ``/etc/slurm`` (the
  ``ip netns exec`` bind mount of ``/etc/netns/<ns>/slurm``) holds this cluster's configuration.

Clients find the cluster through ``SLURM_CONF`` (:attr:`SlurmCluster.env`). One cluster at a time on
the machine (a file lock held for its lifetime: the daemons are CPU-hungry on a 2-core machine).
Everything is recorded under ``/run/skyhive-slurm`` so that the next run removes what a killed run left
(:func:`cleanup_stale`); :meth:`SlurmCluster.close` is idempotent and also runs after a failed set-up.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from .netns import ETC_NETNS, _ip, _netns_pids, _starttime
from .slurm_records import (
    BRIDGE_PREFIX,
    PREFIX,
    STATE_DIR,
    VETH_PREFIX,
    check_slurm_support,
    cleanup_stale,
    leftovers,
    pick_subnet,
    slurm_lock,
    teardown,
)
from .sshd import SshTestEnv, Sshd, find_free_port, infra_lock, process_alive

__all__ = ["SlurmCluster", "SlurmNode", "LoginHost", "check_slurm_support", "cleanup_stale", "leftovers",
           "slurm_lock"]


@dataclass
class SlurmNode:
    """One slurmd host: its Slurm node name (= hostname), namespace and address."""

    index: int  # 1-based
    name: str
    netns: str
    address: str
    veth: str
    proc: subprocess.Popen | None = field(default=None, repr=False)

    def pids(self) -> list[int]:
        """Every process in this node's network namespace (slurmd, slurmstepd, tasks)."""
        return _netns_pids(self.netns)


@dataclass
class LoginHost:
    """A login node: its own namespace on the cluster's bridge with a real sshd."""

    netns: str
    address: str
    veth: str
    sshd: Sshd = field(repr=False)

    def pids(self) -> list[int]:
        return _netns_pids(self.netns)


def _controller_port() -> int:
    """A port for slurmctld that nothing uses on any address now, below the kernel's ephemeral range
    (32768-60999 by default), so no client's outgoing connection is handed it before slurmctld binds it
    (a port found by binding port 0 is an ephemeral one: any connection may take it meanwhile)."""
    import random
    import socket

    for _ in range(200):
        port = random.randint(20000, 32000)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port
    return find_free_port("0.0.0.0")


class SlurmCluster:
    """A controller and `nodes` slurmd nodes, each with `gpus` fake GPUs. See the module docstring.

    Use as a context manager, or :meth:`create` then :meth:`close` (always, also after a failed create).
    """

    partition = "debug"
    gpu_type = "a100"

    def __init__(self, nodes: int = 2, *, gpus: int = 2, cpus: int | None = None, start_timeout: float = 30.0) -> None:
        if not 1 <= nodes <= 50:
            raise ValueError(f"nodes must be between 1 and 50, not {nodes}")
        self.count = nodes
        self.gpus = gpus
        self.cpus = cpus or os.cpu_count() or 1
        self.start_timeout = start_timeout
        self.token = secrets.token_hex(3)[:5]
        self.bridge = f"{BRIDGE_PREFIX}{self.token}"
        self.dir = Path(f"/tmp/{PREFIX}{self.token}")
        self.conf = self.dir / "etc" / "slurm.conf"
        self.munge_socket = self.dir / "munge" / "munge.socket"
        self.bridge_address = ""
        self.port = 0
        self.nodes: list[SlurmNode] = []
        self.login: LoginHost | None = None
        self._ctld: subprocess.Popen | None = None
        self._munged: subprocess.Popen | None = None
        self._record: dict | None = None
        self._lock: contextlib.ExitStack | None = None

    def __repr__(self) -> str:
        return f"<SlurmCluster {self.token} {self.bridge_address} nodes={[n.name for n in self.nodes]}>"

    def __enter__(self) -> SlurmCluster:
        try:
            self.create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def env(self) -> dict[str, str]:
        """Environment for Slurm client commands on this machine."""
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True, timeout: float = 30, **kw) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster (``run("squeue", "-h")``)."""
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("stdin", subprocess.DEVNULL)
        proc = subprocess.run(list(argv), env={**os.environ, **self.env}, timeout=timeout, **kw)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed (exit {proc.returncode}): {proc.stderr.strip()}")
        return proc

    def jobs(self) -> list[tuple[str, str, str]]:
        """(job id, name, state) of every job the controller still lists as not finished."""
        out = self.run("squeue", "-h", "-o", "%i|%j|%T").stdout
        return [tuple(line.split("|", 2)) for line in out.splitlines() if line.strip()]  # type: ignore[misc]

    def node_processes(self) -> dict[str, list[int]]:
        """Processes in the node namespaces other than slurmd itself: job steps and their tasks."""
        daemons = {n.proc.pid for n in self.nodes if n.proc is not None}
        return {n.name: [p for p in n.pids() if p not in daemons] for n in self.nodes}

    def worker_processes(self) -> dict[str, list[int]]:
        """skyhive worker processes in the node namespaces, by node name."""
        found: dict[str, list[int]] = {}
        for node, pids in self.node_processes().items():
            for pid in pids:
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                except OSError:
                    continue
                if b"skyhive.runtime.worker" in cmd and process_alive(pid):
                    found.setdefault(node, []).append(pid)
        return found

    @staticmethod
    def describe_processes(procs: dict[str, list[int]]) -> dict[str, list[str]]:
        """{node: ["pid: command line"]} for a report."""
        def cmd(pid: int) -> str:
            try:
                return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:300]
            except OSError:
                return "(gone)"
        return {node: [f"{p}: {cmd(p)}" for p in pids] for node, pids in procs.items()}

    def wait_clean(self, timeout: float = 15.0) -> tuple[list, dict]:
        """Wait until no job is listed and no process but slurmd runs in any node namespace; returns
        what is still there at the timeout ((jobs, {node: pids})): both empty when clean."""
        deadline = time.monotonic() + timeout
        while True:
            jobs = self.jobs()
            procs = {k: [p for p in v if process_alive(p)] for k, v in self.node_processes().items()}
            procs = {k: v for k, v in procs.items() if v}
            if (not jobs and not procs) or time.monotonic() > deadline:
                return jobs, procs
            time.sleep(0.1)

    def log(self, name: str) -> str:
        path = self.dir / "log" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # -- set-up -----------------------------------------------------------------------------

    def create(self) -> SlurmCluster:
        check_slurm_support()
        self._lock = contextlib.ExitStack()
        self._lock.enter_context(slurm_lock())
        cleanup_stale()
        names = [f"{PREFIX}{self.token}-{i}" for i in range(1, self.count + 1)]
        veths = [f"{VETH_PREFIX}{self.token}-{i}" for i in range(1, self.count + 1)]
        self.dir.mkdir(mode=0o755)
        self.dir.chmod(0o755)
        self._record = {"token": self.token, "pid": os.getpid(), "starttime": _starttime(os.getpid()),
                        "bridge": self.bridge, "netns": names, "veths": veths, "dir": str(self.dir),
                        "daemons": []}
        self._save_record()
        with infra_lock():  # namespace creation races on bridges and subnets (shared with netns.py)
            net = pick_subnet()
            self.bridge_address = f"{net}.1"
            _ip("link", "add", self.bridge, "type", "bridge", "forward_delay", "0")
            _ip("addr", "add", f"{self.bridge_address}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i, (ns, veth) in enumerate(zip(names, veths, strict=True), start=1):
                address = f"{net}.{i + 1}"
                self._add_namespace(ns, veth, address)
                self.nodes.append(SlurmNode(i, f"skyslurm-n{i}", ns, address, veth))
        self._net = net
        self.port = _controller_port()
        self._write_files()
        self._start_munged()
        self._start_controller()
        for node in self.nodes:
            self._start_slurmd(node)
        self._wait_idle()
        return self

    def _add_namespace(self, ns: str, veth: str, address: str) -> None:
        _ip("netns", "add", ns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("link", "set", veth, "master", self.bridge, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")

    def _save_record(self) -> None:
        STATE_DIR.mkdir(mode=0o755, exist_ok=True)
        (STATE_DIR / f"{self.token}.json").write_text(json.dumps(self._record))

    def _daemon(self, proc: subprocess.Popen) -> None:
        assert self._record is not None
        self._record["daemons"].append([proc.pid, _starttime(proc.pid)])
        self._save_record()

    def _write_files(self) -> None:
        d = self.dir
        for sub in ("etc", "state", "spool", "log", "dev"):
            (d / sub).mkdir(mode=0o755)
        hosts = ["127.0.0.1\tlocalhost", f"{self.bridge_address}\tskyslurm-ctl"]
        hosts += [f"{n.address}\t{n.name}" for n in self.nodes]
        (d / "etc" / "hosts").write_text("\n".join(hosts) + "\n")
        gres = []
        node_lines = []
        for n in self.nodes:
            dev = d / "dev" / n.name
            dev.mkdir(mode=0o755)
            for g in range(self.gpus):
                subprocess.run(["mknod", str(dev / f"nvidia{g}"), "c", "195", str(g)], check=True)
            if self.gpus:
                gres.append(f"NodeName={n.name} Name=gpu Type={self.gpu_type} "
                            f"File={dev}/nvidia[0-{self.gpus - 1}]" if self.gpus > 1 else
                            f"NodeName={n.name} Name=gpu Type={self.gpu_type} File={dev}/nvidia0")
            gres_word = f" Gres=gpu:{self.gpu_type}:{self.gpus}" if self.gpus else ""
            node_lines.append(f"NodeName={n.name} NodeAddr={n.address} CPUs={self.cpus}{gres_word} State=UNKNOWN")
        conf = f"""\
ClusterName=skyslurm{self.token}
SlurmctldHost=skyslurm-ctl({self.bridge_address})
SlurmctldPort={self.port}
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/state/slurmctld.pid
SlurmdPidFile={d}/spool/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=2
MinJobAge=2
InactiveLimit=0
MessageTimeout=10
SlurmctldTimeout=30
SlurmdTimeout=30
SchedulerParameters=sched_interval=1
{chr(10).join(node_lines)}
PartitionName={self.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
        self.conf.write_text(conf)
        (d / "etc" / "gres.conf").write_text("\n".join(gres) + "\n")
        for p in (d / "etc").iterdir():
            p.chmod(0o644)

    def _popen(self, argv: list[str], log_name: str) -> subprocess.Popen:
        with open(self.dir / "log" / f"{log_name}.out", "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, env={**os.environ, **self.env})
        self._daemon(proc)
        return proc

    def _start_munged(self) -> None:
        mdir = self.munge_socket.parent
        mdir.mkdir(mode=0o755)
        key = mdir / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o600)
        munge = pwd.getpwnam("munge")
        for p in (mdir, key):
            os.chown(p, munge.pw_uid, munge.pw_gid)
        self._munged = self._popen(
            ["setpriv", f"--reuid={munge.pw_uid}", f"--regid={munge.pw_gid}", "--clear-groups", "munged", "-F", f"--socket={self.munge_socket}", f"--key-file={key}",
             f"--pid-file={mdir}/munged.pid", f"--log-file={mdir}/munged.log", f"--seed-file={mdir}/munged.seed"],
            "munged")
        self._wait(lambda: self.munge_socket.exists(), "munged's socket", self._munged)

    def _start_controller(self) -> None:
        """slurmctld on `self.port`; if another process took that port meanwhile (it binds every
        address: cx17 saw "Address already in use" once in a loaded whole-suite run), a new port, twice."""
        script = 'echo "$0" > /proc/sys/kernel/hostname && exec "$@"'

        def answers() -> bool:
            return self.run("scontrol", "ping", check=False, timeout=10).stdout.find("UP") >= 0

        for attempt in range(3):
            seen = len(self.log("slurmctld"))
            self._ctld = self._popen(["unshare", "--uts", "--", "sh", "-c", script, "skyslurm-ctl",
                                      "slurmctld", "-D", "-f", str(self.conf)], "slurmctld")
            try:
                self._wait(answers, "slurmctld (scontrol ping)", self._ctld)
                return
            except RuntimeError:
                taken = "Address already in use" in self.log("slurmctld")[seen:]
                if attempt == 2 or not taken or self._ctld.poll() is None:
                    raise
            old, self.port = self.port, _controller_port()
            self.conf.write_text(self.conf.read_text().replace(f"SlurmctldPort={old}\n", f"SlurmctldPort={self.port}\n"))

    def _start_slurmd(self, node: SlurmNode) -> None:
        hosts = self.dir / "etc" / "hosts"
        script = ('echo "$0" > /proc/sys/kernel/hostname && mount --bind "$1" /etc/hosts && shift && exec "$@"')
        node.proc = self._popen(
            ["nsenter", f"--net=/run/netns/{node.netns}", "--", "unshare", "--uts", "--mount", "--propagation",
             "private", "--", "sh", "-c", script, node.name, str(hosts),
             "slurmd", "-D", "-N", node.name, "-f", str(self.conf)], f"slurmd-{node.name}-out")

    def _wait_idle(self) -> None:
        want = {n.name for n in self.nodes}

        def idle() -> bool:
            for n in self.nodes:
                if n.proc is not None and n.proc.poll() is not None:
                    raise RuntimeError(f"slurmd {n.name} exited ({n.proc.returncode}): "
                                       f"{self.log('slurmd-' + n.name)[-2000:]}"
                                       f"{self.log('slurmd-' + n.name + '-out')[-2000:]}")
            out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout
            states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
            return want <= set(states) and all(states[n] == "idle" for n in want)

        self._wait(idle, "every slurmd to register idle", self._ctld)

    def _wait(self, ready, what: str, proc: subprocess.Popen | None) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not ready():
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"waiting for {what}: the daemon exited ({proc.returncode}); logs in {self.dir}/log: "
                                   + self.log("slurmctld")[-2000:])
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {what} within {self.start_timeout:g} s; logs in {self.dir}/log")
            time.sleep(0.05)

    def add_login_host(self, env: SshTestEnv) -> LoginHost:
        """A login host on the cluster's bridge running a real sshd (the test user logs in with the
        test key), with this cluster's configuration as its ``/etc/slurm``."""
        assert self._record is not None and self.login is None
        ns, veth = f"{PREFIX}{self.token}-login", f"{VETH_PREFIX}{self.token}-l"
        self._record["netns"].append(ns)
        self._record["veths"].append(veth)
        self._save_record()
        address = f"{self._net}.250"
        with infra_lock():
            self._add_namespace(ns, veth, address)
        etc = ETC_NETNS / ns
        (etc / "slurm").mkdir(parents=True, mode=0o755)
        shutil.copy(self.conf, etc / "slurm" / "slurm.conf")
        shutil.copy(self.dir / "etc" / "gres.conf", etc / "slurm" / "gres.conf")
        shutil.copy(self.dir / "etc" / "hosts", etc / "hosts")
        for p in [etc, *etc.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        host_dir = self.dir / "login"
        host_dir.mkdir(mode=0o755)
        sshd = Sshd(env, host=address, port=22, directory=host_dir, netns=ns, hostname="skyslurm-login",
                    home=env.user.home)
        self.login = LoginHost(ns, address, veth, sshd)
        sshd.start()
        self._daemon_pid(sshd.pid)
        return self.login

    def _daemon_pid(self, pid: int | None) -> None:
        if pid is not None and self._record is not None:
            self._record["daemons"].append([pid, _starttime(pid)])
            self._save_record()

    # -- tear-down --------------------------------------------------------------------------

    def close(self, timeout: float = 5.0) -> None:
        """Cancel every job, stop the daemons (by pid), kill what is left in the namespaces, remove
        namespaces, links, /etc/netns entries and the directory; check nothing is left. Idempotent."""
        errors: list[str] = []
        try:
            if self._ctld is not None and self._ctld.poll() is None:
                self.run("scancel", "--full", "--quiet", "-u", "root", check=False, timeout=10)
                for user in {pwd.getpwuid(os.getuid()).pw_name} | ({self.login.sshd.user} if self.login else set()):
                    self.run("scancel", "--quiet", "-u", user, check=False, timeout=10)
            if self.login is not None:
                try:
                    self.login.sshd.stop(timeout)
                except Exception as e:  # keep tearing down; report at the end
                    errors.append(f"login sshd: {e}")
            procs = [n.proc for n in self.nodes if n.proc is not None] + [self._ctld, self._munged]
            live = [p for p in procs if p is not None and p.poll() is None]
            for p in live:
                p.send_signal(signal.SIGTERM)
            for p in live:
                try:
                    p.wait(timeout)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout)
            if self._record is not None:
                with infra_lock():
                    errors += teardown(self._record, timeout)
                    deadline = time.monotonic() + timeout
                    while leftovers(self.token) and time.monotonic() < deadline:
                        time.sleep(0.02)
                        errors = [e for e in errors if "left behind" not in e] + teardown(self._record, timeout)
                    left = leftovers(self.token)
                    if left:
                        errors.append(f"left behind: {left}")
                if not errors:
                    (STATE_DIR / f"{self.token}.json").unlink(missing_ok=True)
                    with contextlib.suppress(OSError):
                        STATE_DIR.rmdir()
                    self._record = None
        finally:
            self.nodes = []
            self.login = None
            if self._lock is not None:
                self._lock.close()
                self._lock = None
        if errors:
            raise RuntimeError(f"tear-down of Slurm test cluster {self.token} incomplete: " + "; ".join(errors))


def _main() -> None:  # python -m tests.infra.slurm [--cleanup | --up SECONDS]
    import argparse

    ap = argparse.ArgumentParser(description="skyhive Slurm test cluster")
    ap.add_argument("--cleanup", action="store_true", help="remove leftovers of runs that are gone")
    ap.add_argument("--up", type=float, metavar="SECONDS", help="start a cluster and keep it this long")
    args = ap.parse_args()
    if args.cleanup:
        print("cleaned:", cleanup_stale())
    elif args.up:
        with SlurmCluster() as cluster:
            print(f"export SLURM_CONF={cluster.conf}", flush=True)
            time.sleep(args.up)
    print("\n".join(leftovers()) or "nothing of ours")


if __name__ == "__main__":
    _main()
