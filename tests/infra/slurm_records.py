"""Bookkeeping of the Slurm test clusters (`tests/infra/slurm.py`): names, the one-run-at-a-time lock,
the record of what a cluster made (so that the next run removes what a killed run left), the check
that nothing of ours is left, and the choice of a free subnet."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import signal
import time
from pathlib import Path

from .netns import ETC_NETNS, _ip, _link_names, _netns_names, _starttime, _teardown_record, sweep_records
from .sshd import InfraUnavailable, _kill, _wait_gone, _which, process_alive

__all__ = ["PREFIX", "BRIDGE_PREFIX", "VETH_PREFIX", "SUBNET_PREFIX", "STATE_DIR", "LOCK_PATH",
           "check_slurm_support", "slurm_lock", "cleanup_stale", "leftovers", "pick_subnet", "teardown"]

PREFIX = "skyslurm-"
BRIDGE_PREFIX = "skysb"
VETH_PREFIX = "skysv"
SUBNET_PREFIX = "10.214"
STATE_DIR = Path("/run/skyhive-slurm")
LOCK_PATH = "/run/lock/skyhive-slurm.lock" if os.path.isdir("/run/lock") else "/tmp/skyhive-slurm.lock"
BINARIES = ("slurmctld", "slurmd", "sbatch", "srun", "squeue", "scancel", "munged")


def check_slurm_support() -> None:
    """Raise :class:`InfraUnavailable` when a Slurm cluster cannot be built here."""
    if os.geteuid() != 0:
        raise InfraUnavailable("a Slurm test cluster needs root (namespaces, daemons as root)")
    missing = [b for b in BINARIES if _which(b, f"/usr/sbin/{b}", f"/usr/bin/{b}") is None]
    if missing:
        raise InfraUnavailable(f"missing {', '.join(missing)} (as root: bash .ci/system-deps.sh installs "
                               "slurmctld slurmd slurm-client munge)")
    for tool in ("ip", "nsenter", "unshare", "mknod"):
        if _which(tool, f"/usr/sbin/{tool}", f"/usr/bin/{tool}", f"/sbin/{tool}") is None:
            raise InfraUnavailable(f"missing {tool}")
    try:
        pwd.getpwnam("munge")
    except KeyError:
        raise InfraUnavailable("no 'munge' user (the munge package creates it)") from None


_held = 0  # how many clusters of this process hold the lock (a second one in the same run may start)


@contextlib.contextmanager
def slurm_lock(timeout: float = 900.0):
    """One test run with Slurm clusters at a time on this machine (waits up to `timeout` s for another
    run; re-entrant within a process: each cluster has its own subnet, ports, munged and files). The test
    processes of one pytest-xdist run share it (a shared lock: each has clusters of its own, as a process
    may), so their Slurm tests run side by side; a run without xdist still excludes every other run."""
    global _held
    if _held:
        _held += 1
        try:
            yield
        finally:
            _held -= 1
        return
    fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if os.environ.get("PYTEST_XDIST_TESTRUNUID") else fcntl.LOCK_EX)
                            | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"another test run held {LOCK_PATH} (a Slurm test cluster) for "
                                       f"{timeout:g} s") from None
                time.sleep(0.2)
        _held = 1
        try:
            yield
        finally:
            _held = 0
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _owner_alive(rec: dict) -> bool:
    pid = rec.get("pid")
    return isinstance(pid, int) and process_alive(pid) and _starttime(pid) == rec.get("starttime")


def teardown(rec: dict, timeout: float = 5.0) -> list[str]:
    """Stop the daemons a record names (by pid, if still the same process), then remove namespaces,
    links and files (netns.py's teardown). Returns the problems seen."""
    daemons = [p for p, start in rec.get("daemons", []) if process_alive(p) and _starttime(p) == start]
    _kill(daemons, signal.SIGTERM)
    left = _wait_gone(daemons, timeout)
    _kill(left, signal.SIGKILL)
    left = _wait_gone(left, timeout)
    problems = [f"daemons {left} survived SIGKILL"] if left else []
    problems += _teardown_record(rec, timeout=timeout)
    return problems


def cleanup_stale() -> list[str]:
    """Remove what Slurm test runs whose process is gone left behind; the tokens cleaned."""
    return sweep_records(STATE_DIR, _owner_alive, teardown)


def leftovers(token: str | None = None) -> list[str]:
    """Namespaces, links, /etc/netns entries and directories of Slurm test runs (of one run with
    `token`) that exist now."""
    ns_prefix = f"{PREFIX}{token}-" if token else PREFIX
    found = [f"netns {n}" for n in sorted(_netns_names()) if n.startswith(ns_prefix)]
    links = (f"{BRIDGE_PREFIX}{token}", f"{VETH_PREFIX}{token}-") if token else (BRIDGE_PREFIX, VETH_PREFIX)
    found += [f"link {n}" for n in sorted(_link_names()) if n.startswith(links)]
    if ETC_NETNS.is_dir():
        found += [f"{ETC_NETNS}/{p.name}" for p in sorted(ETC_NETNS.iterdir()) if p.name.startswith(ns_prefix)]
    dirs = Path("/tmp").glob(f"{PREFIX}{token}" if token else f"{PREFIX}*")
    found += [f"dir {d}" for d in sorted(dirs) if d.is_dir()]
    return found


def pick_subnet() -> str:
    used = set()
    text = _ip("-4", "-o", "addr", "show", check=False).stdout + _ip("-4", "route", "show", "table", "all",
                                                                       check=False).stdout
    for word in text.replace("/", " ").split():
        parts = word.split(".")
        if word.startswith(SUBNET_PREFIX + ".") and len(parts) == 4 and parts[2].isdigit():
            used.add(int(parts[2]))
    for x in range(256):
        if x not in used:
            return f"{SUBNET_PREFIX}.{x}"
    raise RuntimeError(f"no free /24 left in {SUBNET_PREFIX}.0.0/16 (leftovers? see cleanup_stale())")
