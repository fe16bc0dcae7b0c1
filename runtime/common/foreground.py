"""A command run in the foreground, as a shell runs one: what `skyhive ssh` runs on a node (a local shell,
`ssh`, another kind's exec) with this process's terminal."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Sequence
from typing import Any

__all__ = ["foreground", "wait_foreground"]


def wait_foreground(proc: subprocess.Popen) -> int:
    """Wait for `proc` as a shell waits for a foreground command: Ctrl-C and Ctrl-\\ go to it (the
    terminal's process group), not to us; a SIGTERM to us is passed on to it. Its exit code, or 128+N
    when signal N ended it."""
    def pass_on(signum: int, frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    handled = (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)
    old = [signal.signal(s, signal.SIG_IGN if s != signal.SIGTERM else pass_on) for s in handled]
    try:
        code = proc.wait()
    finally:
        for s, handler in zip(handled, old):
            signal.signal(s, handler)
    return 128 - code if code < 0 else code


def foreground(argv: Sequence[str], **popen: Any) -> int:
    """Run `argv` (`subprocess.Popen`'s keywords in `popen`) with this process's stdin, stdout and stderr,
    in the foreground (`wait_foreground`); its exit code (128+N for signal N). Raises `FileNotFoundError`
    naming the program when it is not installed."""
    try:
        proc = subprocess.Popen(list(argv), **popen)
    except FileNotFoundError:
        raise FileNotFoundError(f"{argv[0]!r} is not installed here (not found on PATH)") from None
    return wait_foreground(proc)
