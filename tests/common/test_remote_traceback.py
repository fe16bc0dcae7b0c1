"""A task's error shows the user's file, line and source line (not cloudpickle's "<dynamic-code>"), with
skyhive's own frames hidden unless SKYHIVE_TRACEBACK=full (issue 26 point 3)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from skyhive.runtime.common.remote_errors import shown_traceback

SCRIPT = textwrap.dedent("""\
    import skyhive as sky

    def helper(x):
        return 1 / x

    def task(x):
        y = x + 1
        return helper(x)

    with sky.Pool(provider=sky.Local(), nodes=1) as pool:
        pool.run(task, 0)
    """)


ASYNC_SCRIPT = textwrap.dedent("""\
    import anyio
    import skyhive as sky

    def task(x):
        return 1 / x

    async def main():
        async with sky.Pool(provider=sky.Local(), nodes=1) as pool:
            await pool.run(task, 0)

    anyio.run(main)
    """)

#: the folders of skyhive's own files (a frame of one of them in the local half is skyhive's internals)
OWN = tuple(f"/{d}/" for d in ("runtime", "protocol", "plugins", "providers", "skyhive"))


def local_half(err):
    """The frames of the traceback Python printed, before the remote traceback of the notes."""
    local = err.split("Remote traceback (from")[0]
    return [line for line in local.splitlines() if line.startswith('  File "')]


def run_script(tmp_path, script=SCRIPT, **env):
    path = tmp_path / "user_script.py"
    path.write_text(script)
    done = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})
    assert done.returncode == 1, done.stderr
    return path, done.stderr


def test_a_remote_traceback_names_the_users_file_line_and_source_and_hides_skyhive(tmp_path):
    path, err = run_script(tmp_path)
    assert "<dynamic-code>" not in err
    assert f'  File "{path}", line 8, in task\n    return helper(x)\n' in err
    assert f'  File "{path}", line 4, in helper\n    return 1 / x\n' in err
    assert "runtime/worker/tasks.py" not in err  # the worker's task runner
    assert "anyio" not in err and "concurrent/futures" not in err and "dispatch.py" not in err  # the way back
    assert "of skyhive itself hidden; SKYHIVE_TRACEBACK=full shows them" in err
    assert err.rstrip().splitlines()[-1].startswith("(1 frame of skyhive itself hidden")
    assert len(err.splitlines()) < 30, err


def test_the_local_half_of_a_task_error_is_the_users_call_line_with_no_skyhive_frame(tmp_path):
    # issue 39 point 6: the pool's `run` and its dispatch (3 frames) stood between the call line and the
    # remote traceback
    path, err = run_script(tmp_path)
    assert local_half(err) == [f'  File "{path}", line 11, in <module>'], err
    assert f'  File "{path}", line 11, in <module>\n    pool.run(task, 0)\n' in err
    path, err = run_script(tmp_path, ASYNC_SCRIPT)
    frames = local_half(err)
    assert frames[-1] == f'  File "{path}", line 9, in main', err  # the user's `await pool.run(...)` line
    assert f'  File "{path}", line 11, in <module>' in frames  # and the user's `anyio.run(main)`
    assert not [f for f in frames if any(d in f for d in OWN)], err
    assert f'  File "{path}", line 5, in task\n    return 1 / x\n' in err  # the remote half


def test_skyhive_traceback_full_shows_every_frame(tmp_path):
    path, err = run_script(tmp_path, SKYHIVE_TRACEBACK="full")
    assert "runtime/worker/tasks.py" in err and "anyio" in err
    assert f'  File "{path}", line 4, in helper\n    return 1 / x\n' in err
    assert "hidden" not in err
    assert any("runtime/blocking.py" in f for f in local_half(err)), err  # the local half whole too


def test_frames_the_node_could_not_read_get_their_source_line_here(tmp_path):
    # an SSH node runs the user's function without the user's file: the client has it
    user = tmp_path / "train.py"
    user.write_text("import os\n\ndef step(batch):\n    return batch['missing']\n")
    tb = ("Traceback (most recent call last):\n"
          '  File "/opt/skyhive-env/lib/python3.11/site-packages/skyhive/runtime/worker/tasks.py", line 122, in execute\n'
          "    value = fn(*a, **kw)\n"
          f'  File "{user}", line 4, in step\n'
          '  File "/no/such/file.py", line 9, in other\n'
          "KeyError: 'missing'\n")
    shown = shown_traceback(tb, full=False)
    assert shown == ("Traceback (most recent call last):\n"
                     f'  File "{user}", line 4, in step\n'
                     "    return batch['missing']\n"
                     '  File "/no/such/file.py", line 9, in other\n'
                     "KeyError: 'missing'\n"
                     "(1 frame of skyhive itself hidden; SKYHIVE_TRACEBACK=full shows them)\n")
    assert "site-packages/skyhive/runtime/worker/tasks.py" in shown_traceback(tb, full=True)
