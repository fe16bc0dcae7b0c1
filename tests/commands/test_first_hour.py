"""A newcomer's first hour (issue 26): the README's commands leave a working CLI and examples, typos get
a suggestion, and the errors name what the user wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyhive.cli import main
from skyhive.runtime.commands.taskfile import TaskFileError, loads


def test_an_unknown_top_level_key_is_an_error_with_a_suggestion(tmp_path, capsys, skyhive_home):
    path = tmp_path / "typo.yaml"
    path.write_text("name: t\nrnu: echo RUN-RAN\n")
    assert main(["launch", str(path), "-y"]) == 2  # not "success" after running nothing
    err = capsys.readouterr().err
    assert f"skyhive: error: {path}:2: rnu: unknown key (did you mean run?)" in err
    assert not (Path(skyhive_home) / "pools").exists()  # nothing was started
    with pytest.raises(TaskFileError, match=r"t.yaml:1: colour: unknown key; the task file's keys are name, "):
        loads("colour: blue\nrun: echo\n", source="t.yaml", cwd=str(tmp_path))
    # a SkyPilot key skyhive does not use yet (one that changes neither where nor how long the task runs:
    # `service` is refused, tests/commands/test_task_keys_where.py), and an unknown key inside resources,
    # stay warnings
    task = loads("run: echo\nexperimental: {}\nresources:\n  disk: 3\n", source="t.yaml", cwd=str(tmp_path))
    assert task.warnings == ("t.yaml:2: experimental is not supported by skyhive yet; ignored",
                             "t.yaml:4: unknown key resources.disk (did you mean resources.disk_size?); ignored")


def test_a_misspelt_pool_keyword_gets_the_nearest_name():
    import skyhive as sky

    with pytest.raises(TypeError, match=r"Pool\(\) got unexpected keyword arguments: node \(did you mean nodes\?\)"):
        sky.Pool(node=2)
    with pytest.raises(TypeError, match=r"start_timout \(did you mean start_timeout\?\)"):  # a Settings field
        sky.Pool(start_timout=3)


def test_a_closure_over_a_lock_names_the_variable_and_an_unpicklable_result_names_the_function():
    import threading

    import skyhive as sky

    guard = threading.Lock()

    def uses_guard(x):
        with guard:
            return x

    def gives_lock():
        return threading.Lock()

    with sky.Pool(provider=sky.Local(), nodes=1) as pool:
        with pytest.raises(sky.SerializationError, match=r"function .*uses_guard\(\) cannot be pickled: its captured "
                                                         r"variable 'guard' \(_thread.lock\) cannot be pickled"):
            pool.run(uses_guard, 1)
        with pytest.raises(sky.SerializationError, match=r"the result of .*gives_lock\(\) of type lock cannot be pickled"):
            pool.run(gives_lock)
        assert pool.run(abs, -3) == 3  # the pool is fine after both


ROOT = Path(__file__).resolve().parents[2]
CORE = {"skyhive", "anyio", "msgpack", "cloudpickle", "asyncssh", "libcloud", "rich", "yaml", "packaging"}
DIST = {"sklearn": "scikit-learn"}  # import name -> distribution, where they differ
# what an extra's packages bring with them (every framework extra brings numpy)
BRINGS = {"torch": {"numpy"}, "jax": {"numpy"}, "keras": {"numpy"}}


def _extras() -> dict[str, set[str]]:
    import re
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out = {}
    for name, reqs in project["optional-dependencies"].items():
        dists = {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in reqs}
        out[name] = dists | set().union(*(BRINGS.get(d, set()) for d in dists))
    return out


def _imports(path: Path) -> set[str]:
    import ast
    import sys

    mods = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            mods |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            mods.add(node.module.split(".")[0])
    return {m for m in mods if m not in sys.stdlib_module_names and m not in CORE}


def _named_extras(text: str) -> set[str]:
    import re

    found = re.findall(r"\.venv/bin/python -m pip install -e '\.\[([a-z,]+)\]'", text)
    return {e for group in found for e in group.split(",")}


@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "examples").glob("*.py")) + ["tasks/train.yaml",
                                                                                                 "tasks/train-rdzv.yaml"])
def test_each_example_runs_after_the_demo_set_up_or_says_the_one_command(example):
    path = ROOT / "examples" / example
    needs = _imports(path if path.suffix == ".py" else path.parent / "train.py")
    extras = _extras()
    named = _named_extras(path.read_text()[:1500])  # in its first lines
    assert named <= set(extras), f"{example} names an extra pyproject.toml does not have: {named - set(extras)}"
    demo = _extras_of_demo()
    missing = {m for m in needs if DIST.get(m, m) not in set().union(*(extras[e] for e in named | demo))}
    assert not missing, f"{example} imports {missing}: not in the demo's set-up and its first lines do not say " \
                        "`.venv/bin/python -m pip install -e '.[EXTRA]'`"


def _extras_of_demo() -> set[str]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("skyhive_dev_script", ROOT / "dev.py")
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    return {e for e in dev.EXTRAS["demo"].strip("[]").split(",") if e}


def test_the_readme_says_how_to_reach_the_cli_and_the_demo_installs_what_the_readme_uses():
    import subprocess
    import sys

    readme = (ROOT / "README.md").read_text()
    assert "`.venv/bin/skyhive`" in readme and "source .venv/bin/activate" in readme
    cli = Path(sys.prefix) / "bin" / "skyhive"  # the editable install's console script, in the README's venv
    done = subprocess.run([str(cli), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "launch" in done.stdout
    assert "timeline -o pool.png" in readme and "pillow" in _extras()["timeline"] and "timeline" in _extras_of_demo()


def test_dev_py_demo_says_where_the_cli_is(monkeypatch, capsys):
    import importlib.util
    import subprocess

    spec = importlib.util.spec_from_file_location("skyhive_dev_script", ROOT / "dev.py")
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    ran = []
    monkeypatch.setattr(dev, "setup", lambda kind: ran.append(("setup", kind)))
    monkeypatch.setattr(dev.subprocess, "run", lambda cmd, **kw: ran.append(cmd) or subprocess.CompletedProcess(cmd, 0))
    assert dev.main(["demo"]) == 0
    assert ran[0] == ("setup", "demo") and ran[1][1] == "examples/demo.py"  # the demo itself is not run here
    out = capsys.readouterr().out
    assert f"{ROOT / '.venv' / 'bin' / 'skyhive'}" in out and "source .venv/bin/activate" in out


@pytest.mark.parametrize("task_file", ["train.yaml", "train-rdzv.yaml"])
def test_the_torch_task_examples_say_the_command_when_torch_is_missing(tmp_path, task_file):
    import os
    import subprocess
    import sys

    import yaml

    setup = yaml.safe_load((ROOT / "examples" / "tasks" / task_file).read_text())["setup"]
    shim = tmp_path / "python"  # a Python without site-packages: no torch
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    shim.chmod(0o755)
    done = subprocess.run(["bash", "-c", setup], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "SKYPILOT_SETUP_NODE_RANK": "0"})
    assert done.returncode == 1
    assert "this example needs torch: .venv/bin/python -m pip install -e '.[torch]'" in done.stderr
