"""Issue 40 (the audit, point 4): Skyward's `sample.py` failed on skyhive with `AttributeError: module 'skyhive'
has no attribute 'main'` — Skyward's `@sky.main` entry-point decorator. The program below is Skyward's
sample.py (github.com/gabfssilva/skyward, commit f43ac11) with only the audit's rewrite (`import skyward` →
`import skyhive`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import skyhive as sky

SAMPLE = '''import skyhive as sky


@sky.function
def get_ip() -> str:
    print("hihi")
    return "localhost"

@sky.main
def main() -> None:
    result = get_ip() >> sky
    print(result)
'''


def test_skywards_sample_runs_as_a_script(tmp_path):
    script = tmp_path / "sample.py"
    script.write_text(SAMPLE)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_its_main_runs_here_and_sends_to_the_active_pool(capsys):
    namespace: dict = {}
    exec(compile(SAMPLE, "sample.py", "exec"), namespace)
    entry = namespace["main"]
    assert entry.__sky_main__ is True and entry.__name__ == "main"
    with sky.ComputePool(provider=sky.Local(), nodes=1):
        assert entry() is None
    out = capsys.readouterr().out
    assert "localhost" in out.splitlines()
    assert "hihi" in out  # printed on the node, shown here


def test_called_form_and_arguments_pass_through():
    @sky.main()
    def entry(a, *, b=2):
        return a + b

    assert entry(1, b=5) == 6 and entry.__sky_main__ is True


def test_without_a_pool_the_operator_says_how_to_open_one():
    @sky.function
    def one() -> int:
        return 1

    @sky.main
    def entry():
        return one() >> sky

    with pytest.raises(RuntimeError, match="active pool"):
        entry()


def test_decorating_something_that_is_not_a_function_is_refused_by_name():
    with pytest.raises(TypeError, match=r"@sky.main: decorates a function, got int 3"):
        sky.main(3)
