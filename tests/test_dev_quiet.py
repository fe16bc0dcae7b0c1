"""`python3 dev.py demo` (the README's first command) shows the demo, not setuptools' 9-line "Editable
installation ... same name as your package" banner: the editable install's output is shown only when it
fails (issue 39 point 6)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.test_lock import _dev

BANNER = ("import sys\nprint('Editable installation.')\n"
          "print('Please be careful with folders in your working directory with the same', file=sys.stderr)\n")


def banner(tmp_path, code: int = 0) -> str:
    """A command that prints the banner (its text not on its command line, which is shown) and exits `code`."""
    path = tmp_path / "banner.py"
    path.write_text(BANNER + f"sys.exit({code})\n")
    return str(path)


def test_a_quiet_step_shows_its_command_and_not_its_output(capfd, tmp_path):
    dev = _dev()
    dev.run(sys.executable, banner(tmp_path), quiet=True)
    out, err = capfd.readouterr()
    assert out.startswith("+ ") and "Editable installation" not in out + err and "same" not in out + err


def test_a_quiet_step_that_fails_shows_its_output(capfd, tmp_path):
    dev = _dev()
    with pytest.raises(subprocess.CalledProcessError):
        dev.run(sys.executable, banner(tmp_path, 3), quiet=True)
    out, err = capfd.readouterr()
    assert "Editable installation" in err and "same" in err  # why it failed is not hidden


@pytest.mark.parametrize("kind", ["demo", "test"])
def test_the_editable_install_of_skyhive_is_quiet(kind, monkeypatch, tmp_path):
    dev = _dev()
    ran: list[tuple[tuple[str, ...], dict]] = []
    monkeypatch.setattr(dev, "run", lambda *cmd, **kw: ran.append((tuple(str(c) for c in cmd), kw)))
    monkeypatch.setattr(dev, "type_checker_view", lambda venv=None: None)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    dev.setup(kind, venv=venv)
    editable = [kw for cmd, kw in ran if "-e" in cmd]
    assert editable == [{"quiet": True}]
