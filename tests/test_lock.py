"""The test set-up is locked (requirements/test.lock, made by uv through `python3 dev.py lock`): every
requirement of what `dev.py` installs has a pin that satisfies it, pip and the build backend included, and
`dev.py test --latest` is the one way the pins move (it prints what drifted)."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def _dev():
    spec = importlib.util.spec_from_file_location("skyhive_dev_script", ROOT / "dev.py")
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    return dev


def _pins() -> dict[str, Version]:
    return {canonicalize_name(name): Version(v) for name, v in _dev().pins(ROOT / "requirements" / "test.lock").items()}


def _installed_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wanted = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
    for kind in _dev().EXTRAS.values():
        for extra in kind.strip("[]").split(","):
            wanted += project["project"]["optional-dependencies"][extra]
    wanted += [line for line in (ROOT / "requirements" / "tools.in").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    return [Requirement(w) for w in wanted]


def test_every_requirement_of_the_set_up_has_a_pin_that_satisfies_it():
    pins = _pins()
    for req in _installed_requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} is not in requirements/test.lock: run `python3 dev.py lock`"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"requirements/test.lock pins {name} {pins[name]}, which {req} refuses: run `python3 dev.py lock`"


def test_pip_the_build_backend_and_the_lock_tool_are_locked_too():
    pins = _pins()
    assert {"pip", "setuptools", "wheel", "uv", "pytest-timeout"} <= pins.keys()
    assert str(pins["torch"]).startswith("2.13.0")  # the CPU build the tests run against


def test_the_test_set_up_installs_the_lock_whole_and_skyhive_without_resolving(monkeypatch, tmp_path):
    dev = _dev()
    ran: list[tuple[str, ...]] = []
    monkeypatch.setattr(dev, "run", lambda *cmd, **kw: ran.append(tuple(str(c) for c in cmd)))
    monkeypatch.setattr(dev, "type_checker_view", lambda venv=None: None)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    dev.setup("test", venv=venv)
    lock = str(dev.LOCK)
    assert ran[0][-4:] == ("--upgrade", "-c", lock, "pip")  # the lock's pip first
    assert ran[1][-2:] == ("-r", lock)
    assert ran[2][-4:] == ("--no-deps", "--no-build-isolation", "-e", ".")
    ran.clear()
    dev.setup("test", venv=venv)  # nothing changed: nothing installed again
    assert ran == []


def test_drift_names_what_moved_between_two_locks(tmp_path):
    dev = _dev()
    old, new = tmp_path / "old.lock", tmp_path / "new.lock"
    old.write_text("# made by uv\nmoto==5.2.5\n    # via skyhive\ncryptography==50.0.2\nsix==1.16.0\n")
    new.write_text("moto==5.2.6\ncryptography==50.0.2\nidna==3.10 ; python_version >= '3.11'\n")
    assert dev.drift(old, new) == ["  idna: - -> 3.10", "  moto: 5.2.5 -> 5.2.6", "  six: 1.16.0 -> -"]


@pytest.mark.parametrize("argv", [["test", "--latest", "-k", "x"], ["lock"]])
def test_the_commands_that_move_the_lock_exist(monkeypatch, argv):
    dev = _dev()
    called = []
    monkeypatch.setattr(dev, "test_latest", lambda rest: called.append(("latest", rest)) or 0)
    monkeypatch.setattr(dev, "lock_again", lambda: called.append(("lock",)) or 0)
    assert dev.main(argv) == 0
    assert called == ([("latest", ["-k", "x"])] if argv[0] == "test" else [("lock",)])
