"""The node side of bucket mounts: each mount put in place at its path before the job (or the pool's first
task) runs, once per machine, and a cached mount's writes carried back to the bucket.

- COPY: the prefix downloaded into the folder (files appear whole, see transfer.py); writes stay local.
- MOUNT_CACHED: the same download, then a background thread uploads what the job writes (a file is
  uploaded once its size and modification time held still for one scan, so a checkpoint being written is
  not sent half-way; write checkpoints to a temporary name and rename), and deletes from the bucket what
  the job deleted (docs/storage.md: a delete racing an upload). `flush` uploads the rest and is
  called before the job ends; what a killed node had uploaded is in the bucket, nothing later.
- MOUNT: `rclone mount` (FUSE) without a cache, as SkyPilot's MOUNT: reads stream from the bucket, a
  written file goes to the bucket when it is closed (sequential writes only). Refused, saying why, where FUSE cannot work: no rclone, no /dev/fuse, or
  /dev/fuse not open to this user (a non-root login on a machine whose /dev/fuse is 0600).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from typing import Any

from ...errors import StorageError
from ...paths import private_dir
from .s3 import Access, client
from .kept import keep
from .kept import shown as _shown
from .spec import Mount
from .transfer import TEMP_MARK, delete_keys, download_prefix, is_temporary, upload_files

__all__ = ["install", "flush", "finish", "unmount_all", "fuse_problem", "SYNC_INTERVAL", "target_path", "active_syncers",
           "flush_before_exit"]

log = logging.getLogger("skyhive.storage")

#: Seconds between two scans of a cached mount (override: SKYHIVE_STORAGE_SYNC_INTERVAL).
SYNC_INTERVAL = 1.0

_syncers: dict[str, _Syncer] = {}
_fuse_mounts: list[str] = []
_lock = threading.Lock()


def target_path(target: str, home: str | None = None) -> str:
    """A mount's path on this node: `~` expanded, relative paths under the home directory (`home`: the
    node's own home where nodes on one machine each have one, `Feature.NODE_HOMES`)."""
    if home is None:
        home = os.path.expanduser("~")
        path = os.path.expanduser(target)
    else:
        path = home + target[1:] if target == "~" or target.startswith("~/") else target
    return path if os.path.isabs(path) else os.path.join(home, path)




def _scan(root: str, special: set[str] | None = None, unkeyed: set[str] | None = None) -> dict[str, tuple[int, int]]:
    """The regular files under `root` as relative path -> (size, mtime). Special files (a FIFO, a socket,
    a device: reading one can block forever) are skipped, each named in a warning once per `special`; so are
    files whose name is not UTF-8, which an object key must be (S3's "Naming Amazon S3 objects"; GCS and R2
    alike): named once per `unkeyed`, which collects their relative paths (kept at the end, `last_flush`)."""
    out = {}
    for dirpath, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".skyhive")]
        for name in names:
            if is_temporary(name):
                continue
            path = os.path.join(dirpath, name)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue  # renamed away while scanning
            except OSError as exc:  # a dangling loop of links, a name too long: named, not fatal
                log.warning("%s: skipped, cannot be read: %s", _shown(path), exc.strerror or exc)
                continue
            if not stat.S_ISREG(st.st_mode):
                if special is None or path not in special:
                    log.warning("%s: skipped, not a regular file (a FIFO, socket or device is never uploaded)",
                                _shown(path))
                    if special is not None:
                        special.add(path)
                continue
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            try:
                rel.encode("utf-8")
            except UnicodeEncodeError:  # undecodable bytes of the name, as os.fsdecode gives them
                if unkeyed is None or rel not in unkeyed:
                    log.warning("%s: skipped, its name is not UTF-8, which an object key must be (it is kept "
                                "where the pool's end keeps what it could not upload)", _shown(path))
                    if unkeyed is not None:
                        unkeyed.add(rel)
                continue
            out[rel] = (st.st_size, st.st_mtime_ns)
    return out


class _Syncer:
    """Uploads what changes in a MOUNT_CACHED folder, in the background, until `flush`."""

    def __init__(self, mount: Mount, path: str, acc: Access, marker: str, *, since: int | None = None) -> None:
        self.mount, self.path, self.acc, self.marker = mount, path, acc, marker
        self.s3 = client(acc)
        self.special: set[str] = set()  # special files already named in a warning
        self.unkeyed: set[str] = set()  # files whose name cannot be a key (relative paths), already named
        now = _scan(path, self.special, self.unkeyed)
        # what the bucket holds: all of it just after the download; when taking over from a worker that
        # died, what had not changed since its last successful sync (`since`: the marker's mtime)
        self.sent = now if since is None else {rel: sig for rel, sig in now.items() if sig[1] <= since}
        self.seen: dict[str, tuple[int, int]] = dict(now)
        with open(f"{marker}.owner", "w") as out:
            out.write(str(os.getpid()))
        self.error: StorageError | None = None
        self.uploaded = 0
        self.deleted = 0
        self._stop = threading.Event()
        self._busy = threading.RLock()  # (re-entered by `last_flush` in a signal handler that interrupted a sync)
        interval = float(os.environ.get("SKYHIVE_STORAGE_SYNC_INTERVAL", SYNC_INTERVAL))
        self._thread = threading.Thread(target=self._loop, args=(interval,), name=f"skyhive-sync {path}", daemon=True)
        self._thread.start()

    def _loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.sync(settled_only=True)
            except StorageError as exc:  # kept for flush to raise; the loop tries again
                log.warning("%s", exc)
                self.error = exc

    def sync(self, *, settled_only: bool) -> int:
        """Upload what changed and delete from the bucket what was deleted here (both once they held still
        for one scan, unless `settled_only` is false; deletions after the uploads, so a checkpoint renamed
        over another is in the bucket under its new name before the old one goes). A file deleted before
        or while it is uploaded is skipped, and its object deleted at the next scan."""
        with self._busy:
            now = _scan(self.path, self.special, self.unkeyed)
            changed = [rel for rel, sig in now.items() if self.sent.get(rel) != sig
                       and (not settled_only or self.seen.get(rel) == sig)]
            gone = [rel for rel in self.sent if rel not in now and (not settled_only or rel not in self.seen)]
            if gone and not os.path.isdir(self.path):  # the folder itself removed (a node's home cleaned
                log.warning("%s: the mount's folder is gone; its objects in %s are kept", self.path,
                            self.mount.bucket.uri)  # up): not a deletion of every object
                gone = []
            self.seen = now
            if not changed and not gone:
                return 0
            bucket = self.mount.bucket
            skipped: list[str] = []
            upload_files(self.s3, bucket.name, [(os.path.join(self.path, rel), bucket.key(rel)) for rel in changed],
                         missing=skipped, access=self.acc)
            for rel in changed:
                if os.path.join(self.path, rel) in skipped:
                    self.seen.pop(rel, None)  # known gone: its deletion is settled at the next scan
                else:
                    self.sent[rel] = now[rel]
            if gone:
                delete_keys(self.s3, bucket.name, [bucket.key(rel) for rel in gone], one_by_one=self.acc.deletes_one_by_one)
                for rel in gone:
                    del self.sent[rel]
            self.uploaded += len(changed) - len(skipped)
            self.deleted += len(gone)
            _touch(self.marker)
            return len(changed) - len(skipped) + len(gone)

    def flush(self) -> int:
        self._stop.set()
        self._thread.join()
        self.error = None
        self.sync(settled_only=False)
        for path in sorted(self.special):  # (the job's end: said in its output, not only in the worker's log)
            sys.stderr.write(f"skyhive: {_shown(path)}: skipped, not a regular file (a FIFO, socket or device is "
                             f"never uploaded to {self.mount.bucket.uri})\n")
        present = self._unkeyed_present()
        if present:  # kept now: the pool's end may delete the folder, and this syncer is done with
            where = keep(self.path, present, self.mount.bucket.uri)
            for rel in present:
                sys.stderr.write(f"skyhive: {_shown(os.path.join(self.path, rel))}: skipped, its name is not UTF-8, "
                                 f"which a key of {self.mount.bucket.uri} must be; a copy is kept in {_shown(where)}\n")
        return self.uploaded

    def unsent(self) -> list[str]:
        """The files here whose last change the bucket does not hold."""
        changed = [rel for rel, sig in _scan(self.path, self.special, self.unkeyed).items() if self.sent.get(rel) != sig]
        return sorted(changed + self._unkeyed_present())

    def _unkeyed_present(self) -> list[str]:
        """The files here whose name cannot be a key (never uploaded) that are still here."""
        return sorted(rel for rel in self.unkeyed if os.path.lexists(os.path.join(self.path, rel)))

    def last_flush(self, deadline: float) -> None:
        """The worker is ending: upload what is unsent, by `deadline` (monotonic). What could not be
        uploaded is copied where the pool's end does not delete it (kept.py) and named in a warning."""
        self._stop.set()
        problem = ""
        if self._busy.acquire(timeout=max(0.0, deadline - time.monotonic())):  # (the loop's sync ends first)
            self._busy.release()
            try:
                self.sync(settled_only=False)
            except Exception as exc:  # noqa: BLE001 - whatever it was, what is unsent is kept below
                problem = _shown(str(exc)) if isinstance(exc, StorageError) else f"{type(exc).__name__}: {_shown(str(exc))}"
        else:
            problem = "the upload under way did not end in time"
        left = self.unsent() if os.path.isdir(self.path) else []
        if left:
            where = keep(self.path, left, self.mount.bucket.uri)
            log.warning("%s: %d file(s) could not be uploaded to %s (%s); kept in %s: %s", _shown(self.path),
                        len(left), self.mount.bucket.uri, problem or "not uploaded", _shown(where),
                        ", ".join(_shown(rel) for rel in left[:20]) + (" ..." if len(left) > 20 else ""))


def fuse_problem(tool: str = "rclone") -> str:
    """Why a FUSE mount cannot work for this process here ("" when it can)."""
    if shutil.which(tool) is None:
        return f"{tool} is not installed on this node (apt-get install {tool}, or use mode MOUNT_CACHED)"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist on this node (no FUSE in this machine or container; use MOUNT_CACHED)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return (f"/dev/fuse is not open to user {os.getuid()} on this node (mode "
                f"{oct(os.stat('/dev/fuse').st_mode & 0o777)}; use MOUNT_CACHED, or give the user access to FUSE)")
    if shutil.which("fusermount3") is None and shutil.which("fusermount") is None and os.getuid() != 0:
        return "fusermount is not installed on this node (apt-get install fuse3)"
    return ""


def _rclone_env(acc: Access) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"RCLONE_CONFIG_SKYHIVE_TYPE": "s3", "RCLONE_CONFIG_SKYHIVE_PROVIDER": "Other" if acc.endpoint_url else "AWS",
                "RCLONE_CONFIG_SKYHIVE_REGION": acc.region, "RCLONE_CONFIG_SKYHIVE_ENV_AUTH": "false"})
    if acc.endpoint_url:
        env["RCLONE_CONFIG_SKYHIVE_ENDPOINT"] = acc.endpoint_url
        env["RCLONE_CONFIG_SKYHIVE_FORCE_PATH_STYLE"] = "true"
    for var, value in (("ACCESS_KEY_ID", acc.access_key), ("SECRET_ACCESS_KEY", acc.secret_key),
                       ("SESSION_TOKEN", acc.token)):
        if value:
            env[f"RCLONE_CONFIG_SKYHIVE_{var}"] = value
    return env


def _fuse_mount(mount: Mount, path: str, acc: Access) -> None:
    problem = fuse_problem()
    if problem:
        raise StorageError(f"mounts.{mount.target}: mode MOUNT of {mount.bucket.uri} cannot work here: {problem}",
                           bucket=mount.bucket.name, cause="unsupported")
    remote = f"skyhive:{mount.bucket.name}/{mount.bucket.prefix}".rstrip("/")
    cmd = ["rclone", "mount", remote, path, "--daemon", "--daemon-wait", "30s", "--vfs-cache-mode", "off",
           "--dir-cache-time", "5s"]
    done = subprocess.run(cmd, env=_rclone_env(acc), capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise StorageError(f"mounts.{mount.target}: rclone could not mount {mount.bucket.uri} at {path}: "
                           f"{done.stderr.strip()[-2000:]}", bucket=mount.bucket.name, cause="error")
    _fuse_mounts.append(path)


def _unmount(path: str) -> None:
    tool = shutil.which("fusermount3") or shutil.which("fusermount")
    cmd = [tool, "-u", path] if tool else ["umount", path]
    subprocess.run(cmd, capture_output=True, timeout=60, check=False)


def _prepare_dir(mount: Mount, path: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".skyhive-probe-{os.getpid()}")
        with open(probe, "w"):
            pass
        os.unlink(probe)
    except OSError as exc:
        raise StorageError(f"mounts.{mount.target}: cannot create or write the folder {path} on this node: "
                           f"{exc.strerror or exc}", bucket=mount.bucket.name, cause="error") from None


def _machine_lock(session: str, path: str) -> tuple[Any, str]:
    name = hashlib.sha256(f"{session}|{path}".encode()).hexdigest()[:24]
    state = private_dir("storage")
    fh = open(state / f"{name}.lock", "a+")  # noqa: SIM115 - held until the caller releases it
    fcntl.flock(fh, fcntl.LOCK_EX)
    return fh, str(state / f"{name}.done")


def install(mounts: list[tuple[Mount, Access]], session: str, home: str | None = None, *,
            progress: bool = False) -> list[str]:
    """Put each mount in place on this machine (once per `session` and machine: a second call, from
    another worker of the same machine, finds them done). Returns the paths this call filled. Raises
    `StorageError` naming the mount, bucket, key and cause; a failed copy leaves no partial file and no
    record of being done."""
    filled = []
    _abort_orphans([acc for _, acc in mounts])  # an earlier worker's upload killed mid-way on this machine
    for mount, acc in mounts:
        path = target_path(mount.target, home)
        fh, marker = _machine_lock(session, path)
        try:
            if os.path.exists(marker):
                if mount.mode == "MOUNT_CACHED" and not _owner_alive(marker):  # its syncer's worker died
                    with _lock:
                        if path not in _syncers:
                            _syncers[path] = _Syncer(mount, path, acc, marker, since=os.stat(marker).st_mtime_ns)
                            _exit_hook()
                continue
            if mount.mode == "MOUNT":
                _prepare_dir(mount, path)
                _fuse_mount(mount, path, acc)
            else:
                _prepare_dir(mount, path)
                _remove_partials(path)
                try:
                    download_prefix(client(acc), mount.bucket.name, mount.bucket.prefix, path, progress=progress,
                                    access=acc)
                except StorageError as exc:
                    raise StorageError(f"mounts.{mount.target}: {exc}", bucket=exc.bucket, key=exc.key,
                                       cause=exc.cause) from None
            with open(marker, "w") as out:
                out.write(mount.bucket.uri)
            if mount.mode == "MOUNT_CACHED":
                with _lock:
                    old = _syncers.pop(path, None)
                    if old is not None:
                        try:
                            old.flush()
                        except StorageError:
                            _syncers[path] = old  # (its unsent files still known: kept when the worker ends)
                            raise
                    _syncers[path] = _Syncer(mount, path, acc, marker)
                    _exit_hook()
            filled.append(path)
        finally:
            fh.close()
    return filled


def _remove_partials(root: str) -> None:
    """Partial downloads left by a copy that was killed (their names carry TEMP_MARK)."""
    for dirpath, _, names in os.walk(root):
        for name in names:
            if TEMP_MARK in name:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(dirpath, name))


def _touch(marker: str) -> None:
    try:
        os.utime(marker)
    except OSError:
        pass


def _owner_alive(marker: str) -> bool:
    """Whether the worker running this mount's background upload is still alive (not a zombie)."""
    try:
        with open(f"{marker}.owner") as fh:
            pid = int(fh.read().strip())
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, ValueError, IndexError):
        return False


def active_syncers() -> list[str]:
    with _lock:
        return sorted(_syncers)


#: Seconds a worker that is ending (SIGTERM, its client gone) gives its cached mounts' last upload; the
#: one ending it waits longer before SIGKILL (`clusters/stop.py`'s WORKER_GRACE).
EXIT_FLUSH_TIME = 45.0


def flush_before_exit() -> None:
    """The worker is ending (`skyhive down`/`stop`, autostop, its client gone): every cached mount's last
    upload (`_Syncer.last_flush`), or its unsent files kept and named. Registered with the worker's
    `before_leaving` when a cached mount starts; runs in a signal handler, so no lock is waited on forever."""
    deadline = time.monotonic() + float(os.environ.get("SKYHIVE_EXIT_FLUSH_TIME", EXIT_FLUSH_TIME))
    if not _lock.acquire(timeout=5):
        log.warning("the cached mounts' registry is busy; their last upload is skipped")
        return
    try:
        syncers = list(_syncers.values())
        _syncers.clear()
    finally:
        _lock.release()
    if not syncers:  # (all flushed at their job's end)
        return
    _writers_gone(time.monotonic() + WRITERS_GRACE)
    for syncer in syncers:
        try:
            syncer.last_flush(deadline)
        except Exception:  # noqa: BLE001 - the others still get theirs
            log.exception("%s: the last upload failed", _shown(syncer.path))


#: Seconds the processes a worker's tasks started get, once told to stop, to write their last files
#: (a job trapping SIGTERM saves a checkpoint) before the last upload scans the folders.
WRITERS_GRACE = 3.0


def _writers_gone(deadline: float) -> None:
    """Wait (until `deadline`) for the other processes of the group this worker leads to end: they were
    sent SIGTERM (by `skyhive down`'s signal to the group, or the worker's `stop_tasks_first`)."""
    from ..common.procfs import group_members

    me = os.getpid()
    try:
        if os.getpgid(0) != me:
            return
    except OSError:
        return
    while group_members(me, but=me) and time.monotonic() < deadline:
        time.sleep(0.05)


def _exit_hook() -> None:
    from ..common.leaving import before_leaving

    before_leaving(flush_before_exit)


def flush(paths: list[str] | None = None) -> int:
    """Upload what the cached mounts of this process (or those at `paths`) still hold unsent, and stop
    their background sync; returns the number of files uploaded since they were installed. Raises the
    `StorageError` of an upload that failed."""
    with _lock:
        chosen = [p for p in _syncers if paths is None or p in {target_path(x) for x in paths}]
        syncers = [_syncers[p] for p in chosen]
    total, failed = 0, None
    for syncer in syncers:  # (each stays registered until flushed: a SIGTERM meanwhile still finds it, and
        try:                 # one that failed is tried again when the worker ends, its unsent files kept)
            total += syncer.flush()
        except StorageError as exc:
            failed = failed or exc
            continue
        with _lock:
            if _syncers.get(syncer.path) is syncer:
                del _syncers[syncer.path]
    if failed is not None:
        raise failed
    return total


def unmount_all() -> None:
    """Unmount this process's FUSE mounts (the pool's end)."""
    while _fuse_mounts:
        with contextlib.suppress(Exception):
            _unmount(_fuse_mounts.pop())


def _abort_orphans(accesses: list[Access]) -> None:
    from .uploads import abort_orphans

    try:
        abort_orphans(accesses)
    except Exception as exc:  # noqa: BLE001 - named; the mounts work all the same
        log.warning("unfinished uploads of ended processes could not be aborted: %s", exc)


def finish() -> None:
    """The end of a job on this machine: cached mounts flushed (`flush`), FUSE mounts unmounted, and
    the multipart uploads of processes that died here mid-copy aborted (uploads.py)."""
    with _lock:
        accesses = [s.acc for s in _syncers.values()]
    try:
        flush()
    finally:
        unmount_all()
        _abort_orphans(accesses)
