"""A task's `setup:` and `run:` of any length run (issue 36 point 9): a script was one argument of
`bash -c`, and one argument is limited to 128 KiB — a 300 KiB `run:` failed with `Argument list too
long` — and visible to every local user in `ps`. Now a script is run from a private file: a named
Local pool runs a 300 KiB `setup:` and `run:`, no process's arguments hold their text while they
run, and the files are gone afterwards (the `clean` fixture: nothing left running, no record)."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

from tests.clusters.test_clusters import SKYHIVE, clean, skyhive, wait_for  # noqa: F401 - `clean`: a fixture

SIZE = 300 * 1024


def long_script(marker: str, body: str) -> str:
    """`body` after comment lines holding `marker`, SIZE bytes and more in all, indented for YAML."""
    line = f"# {marker} {'x' * 60}\n"
    text = line * (SIZE // len(line) + 1) + body
    return "".join(f"  {row}\n" for row in text.splitlines())


def arguments_holding(needle: bytes) -> list[int]:
    """The processes whose command line holds `needle`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if needle in fh.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


def test_a_300_kib_setup_and_run_on_a_named_pool(tmp_path, clean):
    marker = f"long-script-{uuid.uuid4().hex}"
    started, release = tmp_path / "started", tmp_path / "release"
    run = (f'touch "{started}"\n'
           f'for i in $(seq 1200); do [ -e "{release}" ] && break; sleep 0.1; done\n'  # (at most 2 minutes)
           'echo "run ok on node $SKYPILOT_NODE_RANK"\n')
    task = tmp_path / "big.yaml"
    task.write_text("name: big\nsetup: |\n" + long_script(marker, 'echo "setup ok"') + "run: |\n"
                    + long_script(marker, run))
    assert task.stat().st_size > 2 * SIZE
    proc = subprocess.Popen([*SKYHIVE, "launch", "-c", "big", str(task)], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: started.exists() or proc.poll() is not None, timeout=120, what="run to start")
        assert proc.poll() is None, proc.communicate()
        assert arguments_holding(marker.encode()) == []  # the script's text is in no process's arguments
        scripts = Path(clean) / "scripts"
        assert [p.name[:4] for p in scripts.iterdir()] == ["run-"]  # the running one: setup's is gone
        assert (scripts / next(scripts.iterdir()).name).stat().st_mode & 0o077 == 0
        release.touch()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "setup ok" in out and "run ok on node 0" in out, out
    assert "Argument list too long" not in out + err
    assert list(scripts.iterdir()) == []
    # `exec` on the same pool: the same, through the pool's job queue
    release.unlink()
    started.unlink()
    release.touch()
    again = skyhive("exec", "big", str(task), cwd=tmp_path)
    assert again.returncode == 0 and "run ok on node 0" in again.stdout, again.stderr
    assert list(scripts.iterdir()) == []
