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
    # a SkyPilot key skyhive does not use yet, and an unknown key inside resources, stay warnings
    task = loads("run: echo\nservice: {}\nresources:\n  disk: 3\n", source="t.yaml", cwd=str(tmp_path))
    assert task.warnings == ("t.yaml:2: service is not supported by skyhive yet; ignored",
                             "t.yaml:4: unknown key resources.disk (did you mean resources.disk_size?); ignored")
