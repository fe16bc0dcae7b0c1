"""A Local pool that lacks the accelerator it asked for warns at the user's own `Pool(` line (the
warning is raised on the pool's event loop, in another thread for `with`), not at skyhive's code."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

BLOCKING = textwrap.dedent("""\
    import skyhive as sky

    if __name__ == "__main__":
        with sky.Pool(provider=sky.Local(), accelerator="A100", output=None) as pool:
            print("ran", pool.run(abs, -3))
""")

ASYNC = textwrap.dedent("""\
    import anyio
    import skyhive as sky


    async def main():
        async with sky.Pool(provider=sky.Local(), accelerator="A100", output=None) as pool:
            print("ran", await pool.run(abs, -3))

    if __name__ == "__main__":
        anyio.run(main)
""")


@pytest.mark.parametrize("source", [BLOCKING, ASYNC], ids=["with", "async-with"])
def test_the_accelerator_warning_names_the_users_pool_line(source, tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text(source)
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "sky.Pool(" in text)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "ran 3" in done.stdout
    warned = [w for w in done.stderr.splitlines() if "AcceleratorWarning" in w]
    assert len(warned) == 1, done.stderr  # once, at the user's line
    assert warned[0].startswith(f"{script}:{line}: AcceleratorWarning: "), done.stderr
    assert "accelerator='A100' was asked for" in warned[0]
    assert "providers/local.py" not in done.stderr and "accelerators.py" not in done.stderr
