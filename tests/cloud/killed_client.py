"""A client killed right after its create (issue 38, done-when 6): the pool's script runs in a process of its own
against a fake cloud that saves its account to a file after each answer (the process is SIGKILLed, the account
outlives it), and is SIGKILLed as soon as that account shows what the test waits for."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from tests.procs import Lines

ROOT = Path(__file__).resolve().parents[2]


def kill_after_create(script: str, args: Sequence[str], state: Path, created: Callable[[Path], bool], what: str, *,
                      env: Mapping[str, str] | None = None, timeout: float = 120) -> None:
    """Run `script` (`python -c`, with `args`) and SIGKILL it once `created(state)` holds — polled while it runs,
    within `timeout` seconds; the test fails naming `what` and showing the client's stderr when it never does.
    Nothing of the client is left: killed, waited for, its pipes closed."""
    client = subprocess.Popen([sys.executable, "-c", script, *args], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = Lines(client.stderr)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and client.poll() is None:
            if state.exists() and created(state):
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"the client did not create {what}: {err.rest()[-3000:]}")
        client.send_signal(signal.SIGKILL)  # right after the create: connecting, nothing bootstrapped
        client.wait(30)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()


def saving(fake_class: type, state: str) -> type:
    """For the client's script: a subclass of the FAKE cloud `fake_class` that saves its account to `state` after
    each answer (`save`), so the account outlives the process the test SIGKILLs."""

    class Saving(fake_class):  # type: ignore[valid-type,misc]
        def answer(self, *args: object) -> object:
            out = super().answer(*args)
            self.save(state)
            return out

    return Saving
