"""The cleanup sweep the SSH provider runs on each host of a pool (`SSH.list_owned` and `SSH.destroy`,
and for a named pool `runtime/kinds/ssh/cluster.py`): one shell script per host, sent on stdin to `sh -s`,
what it prints, and the names it matches by (`collections_prefix`, `ere`)."""

from __future__ import annotations

import hashlib
import json
import re
import shlex

from .base import ProvisionError

__all__ = ["SWEEP", "collections_prefix", "ere", "kept_report", "sweep_report", "sweep_script"]


# The sweep run on each host by `list_owned` (MODE=list) and `destroy` (MODE=kill), with `sh -s`: the
# script travels on stdin, so no command line on the host holds the patterns it looks for. It finds
# the login user's live processes (zombies are already dead) whose environment has the pool's
# `COMPUTE_POOL` (the workers and what their tasks started) or whose command line names one of the
# pool's sockets, and the pool's entries in the socket directories, with the directories of its
# collections' forwarded sockets (`RE_COLL`) but those where a live socket is still bound (a live
# client's sshd forward: that client removes its own when it leaves; a kill waits up to GRACE for one
# whose client just died, as its sshd session ends). Output lines: `P pid cmdline`,
# `F path` (list); `K pid` signalled, `L pid` still there, `R path` removed, `U path` a folder of files
# the ending workers could not upload and kept (kill). Linux (/proc).
SWEEP = r"""
set -u
me=$$
[ -d /proc/$$ ] || { echo "no /proc on this host" >&2; exit 3; }
printf 'a\0' | grep -qaz a 2>/dev/null || { echo "this host's grep lacks -z" >&2; exit 3; }
pids() {
  { grep -lazE -e "$RE_ENV" /proc/[0-9]*/environ; grep -lazE -e "$RE_CMD" /proc/[0-9]*/cmdline; } 2>/dev/null |
    sed -n 's#^/proc/\([0-9][0-9]*\)/.*#\1#p' | sort -un |
    while read -r p; do
      [ "$p" = "$me" ] && continue
      [ -O "/proc/$p" ] || continue
      echo "$p"
    done | alive
}
alive() {
  while read -r p; do
    s=$(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null) || continue
    case $s in Z*|X*|x*|"") ;; *) echo "$p" ;; esac
  done
}
files() {
  for d in "$HOME/.skyhive/run" "/tmp/skyhive-$(id -un)"; do
    [ -d "$d" ] && [ -O "$d" ] || continue
    ls -A "$d" 2>/dev/null | grep -E -e "$RE_FILE" | while IFS= read -r f; do echo "$d/$f"; done
  done
  colls "${1:-0}"
  d="$HOME/.skyhive/work"  # the pool's working directory (nodecmd.work_root), left by a node that was lost
  if [ -d "$d" ] && [ -O "$d" ]; then
    ls -A "$d" 2>/dev/null | grep -E -e "$RE_WORK" | while IFS= read -r f; do echo "$d/$f"; done
  fi
}
bound() {  # bound DIR: a live Unix socket is bound at DIR/s.sock (/proc/net/unix: this host's, its netns)
  [ -r /proc/net/unix ] || return 1
  while read -r _ _ _ _ _ _ _ path; do [ "$path" = "$1/s.sock" ] && return 0; done < /proc/net/unix
  return 1
}
colls() {  # colls [TENTHS]: the pool's collections directories, but those still bound (waited for up to TENTHS)
  for d in "$HOME/.skyhive/run" "/tmp/skyhive-$(id -un)"; do
    [ -d "$d" ] && [ -O "$d" ] || continue
    ls -A "$d" 2>/dev/null | grep -E -e "$RE_COLL" | while IFS= read -r f; do
      i=0
      while bound "$d/$f" && [ "$i" -lt "${1:-0}" ]; do nap; i=$((i + 1)); done
      bound "$d/$f" || echo "$d/$f"
    done
  done
}
nap() { sleep 0.1 2>/dev/null || sleep 1; }
wait_gone() {  # wait_gone TENTHS PIDS...: the PIDS still alive after at most TENTHS tenths of a second
  n=$1; shift; left="$*"; i=0
  while [ -n "$left" ] && [ "$i" -lt "$n" ]; do
    nap; left=$(for p in $left; do echo "$p"; done | alive); i=$((i + 1))
  done
  echo $left
}
if [ "$MODE" = list ]; then
  for p in $(pids); do
    printf 'P %s %s\n' "$p" "$(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-300)"
  done
  files | sed 's/^/F /'
  exit 0
fi
t0=$(mktemp 2>/dev/null) || t0=""  # what the pool's workers keep from here on is new (`U path` below)
found=$(pids)
for p in $found; do echo "K $p"; done
[ -n "$found" ] && kill -TERM $found 2>/dev/null
found=$(wait_gone "$GRACE" $found)
round=0
while [ "$round" -lt 5 ]; do  # SIGKILL what is left, and whatever of the pool appeared meanwhile
  found=$({ for p in $found; do echo "$p"; done | alive; pids; } | sort -un)
  [ -z "$found" ] && break
  for p in $found; do echo "K $p"; done
  kill -KILL $found 2>/dev/null
  found=$(wait_gone 30 $found)
  round=$((round + 1))
done
found=$({ for p in $found; do echo "$p"; done | alive; pids; } | sort -un)
for p in $found; do echo "L $p"; done
files "$GRACE" | while IFS= read -r f; do rm -rf -- "$f" && echo "R $f"; done
d="$HOME/.skyhive/storage/unsent"  # what the ending workers could not upload (runtime/storage/kept.py)
if [ -n "$t0" ]; then
  [ -d "$d" ] && find "$d" -mindepth 1 -maxdepth 1 -newer "$t0" 2>/dev/null | sed 's/^/U /'
  rm -f -- "$t0"
fi
[ -z "$found" ]
"""


def collections_prefix(pool_key: str) -> str:
    """How the directories of the collections' forwarded sockets of a pool begin on its hosts
    (`<prefix>-<digest of the client's socket>-n<node>`, runtime/kinds/ssh/collections.py), for
    `pool_key`: a named pool's socket directory (`runtime/nodes/keep.py` `cluster_key`), else the pool id. So the
    pool's cleanup sweep finds them without knowing the client's socket."""
    return f"coll-{hashlib.sha256(pool_key.encode()).hexdigest()[:8]}"


def ere(text: str) -> str:
    """`text` as a POSIX extended regular expression matching it literally."""
    return re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\1", text)


def sweep_script(pool_id: str, mode: str, grace: float) -> str:
    """The sweep for the pool `pool_id` (MODE `list` or `kill`, with `grace` seconds between SIGTERM and
    SIGKILL): the variables it matches by, then the script."""
    if not pool_id or "/" in pool_id or any(ord(c) < 32 for c in pool_id):
        raise ProvisionError(f"cannot clean up pool {pool_id!r}: not a pool id")
    pid_re = ere(pool_id)
    variables = {
        "MODE": mode,
        "GRACE": str(max(1, round(grace * 10))),
        # COMPUTE_POOL is compact JSON (protocol.info.InstanceInfo.to_json), the id JSON-encoded
        "RE_ENV": "^COMPUTE_POOL=.*" + ere(f'"pool_id":{json.dumps(pool_id)}'),
        # the worker's socket: <run dir>/<pool>-<client pid>-<n>.sock (runtime/kinds/ssh)
        "RE_CMD": f"(^|/){pid_re}-[0-9]+-[0-9]+\\.sock$",
        # that socket, its .log and .exit files, and a directory named after the pool
        "RE_FILE": f"^{pid_re}(-[0-9]+-[0-9]+\\.sock(\\..*)?)?$",
        # its working directory under ~/.skyhive/work (named after the pool: `skyhive launch`, a managed job)
        "RE_WORK": f"^{pid_re}$",
        # the directories of its collections' forwarded sockets (runtime/kinds/ssh/collections.py)
        "RE_COLL": f"^{collections_prefix(pool_id)}-[0-9a-f]+-n[0-9]+$",
    }
    return "".join(f"{k}={shlex.quote(v)}\n" for k, v in variables.items()) + SWEEP


def kept_report(out: str) -> list[str]:
    """The folders a kill sweep found new in the host's `~/.skyhive/storage/unsent/`: files the pool's ending
    workers could not upload to their bucket, kept there (`UNSENT.txt` in each lists them)."""
    return [ln[2:] for ln in out.splitlines() if ln.startswith("U ")]


def sweep_report(out: str) -> tuple[list[int], list[str], list[str]]:
    """What a sweep script printed: (pids it killed, pids left after SIGKILL, paths it removed)."""
    lines = out.splitlines()
    killed = sorted({int(ln.split()[1]) for ln in lines if ln.startswith("K ")})
    left = [ln.split()[1] for ln in lines if ln.startswith("L ")]
    removed = [ln[2:] for ln in lines if ln.startswith("R ")]
    return killed, left, removed
