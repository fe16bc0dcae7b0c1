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
