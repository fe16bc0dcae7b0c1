"""What users of other tools expect of a command line (issue 26 point 7): NO_COLOR, -v / --log-level,
--json on status, queue and show-gpus, `status NAME`."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skyhive.cli import main
from skyhive.runtime.output.printer import TerminalPrinter

SKYHIVE = [sys.executable, "-m", "skyhive"]


def skyhive(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SKYHIVE, *args], cwd=cwd, capture_output=True, text=True, timeout=180,
                          env={**os.environ, **(env or {})})


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("no_color, coloured", [("", True), ("1", False)])
def test_node_prefixes_are_coloured_on_a_terminal_unless_no_color(monkeypatch, no_color, coloured):
    monkeypatch.setenv("NO_COLOR", no_color)  # https://no-color.org: set and not empty
    out = _Terminal()
    TerminalPrinter(multi_process=False, stdout=out).feed(3, 0, 1, "hello\n", 0.0)
    assert ("\x1b[" in out.getvalue()) is coloured
    assert out.getvalue().endswith("[node 3]" + ("\x1b[0m" if coloured else "") + " hello\n")


def test_verbose_and_log_level_show_the_pools_life(tmp_path):
    (tmp_path / "t.yaml").write_text("run: echo hi\n")
    quiet = skyhive("launch", "t.yaml", cwd=tmp_path)
    assert quiet.returncode == 0 and "node_state" not in quiet.stderr
    for args, env in ((["-v", "launch", "t.yaml"], {}), (["launch", "t.yaml", "-v"], {}),
                      (["launch", "t.yaml", "--log-level", "info"], {}), (["launch", "t.yaml"], {"SKYHIVE_LOG_LEVEL": "INFO"})):
        said = skyhive(*args, cwd=tmp_path, env=env)
        assert said.returncode == 0, said.stderr
        assert "node_state node=0 state=ready" in said.stderr and "pool_stopped" in said.stderr, (args, said.stderr)
    bad = skyhive("--log-level", "loud", "ls", cwd=tmp_path)
    assert bad.returncode == 2 and "--log-level" in bad.stderr


def test_show_gpus_json(capsys):
    assert main(["show-gpus", "A100:8", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows and all(r["accelerator"] == "A100" and r["count"] == 8 for r in rows)
    assert set(rows[0]) == {"accelerator", "count", "cloud", "instance_type", "vcpus", "memory_gb", "price_per_hour",
                            "region"}
    assert isinstance(rows[0]["price_per_hour"], float) and isinstance(rows[0]["vcpus"], int)


@pytest.mark.slow
def test_status_of_one_pool_and_json_on_status_and_queue(tmp_path, skyhive_home):
    (tmp_path / "t.yaml").write_text("name: greet\nrun: echo hi\n")
    assert skyhive("launch", "-c", "habits", "t.yaml", cwd=tmp_path).returncode == 0
    try:
        shown = skyhive("status", "habits", cwd=tmp_path)
        assert shown.returncode == 0 and shown.stdout.splitlines()[1].startswith("habits ")
        rows = [json.loads(line) for line in skyhive("status", "--json", cwd=tmp_path).stdout.splitlines()]
        assert [(r["name"], r["nodes"], r["state"]) for r in rows] == [("habits", 1, "UP")]
        missing = skyhive("status", "habits", "nosuch", cwd=tmp_path)
        assert missing.returncode == 1 and "no named pool nosuch" in missing.stderr
        jobs = [json.loads(line) for line in skyhive("queue", "habits", "--json", cwd=tmp_path).stdout.splitlines()]
        assert [(j["id"], j["name"], j["state"], j["exit_code"]) for j in jobs] == [(1, "greet", "SUCCEEDED", 0)]
        assert "env" not in jobs[0] and "secrets" not in jobs[0]
    finally:
        assert skyhive("down", "habits", cwd=tmp_path).returncode == 0


@pytest.mark.slow
def test_a_local_image_build_shows_its_progress_on_a_terminal(tmp_path, skyhive_home):
    import pty
    import select

    from tests.kinds.local.test_local_image import _wheel

    wheels, empty = tmp_path / "wheels", tmp_path / "empty"
    wheels.mkdir()
    empty.mkdir()
    _wheel(wheels, "skyhive-probe-pkg", "1.2.3")
    script = tmp_path / "build.py"
    script.write_text(
        "import skyhive as sky\n"
        f"image = sky.Image(pip=['skyhive-probe-pkg==1.2.3'], find_links=[{str(wheels)!r}], "
        f"pip_indexes=[{empty.as_uri()!r}])\n"
        "with sky.Pool(provider=sky.Local(), nodes=1, image=image) as pool:\n"
        "    print('RESULT', pool.run(abs, -1))\n")
    master, slave = pty.openpty()  # stderr is a terminal, as in a user's shell
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        seen += chunk
    out, _ = proc.communicate(timeout=60)
    os.close(master)
    assert proc.returncode == 0 and b"RESULT 1" in out
    text = seen.decode(errors="replace")
    assert "building environment: venv" in text and "building environment: pip" in text, text[-2000:]
    assert "1 ready" in text  # the summary line left behind
