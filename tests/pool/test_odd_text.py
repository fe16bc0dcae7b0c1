"""A task's text that is not valid Unicode reaches the caller (issue 36 point 3): an error naming a file
whose name is not UTF-8 (`os.fsdecode(b"bad-\\xff.bin")`, as `os.listdir` gives it) killed the worker
that tried to report it — the caller got `WorkerLost` — because the frame's text could not be encoded.
Now the text travels escaped (`bad-\\xff.bin`), the exception itself (pickled) exactly, and the
worker goes on. Real Local workers."""

from __future__ import annotations

import logging
import os
import threading

import anyio
import pytest

import skyhive as sky

pytestmark = pytest.mark.anyio

BAD = os.fsdecode(b"bad-\xff.bin")


def raise_naming_a_bad_file() -> None:
    raise ValueError(f"could not read {os.fsdecode(b'bad-' + bytes([0xFF]) + b'.bin')} in /data")


class Unpicklable(Exception):
    """An exception that cannot be pickled (it holds a lock): only its text travels."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


def raise_unpicklable_naming_a_bad_file() -> None:
    raise Unpicklable(f"flush failed at {os.fsdecode(b'bad-' + bytes([0xFF]) + b'.bin')}")


def log_naming_a_bad_file() -> None:
    logging.getLogger("user.code").error("cannot read %s", os.fsdecode(b"bad-" + bytes([0xFF]) + b".bin"))


def name_and_pid() -> tuple[str, int]:
    return os.fsdecode(b"bad-" + bytes([0xFF]) + b".bin"), os.getpid()


async def test_an_error_naming_a_non_utf8_file_reaches_the_caller_and_the_worker_goes_on():
    async with sky.Pool(provider=sky.Local(), nodes=1, restart_backoff=0.05) as pool:
        _, pid = await pool.run(name_and_pid)
        with pytest.raises(ValueError) as info:
            await pool.run(raise_naming_a_bad_file)
        assert str(info.value) == f"could not read {BAD} in /data"  # the exception itself, exactly
        assert "ValueError: could not read bad-\\xff.bin in /data" in info.value.remote_traceback  # escaped
        with pytest.raises(sky.RemoteError) as remote:  # its type cannot travel: its text does, escaped
            await pool.run(raise_unpicklable_naming_a_bad_file)
        assert remote.value.remote_message == "flush failed at bad-\\xff.bin", remote.value.remote_message
        assert remote.value.type_name.endswith("Unpicklable")
        # the same worker answers: none was lost
        assert await pool.run(name_and_pid) == (BAD, pid)
        assert pool.statistics()["tasks_lost"] == 0


async def test_the_workers_log_line_naming_a_non_utf8_file_is_written_escaped(caplog):
    """The worker's diagnostics (its `logging`, forwarded by the Local transport) used to fail on such
    a line ("--- Logging error ---" in the task's output, the line itself lost)."""
    with caplog.at_level(logging.WARNING, logger="skyhive.transport.local"):
        async with sky.Pool(provider=sky.Local(), nodes=1) as pool:
            await pool.run(log_naming_a_bad_file)
            with anyio.fail_after(30):  # (the worker's stderr is read as it comes)
                while not any("cannot read bad-\\udcff.bin" in r.getMessage() for r in caplog.records):
                    await anyio.sleep(0.05)
    assert not any("Logging error" in r.getMessage() for r in caplog.records)
