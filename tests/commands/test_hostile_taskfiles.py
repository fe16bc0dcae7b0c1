"""Hostile task files (issue 22, point 6): YAML python tags, binary data, UTF-16, 10,000-deep nesting, a
64 MB file, a device. Each is `skyhive launch` (and `launch -c`) exiting 2 with one line naming the
file and what is wrong — no traceback, within seconds — and nothing created or run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from skyhive.errors import TaskFileError
from skyhive.runtime.commands.taskfile import load, loads

SKYHIVE = [sys.executable, "-m", "skyhive"]


def hostile(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name -> (task file, what the error must say)."""
    marker = tmp_path / "PWNED"
    files = {
        "python-tag": (f'run: !!python/object/apply:os.system ["touch {marker}"]\n'.encode(),
                       r":1:6: could not determine a constructor for the tag "
                       r"'tag:yaml.org,2002:python/object/apply:os.system' \(task files hold plain values\)"),
        "python-name": (b"run: echo\nname: !!python/name:os.system\n",
                        r":2:7: could not determine a constructor for the tag 'tag:yaml.org,2002:python/name:os.system'"),
        "binary": (bytes(range(256)) * 4, r": a binary file, not YAML text: a NUL byte at offset 0"),
        "latin1": ("run: echo caf\xe9\n".encode("latin-1"), r": not UTF-8 text: byte 0xe9 at offset 13 \(line 1\)"),
        "utf16": ("run: echo hi\n".encode("utf-16"), r": the file is UTF-16 text \(it starts with a UTF-16 byte-order mark\)"),
        "utf16-nobom": ("run: echo hi\n".encode("utf-16-le"), r": a binary file, not YAML text: a NUL byte at offset 1 "
                        r"\(UTF-16 text without a byte-order mark\? save it as UTF-8\)"),
        "deep-flow": (b"run: " + b"[" * 10_000 + b"]" * 10_000 + b"\n", r":1:69: not valid YAML: nested deeper than 64 levels"),
        "deep-block": ("".join(" " * i + f"k{i}:\n" for i in range(200)).encode(),
                       r":64:64: not valid YAML: nested deeper than 64 levels"),
        "huge": (b"run: echo hi\n" + b"# " + b"x" * (64 << 20) + b"\n",
                 r": 64.0 MiB is too large for a task file \(at most 1.0 MiB; data goes in workdir or file_mounts\)"),
    }
    out = {}
    for name, (data, problem) in files.items():
        path = tmp_path / f"{name}.yaml"
        path.write_bytes(data)
        out[name] = (path, problem)
    return out


def test_each_hostile_file_is_a_task_file_error_naming_the_file(tmp_path):
    for name, (path, problem) in hostile(tmp_path).items():
        with pytest.raises(TaskFileError) as err:
            load(path)
        import re

        assert re.fullmatch(re.escape(str(path)) + problem + ".*", str(err.value)), (name, str(err.value))
        assert "\n" not in str(err.value)
    assert not (tmp_path / "PWNED").exists()
    with pytest.raises(TaskFileError, match=r"/dev/zero: not a regular file"):
        load("/dev/zero")


def test_64_levels_still_read(tmp_path):
    text = "run: echo\nenvs:\n  A: " + "[" * 61 + "1" + "]" * 61 + "\n"  # mapping, mapping, then 61 lists and the scalar
    with pytest.raises(TaskFileError, match=r"t.yaml:3: envs.A: expected a plain value, got a list"):
        loads(text, source="t.yaml")  # past the depth check: refused for what it is, not for its depth


@pytest.mark.parametrize("cluster", [[], ["-c", "hostile"]], ids=["launch", "launch-c"])
def test_launch_exits_2_with_one_line_and_creates_nothing(tmp_path, skyhive_home, cluster):
    for name, (path, problem) in hostile(tmp_path).items():
        done = subprocess.run([*SKYHIVE, "launch", "-y", *cluster, str(path)], capture_output=True, text=True,
                              timeout=60)  # the 64 MB file took over a minute before
        assert done.returncode == 2, (name, done.stdout, done.stderr)
        (line,) = done.stderr.splitlines()
        import re

        assert re.fullmatch("skyhive: error: " + re.escape(str(path)) + problem + ".*", line), (name, line)
        assert not (tmp_path / "PWNED").exists()
        assert list(Path(skyhive_home).rglob("*")) == [], name
