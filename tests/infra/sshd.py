"""Real OpenSSH servers for tests.

Plain helpers (no pytest): a non-root login user, a per-session client key pair, and
:class:`Sshd`, one ``sshd -D -e -f CFG`` child process with its own host key, listening on
one address and port (loopback and a free port by default; optionally inside a network
namespace, see :mod:`tests.infra.netns`).

Typical use::

    env = SshTestEnv.create()                 # needs root: creates/unlocks the user, a client key
    with Sshd(env) as server:                 # starts, validates with `sshd -t`, waits for the banner
        conn = await asyncssh.connect(**server.connect_options())
        ...
    env.close()

Everything a server needs lives in its own 0755 directory (sshd reads ``authorized_keys`` as the
login user, so nothing may live under a 0700 directory such as pytest's ``tmp_path``).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import itertools
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_USER",
    "InfraUnavailable",
    "TestUser",
    "ClientKey",
    "SshTestEnv",
    "Sshd",
    "check_sshd_support",
    "ensure_user",
    "drop_user",
    "cleanup_stale_users",
    "generate_client_key",
    "generate_host_key",
    "cleanup_stale_dirs",
    "make_home",
    "find_free_port",
    "known_hosts_line",
    "process_alive",
    "descendants",
    "kill_tree_bottom_up",
    "infra_lock",
]

# Each test run (process) logs in as an account of its own, made for it and removed at its end, so two
# suites on one machine never share an account, a home, its processes or a replaced /etc/passwd entry.
USER_PREFIX = "skyt"
DEFAULT_USER = f"{USER_PREFIX}{os.getpid()}"
_ACCOUNTS = itertools.count(1)  # servers with a home of their own: skyt<pid>s<n>
LOCK_PATH = "/run/lock/skyhive-test-infra.lock" if os.path.isdir("/run/lock") else "/tmp/skyhive-test-infra.lock"
# Process names of OpenSSH per-connection processes (9.8+ splits them into sshd-session/sshd-auth).
_SESSION_COMMS = frozenset({"sshd", "sshd-session", "sshd-auth"})


class InfraUnavailable(RuntimeError):
    """This machine cannot provide the requested test infrastructure (not root, missing binaries,
    no namespace privileges). Fixtures turn it into a skip; anything else is a real error."""


# --------------------------------------------------------------------------------------------
# small utilities


@contextlib.contextmanager
def infra_lock(path: str = LOCK_PATH):
    """An exclusive cross-process lock (flock) serialising user creation and namespace set-up."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _which(name: str, *fallbacks: str) -> str | None:
    found = shutil.which(name)
    if found:
        return os.path.abspath(found)
    for candidate in fallbacks:
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def sshd_binary() -> str | None:
    return _which("sshd", "/usr/sbin/sshd")


def _run(argv: list[str], *, what: str, timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"{what} failed (exit {proc.returncode}): {' '.join(argv)}\n"
            f"stdout: {proc.stdout.strip()}\nstderr: {proc.stderr.strip()}"
        )
    return proc


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a process, or None when it no longer exists."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    # comm may contain spaces and parentheses: fields start after the last ')'
    rest = data[data.rindex(")") + 2 :].split()
    return rest[0], int(rest[1])


def _proc_comm(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except (FileNotFoundError, ProcessLookupError):
        return None


def process_alive(pid: int) -> bool:
    """True when the process exists and is not a zombie (this machine's init reaps lazily)."""
    st = _proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def _children_map() -> dict[int, list[int]]:
    """ppid -> live (non-zombie) children, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        st = _proc_stat(int(entry))
        if st is not None and st[0] not in ("Z", "X"):
            children.setdefault(st[1], []).append(int(entry))
    return children


def _descendants_in(children: dict[int, list[int]], pid: int) -> list[int]:
    out: list[int] = []
    queue = list(children.get(pid, []))
    while queue:
        p = queue.pop(0)
        out.append(p)
        queue.extend(children.get(p, []))
    return out


def descendants(pid: int) -> list[int]:
    """All live descendants of ``pid`` (breadth first, parents before children)."""
    return _descendants_in(_children_map(), pid)


def _kill(pids, sig=signal.SIGKILL) -> None:
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, sig)


def _wait_gone(pids, timeout: float) -> list[int]:
    """Wait until every pid is gone or a zombie; returns those still alive at the timeout."""
    deadline = time.monotonic() + timeout
    left = [p for p in pids if process_alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.005)
        left = [p for p in left if process_alive(p)]
    return left


def _wait_reaped(pids, timeout: float) -> None:
    """Wait (bounded) until each pid has left /proc, i.e. its parent reaped it; an orphaned zombie
    (parent gone) is left to init, which reaps lazily on some machines."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pending = []
        for p in pids:
            st = _proc_stat(p)
            if st is None:
                continue
            if st[0] in ("Z", "X") and (st[1] == 1 or not process_alive(st[1])):
                continue
            pending.append(p)
        if not pending:
            return
        pids = pending
        time.sleep(0.002)


def kill_tree_bottom_up(root: int, select=lambda pid: True, timeout: float = 5.0) -> list[int]:
    """SIGKILL the live descendants of ``root`` for which ``select(pid)`` holds, leaves first, waiting
    after each round for their parents to reap them (so no zombie is orphaned to init when avoidable).
    Returns the pids killed; raises if some survive ``timeout``."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout
    while True:
        children = _children_map()
        targets = [p for p in _descendants_in(children, root) if select(p)]
        if not targets:
            return killed
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {targets} under pid {root} survived SIGKILL for {timeout}s")
        target_set = set(targets)
        leaves = [p for p in targets if not target_set.intersection(_descendants_in(children, p))]
        _kill(leaves)
        killed += [p for p in leaves if p not in killed]
        _wait_reaped(leaves, 0.25)


def find_free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def known_hosts_line(host: str, port: int, public_key: str) -> str:
    """An OpenSSH known_hosts line: ``[host]:port key`` (plain ``host`` for port 22)."""
    name = host if port == 22 else f"[{host}]:{port}"
    return f"{name} {public_key}"


def _make_public_dir(prefix: str, base_dir: str | os.PathLike | None) -> Path:
    """A fresh 0755 directory whose every parent other users can traverse."""
    base = Path(base_dir or "/tmp").resolve()
    for parent in [base, *base.parents]:
        if not os.stat(parent).st_mode & 0o001:
            raise RuntimeError(
                f"{parent} is not traversable by other users; sshd reads authorized_keys as the login "
                f"user, so test servers need a base directory like /tmp (not pytest's tmp_path)"
            )
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    path.chmod(0o755)
    return path


_PR_SET_PDEATHSIG = 1


def _pdeathsig_preexec():
    """Make a child get SIGTERM when the thread that started it dies (only used from the main thread,
    where that means: when the test process dies, e.g. SIGKILLed)."""
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    return preexec


# --------------------------------------------------------------------------------------------
# login user and keys


@dataclass(frozen=True)
class TestUser:
    __test__ = False  # not a pytest test class

    name: str
    uid: int
    gid: int
    home: Path
    shell: str


def check_sshd_support() -> None:
    """Raise :class:`InfraUnavailable` with the reason when real-sshd tests cannot run here."""
    if os.geteuid() != 0:
        raise InfraUnavailable("real-sshd tests need root (to create the test login user and run sshd)")
    missing = [
        name
        for name, path in [
            ("sshd", sshd_binary()),
            ("ssh-keygen", _which("ssh-keygen", "/usr/bin/ssh-keygen")),
            ("useradd", _which("useradd", "/usr/sbin/useradd")),
            ("usermod", _which("usermod", "/usr/sbin/usermod")),
        ]
        if path is None
    ]
    if missing:
        raise InfraUnavailable(
            f"missing {', '.join(missing)} (install openssh-server; as root: bash .ci/system-deps.sh)"
        )


def _shadow_field(name: str) -> str | None:
    try:
        with open("/etc/shadow") as f:
            for line in f:
                parts = line.rstrip("\n").split(":")
                if parts and parts[0] == name:
                    return parts[1] if len(parts) > 1 else ""
    except FileNotFoundError:
        return None
    return None


def _kill_user_processes(name: str) -> None:
    pkill = _which("pkill", "/usr/bin/pkill")
    if pkill:
        subprocess.run([pkill, "-KILL", "-u", name], stdin=subprocess.DEVNULL, capture_output=True, timeout=10)


def drop_user(name: str) -> None:
    """Remove a test account made by `ensure_user`: its processes (SIGKILL), the account, its home."""
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        return
    if pw.pw_uid == 0 or not name.startswith(USER_PREFIX):
        raise RuntimeError(f"refusing to remove account {name!r}: not a test account")
    _kill_user_processes(name)
    userdel = _which("userdel", "/usr/sbin/userdel") or "userdel"
    subprocess.run([userdel, "--force", "--remove", name], stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    shutil.rmtree(pw.pw_dir, ignore_errors=True)


def cleanup_stale_users() -> list[str]:
    """Remove the accounts of test runs that no longer exist (``skyt<pid>[s<n>]``, no such process)."""
    removed = []
    for pw in pwd.getpwall():
        m = re.fullmatch(rf"{USER_PREFIX}(\d+)(?:s\d+)?", pw.pw_name)
        if m and _proc_stat(int(m.group(1))) is None:
            drop_user(pw.pw_name)
            removed.append(pw.pw_name)
    return removed


def ensure_user(name: str = DEFAULT_USER, shell: str = "/bin/bash", home: str | os.PathLike | None = None) -> TestUser:
    """Create (if missing) and unlock a non-root login user with a home directory (`home`, whose tree
    is given to the user, or a new one under /home). Idempotent and serialised with other test
    processes. `drop_user` (called by `SshTestEnv.close` and `Sshd.close`) removes it again.

    The home is the account's own entry in /etc/passwd, not a bind-mounted copy of that file: another
    run's useradd/userdel rewrites /etc/passwd, which silently drops such a mount in every mount
    namespace (the kernel detaches mounts on a replaced file) — sessions then saw the wrong home."""
    if os.geteuid() != 0:
        raise InfraUnavailable("creating the test login user needs root")
    if not os.access(shell, os.X_OK):
        shell = "/bin/sh"
    with infra_lock():
        cleanup_stale_users()
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            useradd = _which("useradd", "/usr/sbin/useradd") or "useradd"
            where = ["--home-dir", str(home), "--no-create-home"] if home is not None else ["--create-home"]
            _run([useradd, *where, "--user-group", "--shell", shell, name], what=f"useradd {name}")
            pw = pwd.getpwnam(name)
            if home is not None:
                for root, dirs, files in os.walk(home):
                    for entry in [root, *(os.path.join(root, n) for n in dirs + files)]:
                        os.lchown(entry, pw.pw_uid, pw.pw_gid)
        if pw.pw_uid == 0:
            raise RuntimeError(f"test user {name!r} has uid 0; refusing to use root as the test user")
        field = _shadow_field(name)
        if field is None or field.startswith("!") or field == "":
            # useradd leaves the account locked ('!'), which sshd (UsePAM no) treats as PermissionDenied
            usermod = _which("usermod", "/usr/sbin/usermod") or "usermod"
            _run([usermod, "-p", "*", name], what=f"usermod -p '*' {name}")
        home = Path(pw.pw_dir)
        if not home.is_dir():
            home.mkdir(parents=True, mode=0o755)
            os.chown(home, pw.pw_uid, pw.pw_gid)
    return TestUser(name=name, uid=pw.pw_uid, gid=pw.pw_gid, home=home, shell=pw.pw_shell)


@dataclass(frozen=True)
class ClientKey:
    """An ed25519 key pair; ``path`` is the private key (mode 0600), ``public_line`` the
    ``ssh-ed25519 AAAA... comment`` line for authorized_keys."""

    path: Path
    public_path: Path
    public_line: str


def _keygen(path: Path, comment: str) -> str:
    keygen = _which("ssh-keygen", "/usr/bin/ssh-keygen") or "ssh-keygen"
    for p in (path, path.with_name(path.name + ".pub")):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    _run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], what="ssh-keygen")
    path.chmod(0o600)
    return path.with_name(path.name + ".pub").read_text().strip()


def generate_client_key(directory: str | os.PathLike, name: str = "client_ed25519") -> ClientKey:
    path = Path(directory) / name
    public = _keygen(path, "skyhive-test-client")
    return ClientKey(path=path, public_path=path.with_name(path.name + ".pub"), public_line=public)


def generate_host_key(directory: str | os.PathLike, name: str = "ssh_host_ed25519_key") -> tuple[Path, str]:
    """(private key path, public key ``ssh-ed25519 AAAA...`` without comment)."""
    path = Path(directory) / name
    public = _keygen(path, "skyhive-test-host")
    return path, " ".join(public.split()[:2])


def cleanup_stale_dirs(base_dir: str | os.PathLike | None = None) -> list[Path]:
    """Remove ``skyhive-ssh-<pid>-*`` directories of test processes that no longer exist."""
    removed = []
    base = Path(base_dir or "/tmp")
    for path in base.glob("skyhive-ssh-*-*"):
        pid = path.name.split("-")[2]
        if pid.isdigit() and int(pid) != os.getpid() and _proc_stat(int(pid)) is None and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def make_home(path: str | os.PathLike, user: TestUser | None) -> Path:
    """A fresh 0755 home directory owned by ``user`` (None: by root until an account takes it, see
    `ensure_user(home=...)`), with /etc/skel's files like a new account's."""
    home = Path(path)
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    if os.path.isdir("/etc/skel"):
        shutil.copytree("/etc/skel", home, dirs_exist_ok=True, symlinks=True)
    if user is None:
        return home
    for root, dirs, files in os.walk(home):
        for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
            os.lchown(name, user.uid, user.gid)
    return home


@dataclass
class SshTestEnv:
    """What every test server shares: the login user, the client key pair, a base directory."""

    user: TestUser
    client_key: ClientKey
    dir: Path  # 0755, holds the client key; removed by close()
    base_dir: Path  # where servers make their own directories (``dir`` itself by default)
    home: Path  # the test user's home for this run's loopback servers (owned by the user)

    @classmethod
    def create(cls, user: str = DEFAULT_USER, base_dir: str | os.PathLike | None = None) -> SshTestEnv:
        check_sshd_support()
        cleanup_stale_dirs(base_dir)
        directory = _make_public_dir(f"skyhive-ssh-{os.getpid()}-", base_dir)
        try:
            key = generate_client_key(directory)
            home = make_home(directory / "home", None)
            test_user = ensure_user(user, home=home if user == DEFAULT_USER else None)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return cls(user=test_user, client_key=key, dir=directory, base_dir=directory, home=test_user.home)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.user.name == DEFAULT_USER:  # this run's own accounts (not one a caller named)
            with infra_lock():
                for pw in pwd.getpwall():
                    if re.fullmatch(rf"{DEFAULT_USER}(?:s\d+)?", pw.pw_name):
                        drop_user(pw.pw_name)


# --------------------------------------------------------------------------------------------
# the server

_extra_option_support: dict[str, bool] = {}


def _option_supported(sshd: str, option_line: str, cfg_dir: Path) -> bool:
    """Whether this sshd accepts a config line (e.g. ``PerSourcePenalties no`` exists only in 9.8+)."""
    if option_line not in _extra_option_support:
        cfg = cfg_dir / "probe_config"
        key = cfg_dir / "ssh_host_ed25519_key"
        cfg.write_text(f"{option_line}\nHostKey {key}\nUsePAM no\n")
        proc = _run([sshd, "-t", "-f", str(cfg)], what="sshd -t (option probe)", check=False)
        cfg.unlink()
        _extra_option_support[option_line] = proc.returncode == 0
    return _extra_option_support[option_line]


class Sshd:
    """One real OpenSSH daemon (``sshd -D -e -f CFG``) as a child process of the test process.

    Attributes once started: ``host``, ``port``, ``user`` (name), ``client_key`` (path of the
    private key), ``host_public_key`` (``ssh-ed25519 AAAA...``), ``known_hosts_line``,
    ``known_hosts_path`` (a file holding that one line), ``dir`` (its own 0755 directory),
    ``pid`` (the listening daemon), ``log_path`` (sshd's stderr), ``home`` (the login user's home as
    its sessions see it: by default ``env.home``, one fresh directory per test run, shared by the
    run's loopback servers; pass ``home=env.user.home`` for the system one).

    ``netns``/``hostname``: run the daemon inside that network namespace (``ip netns exec``),
    in its own UTS namespace with that hostname; used by :mod:`tests.infra.netns`.
    ``extra_config``: sshd_config lines placed first (the first value of an option wins).
    """

    def __init__(
        self,
        env: SshTestEnv,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        directory: str | os.PathLike | None = None,
        netns: str | None = None,
        hostname: str | None = None,
        extra_config: list[str] | tuple[str, ...] = (),
        home: str | os.PathLike | None = None,
        start_timeout: float = 10.0,
    ) -> None:
        self.env = env
        self.host = host
        self._fixed_port = port
        self.port: int = port or 0
        self.user: str = env.user.name
        self.client_key: Path = env.client_key.path
        self.netns = netns
        self.hostname = hostname
        self.extra_config = list(extra_config)
        self.start_timeout = start_timeout
        self._own_dir = directory is None
        self.dir = Path(directory) if directory is not None else _make_public_dir("skyhive-sshd-", env.base_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o755)
        self.config_path = self.dir / "sshd_config"
        self.log_path = self.dir / "sshd.log"
        self.pid_path = self.dir / "sshd.pid"
        self.authorized_keys_path = self.dir / "authorized_keys"
        self.known_hosts_path = self.dir / "known_hosts"
        # The login user's home as its sessions see it. A home other than the run's own gets a login
        # account of its own whose home it is (see `ensure_user`: no bind-mounted /etc/passwd).
        self.home = Path(home) if home is not None else env.home
        self._own_user: str | None = None
        if self.home != env.user.home:
            self._own_user = f"{env.user.name}s{next(_ACCOUNTS)}"
            self.user = ensure_user(self._own_user, home=self.home).name
        self.host_key_path: Path | None = None
        self.host_public_key: str = ""
        self._proc: subprocess.Popen | None = None
        self._log_file = None

    # -- info -------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def known_hosts_line(self) -> str:
        return known_hosts_line(self.host, self.port, self.host_public_key)

    def connect_options(self, **overrides) -> dict:
        """Keyword arguments for ``asyncssh.connect`` that never touch ``~/.ssh``: this host and port,
        the test user, only the test client key, only this server's pinned host key, no agent, no config."""
        opts = dict(
            host=self.host,
            port=self.port,
            username=self.user,
            client_keys=[str(self.client_key)],
            known_hosts=str(self.known_hosts_path),
            agent_path=None,
            config=None,
        )
        opts.update(overrides)
        return opts

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def __repr__(self) -> str:
        where = f" netns={self.netns}" if self.netns else ""
        return f"<Sshd {self.user}@{self.host}:{self.port}{where} pid={self.pid}>"

    # -- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> Sshd:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _write_config(self, sshd: str) -> None:
        lines = list(self.extra_config)
        if _option_supported(sshd, "PerSourcePenalties no", self.dir):
            lines.append("PerSourcePenalties no")  # 9.8+: killed sessions would penalise 127.0.0.1
        lines += [
            f"Port {self.port}",
            f"ListenAddress {self.host}",
            "AddressFamily inet" if ":" not in self.host else "AddressFamily inet6",
            f"HostKey {self.host_key_path}",
            f"PidFile {self.pid_path}",
            f"AuthorizedKeysFile {self.authorized_keys_path}",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "PermitRootLogin no",
            "UseDNS no",
            "MaxSessions 100",
            "MaxStartups 200",
            "LoginGraceTime 30",
            "LogLevel VERBOSE",
            "X11Forwarding no",
            "AllowTcpForwarding yes",
            "AllowStreamLocalForwarding yes",
            "PrintMotd no",
            "Subsystem sftp internal-sftp",
        ]
        self.config_path.write_text("\n".join(lines) + "\n")

    def _prepare(self, sshd: str) -> None:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation directory
        if self.host_key_path is None:
            self.host_key_path, self.host_public_key = generate_host_key(self.dir)
        self.authorized_keys_path.write_text(self.env.client_key.public_line + "\n")
        self.authorized_keys_path.chmod(0o644)
        if not self._fixed_port and not self.port:
            self.port = find_free_port(self.host)
        self._write_config(sshd)
        proc = _run([sshd, "-t", "-f", str(self.config_path)], what="sshd -t", check=False)
        if proc.returncode != 0:
            raise RuntimeError(
                f"sshd -t rejected {self.config_path} (exit {proc.returncode}): {proc.stderr.strip()}\n"
                f"config:\n{self.config_path.read_text()}"
            )
        self.known_hosts_path.write_text(self.known_hosts_line + "\n")

    def _argv(self, sshd: str) -> list[str]:
        argv = [sshd, "-D", "-e", "-f", str(self.config_path)]
        # sshd's own UTS namespace (its hostname); every step execs, so the pid stays sshd's
        flags, steps = [], []
        if self.hostname:
            flags.append("--uts")
            steps.append(f"echo {shlex.quote(self.hostname)} > /proc/sys/kernel/hostname")
        if steps:
            argv = ["unshare", *flags, "--", "sh", "-c", " && ".join(steps) + ' && exec "$@"', "sh", *argv]
        if self.netns:
            argv = ["ip", "netns", "exec", self.netns, *argv]
        return argv

    def launch(self) -> None:
        """Validate the config and start the daemon without waiting for it (see :meth:`wait_ready`)."""
        if self.running:
            return
        sshd = sshd_binary()
        if sshd is None:
            raise InfraUnavailable("sshd not found (install openssh-server)")
        self._prepare(sshd)
        with contextlib.suppress(FileNotFoundError):
            self.pid_path.unlink()
        self._log_file = open(self.log_path, "ab")
        preexec = _pdeathsig_preexec() if threading.current_thread() is threading.main_thread() else None
        self._proc = subprocess.Popen(
            self._argv(sshd),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=self._log_file,
            start_new_session=True,  # a Ctrl-C on the test run does not hit it; we stop it ourselves
            preexec_fn=preexec,
            close_fds=True,
        )

    def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until the daemon answers with an SSH banner; on failure, stop it and raise with its log."""
        timeout = self.start_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while True:
            if self._proc is None:
                raise RuntimeError("sshd was not launched")
            code = self._proc.poll()
            if code is not None:
                self._close_log()
                self._proc = None
                raise RuntimeError(
                    f"sshd for {self.host}:{self.port}{' in netns ' + self.netns if self.netns else ''} exited "
                    f"with code {code} before accepting connections; its stderr ({self.log_path}):\n"
                    f"{self.log_text().strip()}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5) as s:
                    s.settimeout(max(0.1, min(2.0, deadline - time.monotonic())))
                    banner = s.recv(64)
                if banner.startswith(b"SSH-"):
                    return
                last_error = RuntimeError(f"unexpected banner {banner!r}")
            except OSError as e:
                last_error = e
            if time.monotonic() >= deadline:
                log = self.log_text().strip()
                self.stop()
                raise TimeoutError(
                    f"sshd for {self.host}:{self.port} did not accept connections within {timeout:.1f}s "
                    f"(last error: {last_error!r}); its stderr ({self.log_path}):\n{log}"
                )
            time.sleep(0.01)

    def start(self, timeout: float | None = None) -> Sshd:
        """Start the daemon and wait until it accepts connections. A free port that another process
        grabs before sshd binds it is retried with another port."""
        attempts = 1 if self._fixed_port else 3
        for attempt in range(attempts):
            self.launch()
            try:
                self.wait_ready(timeout)
                return self
            except RuntimeError as e:
                if attempt + 1 < attempts and "Address already in use" in str(e):
                    self.port = 0
                    continue
                raise
        return self

    def session_pids(self) -> list[int]:
        """The per-connection sshd processes of this daemon (not the listener, not user commands)."""
        if not self.running:
            return []
        return [p for p in descendants(self._proc.pid) if _proc_comm(p) in _SESSION_COMMS]

    def kill_sessions(self, timeout: float = 5.0) -> list[int]:
        """SIGKILL the sshd processes serving this daemon's connections (the connections drop, as on
        a network failure) and leave the listening daemon running. The commands those sessions ran
        are not signalled: they lose their parent and see their stdin/stdout close, as after a real
        drop. Returns the pids of the per-connection processes there were (all gone on return; the
        privileged parent of each usually exits by itself once its child is killed)."""
        if not self.running:
            return []
        before = self.session_pids()
        kill_tree_bottom_up(self._proc.pid, lambda p: _proc_comm(p) in _SESSION_COMMS, timeout)
        return before

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the daemon and everything it started (sessions and the commands they run; not what
        detached from them): SIGSTOP the listening daemon so it accepts no new connection, SIGKILL
        its descendants leaves first, then SIGKILL the daemon and reap it. Idempotent.

        The listener is frozen first because a client whose session was just killed reconnects at
        once: a listener still running would accept it (with the old host key) and fork a session
        that outlives the listener's own exit, so a "restart" would leave a live connection to the
        old daemon behind. The frozen listener cannot reap its direct children; they are orphaned to
        init as zombies when it dies, which reaps them."""
        proc = self._proc
        if proc is not None:
            try:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, signal.SIGSTOP)
                    kill_tree_bottom_up(proc.pid, timeout=timeout)
                    proc.kill()
                    proc.wait(timeout)
                else:
                    proc.wait()
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout)
                self._proc = None
        self._close_log()

    def rotate_host_key(self, timeout: float | None = None) -> str:
        """Restart on the same address and port with a freshly generated host key (existing sessions
        are killed, like any restart). Rewrites ``known_hosts_path``; returns the new public key.
        Tests that want the old key must copy ``known_hosts_line`` before calling this."""
        self.stop()
        self.host_key_path, self.host_public_key = generate_host_key(self.dir)
        port, self._fixed_port = self._fixed_port, self.port  # keep the port
        try:
            self.start(timeout)
        finally:
            self._fixed_port = port
        return self.host_public_key

    def close(self) -> None:
        """Stop and remove its directory (if it created it)."""
        try:
            self.stop()
        finally:
            self.release_account()
            if self._own_dir:
                shutil.rmtree(self.dir, ignore_errors=True)

    def release_account(self) -> None:
        """Remove the login account made for this server's own home, if any (after `stop`)."""
        if self._own_user is not None:
            with infra_lock():
                drop_user(self._own_user)
            self._own_user = None

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
