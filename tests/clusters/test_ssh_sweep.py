"""The named SSH pool's cleanup sweep (`runtime/kinds/ssh/cluster.py`), run here with `sh -s` as the hosts
run it (no SSH needed: a host's sweep only reads /proc and the login user's home).

A `down` that races the pool's autostop — its watchdog has found the pool idle and runs
`<cluster>.wd/autostop.sh`, which stops the pool and then writes the mark `<cluster>.autostop` — must
end that script, else the mark appears after the sweep removed the pool's files (what CI caught as
"socket directories left on the hosts" at the end of an autostop test), and a new pool of the same
name would be found "stopped by autostop" by the next client attaching.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

from skyhive.runtime.kinds.ssh.cluster import sweep_script

# unique per test process: the sweep matches the script by its command line, whatever the HOME, so
# another xdist process's `down` sweep of a same-named pool would end this one's script (cx18)
CLUSTER = f"c-race-{secrets.token_hex(4)}"


def start_autostop_script(home) -> subprocess.Popen:
    """A stand-in for the watchdog's autostop script: the same path and command line, waiting for the
    file `go` before it writes the mark (as the real one does once it has stopped the pool)."""
    run = home / ".skyhive" / "run"
    wd = run / f"{CLUSTER}.wd"
    wd.mkdir(parents=True, mode=0o700)
    (run / CLUSTER).mkdir(mode=0o700)
    script = wd / "autostop.sh"
    script.write_text(f'while [ ! -e "{home}/go" ]; do sleep 0.05; done\necho autostop > "{run}/{CLUSTER}.autostop"\n')
    # as the watchdog runs it: /bin/sh -c "sh <wd>/autostop.sh"
    return subprocess.Popen(["/bin/sh", "-c", f"sh {script}"], env={**os.environ, "HOME": str(home)})


def children(pid: int) -> set[int]:
    """The processes whose parent is `pid` (the script's `sh` under `/bin/sh -c`)."""
    found = set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as fh:
                if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.add(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return found


def sweep(home, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-s"], input=sweep_script(CLUSTER, "race", "kill", 0.5, **kw), text=True,
                          capture_output=True, env={**os.environ, "HOME": str(home)}, timeout=120)


def test_down_ends_a_running_autostop_script_so_no_mark_appears_after_it(tmp_path):
    proc = start_autostop_script(tmp_path)
    try:
        out = sweep(tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr
        # the sweep returns once what it signalled is gone: the script can no longer write the mark
        assert proc.wait(timeout=60) != 0
        (tmp_path / "go").touch()
        run = tmp_path / ".skyhive" / "run"
        assert sorted(os.listdir(run)) == [], out.stdout
    finally:
        proc.kill()
        proc.wait()


def test_the_autostop_scripts_own_sweep_leaves_it_running(tmp_path):
    """Inside the autostop script the sweep must not match the script (its subshells share its command
    line): it would end itself before writing the mark."""
    proc = start_autostop_script(tmp_path)
    try:
        script = {proc.pid, *children(proc.pid)}
        out = sweep(tmp_path, from_autostop=True)
        assert out.returncode == 0, out.stdout + out.stderr
        # what the sweep signalled (its `K pid` lines): never the script (a check on the sweep's own
        # report, not on the script's life, which another test process's cleanup could end under load)
        signalled = {int(ln.split()[1]) for ln in out.stdout.splitlines() if ln.startswith("K ")}
        assert not signalled & script, ("the autostop's own sweep ended the autostop script", out.stdout)
        assert proc.poll() is None, (proc.returncode, out.stdout)
        (tmp_path / "go").touch()
        assert proc.wait(timeout=60) == 0
        assert (tmp_path / ".skyhive" / "run" / f"{CLUSTER}.autostop").read_text() == "autostop\n"
    finally:
        proc.kill()
        proc.wait()


if sys.platform != "linux":  # pragma: no cover - the sweep reads /proc
    import pytest

    pytestmark = pytest.mark.skip(reason="the sweep reads /proc (Linux)")
