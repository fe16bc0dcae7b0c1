"""The exit codes of the commands that run a job, as SkyPilot's `JobExitCode` gives them.

`skyhive launch` (with or without `-c`), `exec`, `logs NAME JOB` and `logs NAME JOB --status` exit 0
for a job that succeeded, 100 for one that failed (its setup or its run, on any node: which node and
its own exit code are in the message and the job's log), 101 for one not finished, 102 for no such
job, 103 for one cancelled. A failed job's exit code is not the node's own: scripts test `$? -eq 100`
as SkyPilot's smoke tests do.
"""

from __future__ import annotations

__all__ = ["SUCCEEDED", "FAILED", "NOT_FINISHED", "NOT_FOUND", "CANCELLED", "of_state"]

SUCCEEDED = 0
FAILED = 100
NOT_FINISHED = 101
NOT_FOUND = 102
CANCELLED = 103


def of_state(state: str | None) -> int:
    """The exit code of a job in `state` (a `runtime.clusters.jobs` state name; None: no such job)."""
    if state is None:
        return NOT_FOUND
    if state == "SUCCEEDED":
        return SUCCEEDED
    if state == "CANCELLED":
        return CANCELLED
    if state.startswith("FAILED"):  # FAILED, FAILED_SETUP
        return FAILED
    return NOT_FINISHED
