"""Several test hosts on one machine: network namespaces on a private bridge, an sshd in each.

Needs root. Layout of one :class:`NetnsHosts` (``TOKEN`` is random, recorded with our pid):

- bridge ``skyb<TOKEN>`` with ``10.213.X.1/24`` (``X`` = the first /24 of 10.213.0.0/16 no interface uses,
  so parallel runs get distinct subnets; normally ``10.213.0.0/24``);
- host ``i`` (1-based): namespace ``skyhive-<TOKEN>-<i>`` with ``lo`` up and ``eth0`` = ``10.213.X.(i+1)/24``,
  the peer of ``skyv<TOKEN>-<i>`` in the bridge; hostname ``skyhive-node-<i>`` (own UTS namespace for its sshd);
  ``/etc/netns/<ns>/hosts`` maps every node's hostname to its address (gloo resolves its own hostname),
  ``/etc/netns/<ns>/resolv.conf`` has no nameserver; each host's sshd logs in an account of its own whose
  home is that host's directory (no bind-mounted /etc/passwd: see ``sshd.ensure_user``); an sshd on
  ``<address>:22``, the same client key as everywhere.

No default route, no NAT, IPv4 forwarding untouched: the hosts reach only each other and the bridge
address. Creation is serialised with a file lock (it races on bridges and subnets); a record under
``/run/skyhive-netns`` lets the next run remove what a killed run left behind (:func:`cleanup_stale`).
Tear-down (:meth:`NetnsHosts.close`) is idempotent and also runs after a failed set-up.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .sshd import (
    InfraUnavailable,
    SshTestEnv,
    Sshd,
    _kill,
    _proc_stat,
    _wait_gone,
    _which,
    infra_lock,
    make_home,
)

__all__ = [
    "NetnsHost",
    "NetnsHosts",
    "check_netns_support",
    "cleanup_stale",
    "leftovers",
    "NETNS_PREFIX",
    "STATE_DIR",
]

NETNS_PREFIX = "skyhive-"
BRIDGE_PREFIX = "skyb"
VETH_PREFIX = "skyv"
STATE_DIR = Path("/run/skyhive-netns")
ETC_NETNS = Path("/etc/netns")
_UNAVAILABLE_HINTS = (
    "Operation not permitted",
    "Permission denied",
    "not supported",
    "Not supported",
    "Unknown device type",
    "Read-only file system",
)


def check_netns_support() -> None:
    """Raise :class:`InfraUnavailable` when namespace hosts cannot be built here (not root, no ``ip``).
    Missing kernel privileges (e.g. a container without CAP_SYS_ADMIN/CAP_NET_ADMIN) are detected
    when :meth:`NetnsHosts.create` makes its first namespace, bridge and veth pair."""
    if os.geteuid() != 0:
        raise InfraUnavailable("network-namespace hosts need root")
    if _which("ip", "/usr/sbin/ip", "/sbin/ip") is None:
        raise InfraUnavailable("missing ip (install iproute2; as root: bash .ci/system-deps.sh)")


def _ip(*args: str, probe: str | None = None, check: bool = True, timeout: float = 15) -> subprocess.CompletedProcess:
    """Run ``ip ARGS``. With ``probe`` (what is being tried), a privilege/support failure raises
    :class:`InfraUnavailable` instead of RuntimeError."""
    argv = ["ip", *args]
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        msg = f"`{' '.join(argv)}` failed (exit {proc.returncode}): {proc.stderr.strip()}"
        if probe and any(h in proc.stderr for h in _UNAVAILABLE_HINTS):
            raise InfraUnavailable(f"cannot {probe} here: {msg}")
        raise RuntimeError(msg)
    return proc


def _netns_names() -> set[str]:
    proc = _ip("netns", "list", check=False)
    return {line.split()[0] for line in proc.stdout.splitlines() if line.strip()}


def _link_names() -> set[str]:
    proc = _ip("-o", "link", "show", check=False)
    names = set()
    for line in proc.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.add(parts[1].strip().split("@")[0])
    return names


def _netns_pids(ns: str) -> list[int]:
    proc = _ip("netns", "pids", ns, check=False)
    return [int(x) for x in proc.stdout.split() if x.isdigit()]


def _starttime(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except FileNotFoundError:
        return None
    return data[data.rindex(")") + 2 :].split()[19]


def _record_owner_alive(rec: dict) -> bool:
    pid = rec.get("pid")
    return isinstance(pid, int) and _proc_stat(pid) is not None and _starttime(pid) == rec.get("starttime")


def _teardown_record(rec: dict, *, timeout: float = 5.0) -> list[str]:
    """Remove everything a record names; idempotent. Returns the problems seen (empty when clean)."""
    problems: list[str] = []
    existing_ns = _netns_names()
    for ns in rec.get("netns", []):
        if ns in existing_ns:
            pids = _netns_pids(ns)
            _kill(pids, signal.SIGKILL)
            left = _wait_gone(pids, timeout)
            if left:
                problems.append(f"processes {left} in {ns} survived SIGKILL")
            proc = _ip("netns", "del", ns, check=False)
            if proc.returncode != 0 and ns in _netns_names():
                problems.append(f"ip netns del {ns}: {proc.stderr.strip()}")
        shutil.rmtree(ETC_NETNS / ns, ignore_errors=True)
    links = _link_names()
    for link in [*rec.get("veths", []), rec.get("bridge")]:
        if link and link in links:
            proc = _ip("link", "del", link, check=False)
            if proc.returncode != 0 and link in _link_names():
                problems.append(f"ip link del {link}: {proc.stderr.strip()}")
    if rec.get("dir"):
        shutil.rmtree(rec["dir"], ignore_errors=True)
    with contextlib.suppress(OSError):
        if ETC_NETNS.is_dir() and not any(ETC_NETNS.iterdir()):
            ETC_NETNS.rmdir()
    return problems


def sweep_records(state_dir: Path, owner_alive, teardown) -> list[str]:
    """Tear down every run recorded under `state_dir` whose owner is gone (`teardown(record)`), remove its
    record, and `state_dir` itself once empty; the tokens cleaned. Shared by the netns and Slurm fixtures."""
    cleaned: list[str] = []
    if not state_dir.is_dir():
        return cleaned
    for path in sorted(state_dir.glob("*.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if owner_alive(rec):
            continue
        teardown(rec)
        path.unlink(missing_ok=True)
        cleaned.append(rec.get("token", path.stem))
    with contextlib.suppress(OSError):
        state_dir.rmdir()  # only when empty
    return cleaned


def cleanup_stale() -> list[str]:
    """Remove namespaces, links and files recorded by test runs whose process is gone (e.g. killed).
    Returns the tokens cleaned. Call under :func:`infra_lock`."""
    return sweep_records(STATE_DIR, _record_owner_alive, _teardown_record)


def leftovers(token: str | None = None) -> list[str]:
    """Namespaces, links and /etc/netns entries of ours (of one run when ``token`` is given) that exist now."""
    ns_prefix = f"{NETNS_PREFIX}{token}-" if token else NETNS_PREFIX
    found = [f"netns {n}" for n in sorted(_netns_names()) if n.startswith(ns_prefix)]
    link_prefixes = (f"{BRIDGE_PREFIX}{token}", f"{VETH_PREFIX}{token}-") if token else (BRIDGE_PREFIX, VETH_PREFIX)
    found += [f"link {n}" for n in sorted(_link_names()) if n.startswith(link_prefixes)]
    if ETC_NETNS.is_dir():
        found += [f"{ETC_NETNS}/{p.name}" for p in sorted(ETC_NETNS.iterdir()) if p.name.startswith(ns_prefix)]
    if token and (STATE_DIR / f"{token}.json").exists():
        found.append(f"record {STATE_DIR / (token + '.json')}")
    return found


@dataclass
class NetnsHost:
    """One namespace host. ``host``/``port``/``user``/``client_key``/``known_hosts_path`` are what an SSH
    client needs (see :meth:`connect_options`)."""

    index: int  # 1-based
    netns: str
    hostname: str
    address: str
    veth: str
    dir: Path  # its own 0755 directory (sshd files)
    home: Path  # the test user's home on this host (owned by the user)
    sshd: Sshd = field(repr=False)

    port = 22

    @property
    def host(self) -> str:
        return self.address

    @property
    def user(self) -> str:
        return self.sshd.user

    @property
    def client_key(self) -> Path:
        return self.sshd.client_key

    @property
    def host_public_key(self) -> str:
        return self.sshd.host_public_key

    @property
    def known_hosts_line(self) -> str:
        return self.sshd.known_hosts_line

    @property
    def known_hosts_path(self) -> Path:
        return self.sshd.known_hosts_path

    def connect_options(self, **overrides) -> dict:
        return self.sshd.connect_options(**overrides)

    def kill_sessions(self, **kw) -> list[int]:
        return self.sshd.kill_sessions(**kw)

    def rotate_host_key(self, **kw) -> str:
        return self.sshd.rotate_host_key(**kw)

    @contextlib.contextmanager
    def private_dev_fuse(self, mode: int) -> Iterator[None]:
        """While in the block, this host's logins see a /dev/fuse of their own with `mode`, owned by root: a
        character device with FUSE's numbers (10, 229) bind-mounted over /dev/fuse in the mount namespace of
        the host's sshd (`ip netns exec` gave it one of its own), which every SSH session inherits. The
        machine's /dev/fuse and its mode are untouched, whatever they are (0666 here, 0660 or 0600
        elsewhere): a test makes the condition it is about."""
        pid = self.sshd.pid
        if pid is None:
            raise RuntimeError(f"{self.hostname}: its sshd is not running")
        node = self.dir / "dev-fuse"
        node.unlink(missing_ok=True)
        os.mknod(node, stat.S_IFCHR | mode, os.makedev(10, 229))
        os.chmod(node, mode)  # mknod's mode passes through the umask
        os.chown(node, 0, 0)
        enter = ["nsenter", "-t", str(pid), "-m", "--"]
        subprocess.run([*enter, "mount", "--bind", str(node), "/dev/fuse"], check=True, capture_output=True,
                       timeout=30)
        try:
            # what the host's user sees there now (su: root's mount namespace, the user's permissions)
            seen = subprocess.run([*enter, "su", "-s", "/bin/sh", self.user, "-c", "test -r /dev/fuse -a -w /dev/fuse"],
                                  capture_output=True, text=True, timeout=30)
            if (seen.returncode == 0) != (mode & 0o006 == 0o006):
                raise RuntimeError(f"{self.hostname}: /dev/fuse mode {oct(mode)} did not take for {self.user}: {seen}")
            yield
        finally:
            subprocess.run([*enter, "umount", "/dev/fuse"], check=False, capture_output=True, timeout=30)
            node.unlink(missing_ok=True)

    def exec_argv(self, argv: list[str]) -> list[str]:
        """``argv`` wrapped to run as root on this host: its network namespace, its /etc/netns files,
        its hostname."""
        return [
            "ip", "netns", "exec", self.netns, "unshare", "--uts", "--", "sh", "-c",
            'echo "$0" > /proc/sys/kernel/hostname && exec "$@"', self.hostname, *argv,
        ]  # fmt: skip

    def run(self, argv: list[str], *, check: bool = True, timeout: float = 30, **kw) -> subprocess.CompletedProcess:
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.run(self.exec_argv(argv), check=check, timeout=timeout, **kw)

    def set_link(self, up: bool) -> None:
        """Cut (``False``) or restore (``True``) this host's cable to the bridge: a network partition
        (established connections stall rather than reset)."""
        _ip("link", "set", self.veth, "up" if up else "down")


class NetnsHosts:
    """``count`` namespace hosts with an sshd each; a sequence of :class:`NetnsHost`.

    Use as a context manager, or call :meth:`create` and then :meth:`close` (always, also after a
    failed create)."""

    def __init__(
        self,
        env: SshTestEnv,
        count: int = 3,
        *,
        subnet_prefix: str = "10.213",
        per_host_home: bool = True,
        start_timeout: float = 10.0,
        extra_config: list[str] | tuple[str, ...] = (),
    ) -> None:
        if not 1 <= count <= 250:
            raise ValueError(f"count must be between 1 and 250, not {count}")
        self.env = env
        self.count = count
        self.subnet_prefix = subnet_prefix
        self.per_host_home = per_host_home
        self.start_timeout = start_timeout
        self.extra_config = tuple(extra_config)  # sshd_config lines of every host (`Port 22922`: a second port)
        self.token = secrets.token_hex(3)[:5]
        self.bridge = f"{BRIDGE_PREFIX}{self.token}"
        self.bridge_address: str | None = None
        self.subnet: str | None = None
        self.dir: Path | None = None
        self.hosts: list[NetnsHost] = []
        self._record: dict | None = None

    # -- sequence ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.hosts)

    def __iter__(self):
        return iter(self.hosts)

    def __getitem__(self, i):
        return self.hosts[i]

    def __repr__(self) -> str:
        return f"<NetnsHosts {self.token} {self.subnet} {[h.address for h in self.hosts]}>"

    def __enter__(self) -> NetnsHosts:
        try:
            self.create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def known_hosts_file(self, path: str | os.PathLike | None = None) -> Path:
        """Write every host's current key (``address key`` lines) to one file and return its path."""
        target = Path(path) if path else (self.dir / "known_hosts")
        target.write_text("".join(h.known_hosts_line + "\n" for h in self.hosts))
        return target

    # -- set-up -----------------------------------------------------------------------------

    def _pick_subnet(self) -> str:
        used = set()
        out = _ip("-4", "-o", "addr", "show", check=False).stdout
        routes = _ip("-4", "route", "show", "table", "all", check=False).stdout
        for text in (out, routes):
            for word in text.replace("/", " ").split():
                if word.startswith(self.subnet_prefix + "."):
                    parts = word.split(".")
                    if len(parts) == 4 and parts[2].isdigit():
                        used.add(int(parts[2]))
        for x in range(256):
            if x not in used:
                return f"{self.subnet_prefix}.{x}"
        raise RuntimeError(f"no free /24 left in {self.subnet_prefix}.0.0/16 (leftovers? see cleanup_stale())")

    def _write_record(self) -> None:
        STATE_DIR.mkdir(mode=0o755, exist_ok=True)
        path = STATE_DIR / f"{self.token}.json"
        path.write_text(json.dumps(self._record))

    def create(self) -> NetnsHosts:
        check_netns_support()
        names = [f"{NETNS_PREFIX}{self.token}-{i}" for i in range(1, self.count + 1)]
        veths = [f"{VETH_PREFIX}{self.token}-{i}" for i in range(1, self.count + 1)]
        # short paths: the test user's home is in here, and Unix socket paths are limited to 107 bytes
        self.dir = Path(self.env.base_dir) / f"ns-{self.token}"
        self.dir.mkdir(mode=0o755)
        self.dir.chmod(0o755)
        self._record = {
            "token": self.token,
            "pid": os.getpid(),
            "starttime": _starttime(os.getpid()),
            "bridge": self.bridge,
            "netns": names,
            "veths": veths,
            "dir": str(self.dir),
        }
        with infra_lock():
            cleanup_stale()
            self._write_record()
            net = self._pick_subnet()
            self.subnet = f"{net}.0/24"
            self.bridge_address = f"{net}.1"
            _ip("link", "add", self.bridge, "type", "bridge", "forward_delay", "0", probe="create a bridge")
            _ip("addr", "add", f"{self.bridge_address}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i, (ns, veth) in enumerate(zip(names, veths, strict=True), start=1):
                first = i == 1  # privilege/support failures show up here: InfraUnavailable
                _ip("netns", "add", ns, probe="create network namespaces" if first else None)
                veth_probe = "create veth pairs" if first else None
                _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns, probe=veth_probe)
                _ip("link", "set", veth, "master", self.bridge, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "addr", "add", f"{net}.{i + 1}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
        hostnames = [f"skyhive-node-{i}" for i in range(1, self.count + 1)]
        addresses = [f"{net}.{i + 1}" for i in range(1, self.count + 1)]
        for i, (ns, veth, hostname, address) in enumerate(
            zip(names, veths, hostnames, addresses, strict=True), start=1
        ):
            host_dir = self.dir / f"h{i}"
            host_dir.mkdir(mode=0o755)
            home = host_dir / "home"
            if self.per_host_home:
                make_home(home, None)  # the host's sshd makes an account whose home it is
            else:
                home = self.env.user.home
            self._write_etc(ns, hostname, address, home, list(zip(hostnames, addresses, strict=True)))
            sshd = Sshd(
                self.env,
                host=address,
                port=22,
                directory=host_dir,
                netns=ns,
                hostname=hostname,
                home=home,
                start_timeout=self.start_timeout,
                extra_config=self.extra_config,
            )
            self.hosts.append(NetnsHost(i, ns, hostname, address, veth, host_dir, home, sshd))
        for h in self.hosts:  # start all, then wait for all
            h.sshd.launch()
        for h in self.hosts:
            h.sshd.wait_ready()
        self.known_hosts_file()
        return self

    def _write_etc(self, ns: str, hostname: str, address: str, home: Path, peers: list[tuple[str, str]]) -> None:
        etc = ETC_NETNS / ns
        etc.mkdir(parents=True, exist_ok=True)
        etc.chmod(0o755)
        hosts = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        hosts += [f"{addr}\t{name}" for name, addr in peers]
        (etc / "hosts").write_text("\n".join(hosts) + "\n")
        if os.path.exists("/etc/hostname"):
            (etc / "hostname").write_text(hostname + "\n")
        if os.path.exists("/etc/resolv.conf"):
            # no nameserver: a lookup never leaves the namespace (glibc falls back to its own loopback)
            (etc / "resolv.conf").write_text("# skyhive test host: no DNS\noptions timeout:1 attempts:1\n")
        for p in etc.iterdir():
            p.chmod(0o644)

    # -- tear-down --------------------------------------------------------------------------

    def close(self, timeout: float = 5.0) -> None:
        """Stop the sshds, kill every process left in the namespaces, delete namespaces, links,
        /etc/netns entries, directories and the record; then check nothing is left. Idempotent."""
        errors: list[str] = []
        for h in self.hosts:
            try:
                h.sshd.stop(timeout)
                h.sshd.release_account()
            except Exception as e:  # keep tearing down; report at the end
                errors.append(f"{h.netns}: {e}")
        if self._record is not None:
            record_name = f"record {STATE_DIR / (self.token + '.json')}"
            with infra_lock():
                problems = _teardown_record(self._record, timeout=timeout)
                # namespace deletion finishes asynchronously in the kernel: re-check for a while
                deadline = time.monotonic() + timeout
                while [x for x in leftovers(self.token) if x != record_name] and time.monotonic() < deadline:
                    time.sleep(0.02)
                    problems = _teardown_record(self._record, timeout=timeout)
                left = [x for x in leftovers(self.token) if x != record_name]
                if left:
                    problems.append(f"left behind: {left}")
                errors += problems
                if not problems:
                    (STATE_DIR / f"{self.token}.json").unlink(missing_ok=True)
                    with contextlib.suppress(OSError):
                        STATE_DIR.rmdir()
                    self._record = None
        self.hosts = []
        if errors:
            raise RuntimeError(f"tear-down of namespace hosts {self.token} incomplete: " + "; ".join(errors))


def _main() -> None:  # python -m tests.infra.netns --cleanup
    import argparse

    ap = argparse.ArgumentParser(description="skyhive test namespace hosts")
    ap.add_argument("--cleanup", action="store_true", help="remove leftovers of test runs that are gone")
    ap.add_argument("--list", action="store_true", help="list namespaces/links/files of ours that exist")
    args = ap.parse_args()
    if args.cleanup:
        with infra_lock():
            print("cleaned:", cleanup_stale())
    if args.list or not args.cleanup:
        print("\n".join(leftovers()) or "nothing of ours")


if __name__ == "__main__":
    _main()
