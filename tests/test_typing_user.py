"""A user's script type-checks against skyhive's public API in the README's dev environment (issue 26
point 6): mypy --strict and pyright find `skyhive` (through the stub view `dev.py` makes, as the editable
install's import hook is invisible to them), `f(x) >> pool` / `f(x) @ pool` / `pool.run(f, ...)` have the
function's types, and wrong arguments are errors — exactly the lines marked `# E` in the script, each one
line: `run`/`broadcast` have one signature, their call options typed through `pool.options(...)` (issue 39
point 7: a wrong argument printed "No overload variant ... matches" and an overload per option)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).with_name("typing_user_script.py")
EXPECTED = {i for i, line in enumerate(SCRIPT.read_text().splitlines(), 1) if "# E:" in line}


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("skyhive_dev_script", ROOT / "dev.py")
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    dev.type_checker_view()  # what `python3 dev.py demo|test` leave in the venv
    where = tmp_path_factory.mktemp("user")  # outside the repository, as a user's project is
    shutil.copy(SCRIPT, where / "script.py")
    return where


@pytest.mark.slow
def test_mypy_strict_finds_skyhive_and_checks_the_users_calls(user_dir):
    pytest.importorskip("mypy", reason="mypy is in the dev extra: python3 dev.py test installs it")
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "script.py"],
                          cwd=user_dir, capture_output=True, text=True, timeout=600)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert not any("import-not-found" in e or "import-untyped" in e for e in errors), done.stdout
    assert {int(re.match(r"script.py:(\d+):", e).group(1)) for e in errors} == EXPECTED, done.stdout
    assert "untyped-decorator" not in done.stdout and "Any" not in "".join(errors)
    assert "overload" not in done.stdout and len(errors) == len(EXPECTED), done.stdout  # one line per mistake
    assert not [line for line in done.stdout.splitlines() if ": note:" in line], done.stdout


@pytest.mark.slow
def test_pyright_strict_agrees(user_dir):
    pyright = Path(sys.prefix) / "bin" / "basedpyright"
    if not pyright.exists():
        pytest.skip("basedpyright (pyright, packaged for pip) is in the dev extra: python3 dev.py test installs it")
    (user_dir / "pyrightconfig.json").write_text('{"typeCheckingMode": "strict", "reportMissingModuleSource": "none"}')
    done = subprocess.run([str(pyright), "--pythonpath", sys.executable, "script.py"], cwd=user_dir,
                          capture_output=True, text=True, timeout=600)
    errors = [line for line in done.stdout.splitlines() if " - error: " in line]
    assert {int(re.search(r"script.py:(\d+):", e).group(1)) for e in errors} == EXPECTED, done.stdout
    assert "No overloads" not in done.stdout, done.stdout
