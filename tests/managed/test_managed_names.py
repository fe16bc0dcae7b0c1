"""A managed job's name is checked when it is launched (issue 36, point 4): quotes, `;`, a path, unicode,
an empty or a 300-character name are refused with the rule, before anything is recorded — the name makes
the job's pools and their files (`<name>-job<ID>-<attempt>`). And `skyhive jobs queue` lists the jobs
whatever records it finds on disk: an odd one is shown or skipped with a warning, never a crash."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import skyhive as sky
from tests.clusters.test_clusters import running_under
from tests.managed.test_managed_jobs import SKYHIVE

RULE = "a letter or digit, then letters, digits, '.', '_' or '-', at most 63 characters in all"
BAD = {"quote": "it's", "semicolon": "a;touch x", "path": "../../etc", "unicode": "naïve", "long": "a" * 300,
       "empty": "", "space": "two words", "dash": "-v"}


def skyhive(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SKYHIVE, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def recorded(home: str) -> list[str]:
    managed = Path(home) / "managed"
    return sorted(p.name for p in managed.iterdir() if p.name.isdigit()) if managed.is_dir() else []


@pytest.mark.parametrize("kind", sorted(BAD))
def test_a_bad_job_name_is_refused_at_launch_and_nothing_is_recorded(tmp_path, skyhive_home, kind):
    name = BAD[kind]
    task = tmp_path / "task.yaml"
    task.write_text("resources:\n  cloud: local\nrun: echo hi\n")
    done = skyhive("jobs", "launch", "-y", f"--name={name}", str(task), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"-n/--name {name!r}: a name is {RULE}" in done.stderr
    assert "submitted" not in done.stdout
    assert recorded(skyhive_home) == [] and running_under(skyhive_home) == []
    assert not (tmp_path / "x").exists()  # (`a;touch x` never reached a shell)
    listed = skyhive("jobs", "queue", cwd=tmp_path)
    assert listed.returncode == 0 and listed.stdout == "no managed jobs\n", listed.stdout + listed.stderr


def named_task(tmp_path: Path, name: str) -> Path:
    task = tmp_path / "task.yaml"
    task.write_text(f"name: {json.dumps(name)}\nresources:\n  cloud: local\nrun: echo hi\n")
    return task


def test_a_bad_name_in_the_task_file_or_from_python_is_refused_too(tmp_path, skyhive_home):
    done = skyhive("jobs", "launch", "-y", str(named_task(tmp_path, "../../etc")), cwd=tmp_path)
    assert done.returncode == 2 and "expected a name of letters, digits" in done.stderr, done.stderr
    good = named_task(tmp_path, "fine")
    with pytest.raises(ValueError, match=rf"sky.jobs.launch\(name='\.\./x'\): a managed job's name is {RULE}"):
        sky.jobs.launch(str(good), name="../x")

    @sky.compute
    def answer() -> int:
        return 42

    with pytest.raises(ValueError, match="a managed job's name is"):
        sky.jobs.launch(answer(), name="a" * 300)
    assert recorded(skyhive_home) == [] and running_under(skyhive_home) == []


def write_job(home: str, job_id: int, lines: list[bytes | dict]) -> Path:
    folder = Path(home) / "managed" / str(job_id)
    folder.mkdir(parents=True, mode=0o700)
    path = folder / "events.jsonl"
    path.write_bytes(b"".join(line if isinstance(line, bytes) else json.dumps(line).encode() + b"\n"
                              for line in lines))
    return path


def test_jobs_queue_survives_any_record_on_disk(tmp_path, skyhive_home):
    long = "a" * 300
    (Path(skyhive_home) / "pools").mkdir(mode=0o700)  # with it there, a 300-character pool name is looked up
    write_job(skyhive_home, 1, [  # what the old `jobs launch -n aaa...` recorded
        {"kind": "submitted", "time": 1.0, "name": long, "max_restarts_on_errors": 0},
        {"kind": "attempt", "time": 2.0, "attempt": 1, "pool": f"{long}-job1-1", "pid": 1},
        {"kind": "failed", "time": 3.0, "detail": "ValueError: cannot name a pool"}])
    write_job(skyhive_home, 2, [  # a path as a name: never looked up outside the state directory
        {"kind": "submitted", "time": 1.0, "name": "../../etc", "max_restarts_on_errors": 0},
        {"kind": "attempt", "time": 2.0, "attempt": 1, "pool": "../../etc-job2-1", "pid": 1},
        {"kind": "failed", "time": 3.0, "detail": "refused"}])
    write_job(skyhive_home, 3, [  # odd events among good ones
        {"kind": "submitted", "time": 1.0, "name": "odd\x1b[31m\nname", "max_restarts_on_errors": 0},
        b"not json at all\n", b"\xff\xfe latin-1 \xe9\n", b"[1, 2]\n",
        {"kind": "controller", "time": 1.5, "pid": "many"},
        {"kind": "attempt", "attempt": 1, "pool": "odd-job3-1"},  # no time
        {"kind": "attempt", "time": "soon", "attempt": 1, "pool": "odd-job3-1"},
        {"kind": "failed", "time": 4.0, "detail": "bad\x07bell"}])
    (Path(skyhive_home) / "managed" / "4").mkdir(mode=0o700)
    (Path(skyhive_home) / "managed" / "4" / "events.jsonl").mkdir()  # unreadable as a file
    write_job(skyhive_home, 5, [{"kind": "submitted", "time": 1.0, "name": "fine", "max_restarts_on_errors": 0},
                                {"kind": "succeeded", "time": 2.0, "detail": "exit 0"}])

    table = skyhive("jobs", "queue", cwd=tmp_path)
    assert table.returncode == 0, table.stdout + table.stderr
    rows = {line.split()[0]: line for line in table.stdout.splitlines()[1:]}
    assert sorted(rows) == ["1", "2", "3", "5"], table.stdout
    assert "a" * 60 + "..." in rows["1"] and long not in rows["1"] and "FAILED" in rows["1"]
    assert "../../etc" in rows["2"] and "FAILED" in rows["2"]
    assert "\x1b" not in table.stdout and "\x07" not in table.stdout
    assert "odd\\x1b[31m\\nname" in rows["3"] and "FAILED" in rows["3"] and "bad\\x07bell" in rows["3"]
    assert "SUCCEEDED" in rows["5"]
    events3 = Path(skyhive_home) / "managed" / "3" / "events.jsonl"
    skipped = f"managed job 3: an event of {events3} skipped"
    assert f"{skipped} (ValueError: invalid literal for int() with base 10: 'many')" in table.stderr
    assert f"{skipped} (KeyError: 'time')" in table.stderr  # the attempt without a time
    assert f"{skipped} (ValueError: could not convert string to float: 'soon')" in table.stderr
    assert table.stderr.count(f"{skipped} (KeyError") == 1  # said once per command
    assert f"managed job 4: its record {Path(skyhive_home) / 'managed' / '4'} cannot be read" in table.stderr

    as_json = skyhive("jobs", "queue", "--json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    jobs = {j["id"]: j for j in map(json.loads, as_json.stdout.splitlines())}
    assert sorted(jobs) == [1, 2, 3, 5]
    assert (jobs[1]["name"], jobs[1]["cost_usd"]) == (long, None)
    assert jobs[3]["name"] == "odd\x1b[31m\nname" and jobs[3]["attempts"] == 0
    assert sorted(j["id"] for j in sky.jobs.queue()) == [1, 2, 3, 5]  # from Python too
    assert running_under(skyhive_home) == []  # no controller started for a finished job
    assert sorted(os.listdir(Path(skyhive_home) / "pools")) == []
