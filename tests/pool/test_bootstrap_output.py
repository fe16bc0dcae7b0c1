"""Reading the node-side bootstrap script's output (runtime/bootstrap/output.py): steps, pip's progress
per package as sub-steps, and where a run stopped — pure, fed line by line."""

from __future__ import annotations

from skyhive.runtime.bootstrap.output import ScriptOutput


def test_pip_progress_is_reported_per_package_and_names_where_it_stopped():
    heard: list[str] = []
    out = ScriptOutput(heard.append, where="node 0")
    for line in ["::step venv", "::step pip", "Looking in indexes: https://example.invalid/simple",
                 "Collecting torch==2.3.0",
                 "  Downloading torch-2.3.0-cp311-cp311-manylinux1_x86_64.whl (779.1 MB)"]:
        out.feed(line)
    assert heard == ["venv", "pip", "pip: collecting torch==2.3.0",
                     "pip: downloading torch-2.3.0-cp311-cp311-manylinux1_x86_64.whl (779.1 MB)"]
    assert out.at == "'pip' (downloading torch-2.3.0-cp311-cp311-manylinux1_x86_64.whl (779.1 MB))"
    out.feed("Installing collected packages: six, torch")
    assert heard[-1] == "pip: installing collected packages six, torch"
    out.feed("::step setup 1/1")  # a new step: pip's last package is no longer where it is
    assert out.at == "'setup 1/1'"


def test_lines_like_pip_progress_outside_the_pip_step_are_only_output():
    heard: list[str] = []
    out = ScriptOutput(heard.append, where="node 0")
    out.feed("::step setup 1/1")
    out.feed("Collecting my data")  # a user's setup command printing this is not pip
    assert heard == ["setup 1/1"] and out.at == "'setup 1/1'" and out.lines == ["Collecting my data"]
