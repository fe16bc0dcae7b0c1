"""A cloud's interruption notice, watched on the node while a managed job's `run` step runs.

The node's provider names its cloud (its `Features.notices`, passed down in `WATCH_ENV`): EC2's
spot `instance-action` (about two minutes ahead), GCE's `preempted` (about 30 s) or Azure's Scheduled
Events `Preempt` (at least 30 s); each cloud's client is in `runtime/onnode/notices/`, behind one small
interface, and gives the notice in one form: `{"action", "time", ...}`.

When the notice comes, the watcher writes it (JSON) to the file named by `SKYHIVE_INTERRUPTION_NOTICE`
in the script's environment — the program's cue to checkpoint now — and prints one line starting with
`MARK` on the script's stderr, which reaches the job's controller through the pool's output: it starts
the recovery before the machine is gone. Standard library only (this runs in the worker).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

from .notices import CLOUDS, NoticeSource, source_for
from .notices.ec2 import EC2Notice

__all__ = ["MARK", "NOTICE_ENV", "WATCH_ENV", "AFTER_NOTICE", "fetch_ec2_notice", "Watcher", "start_for"]

MARK = "[skyhive] interruption notice: "
NOTICE_ENV = "SKYHIVE_INTERRUPTION_NOTICE"  # the file the notice is written to (the program's cue)
WATCH_ENV = "SKYHIVE_INTERRUPTION_WATCH"  # which cloud's notice to watch ("aws", "gcp", "azure"), set by the controller
INTERVAL_ENV = "SKYHIVE_INTERRUPTION_INTERVAL"  # seconds between looks (default: the cloud's own advice)
#: a `run` script that fails after its node's notice returns AFTER_NOTICE + its exit code, so the controller
#: tells it from the program's own failure without waiting for the notice line in the output
AFTER_NOTICE = 1000


def fetch_ec2_notice(endpoint: str | None = None) -> dict[str, Any] | None:
    """EC2's spot interruption notice now (None: none scheduled). Raises OSError when the service does
    not answer."""
    return EC2Notice(endpoint).notice()


class Watcher:
    """Looks for the notice in a thread until `stop()`; on a notice: the file written, `MARK` line printed.
    `source`: the cloud's client (default EC2's); `interval`: the pause between looks (after a failed one,
    for a source whose look itself waits for the change)."""

    def __init__(self, path: str, interval: float, err: Any = None, source: NoticeSource | None = None) -> None:
        self.path, self.interval = path, interval
        self.err = err or sys.stderr
        self.seen: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._report = threading.Lock()  # no notice is reported once `stop()` has returned
        self._client: NoticeSource = source if source is not None else EC2Notice()
        self._thread = threading.Thread(target=self._run, name="skyhive-interruption", daemon=True)

    def start(self) -> Watcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._report:  # a report under way ends first; none starts after this
            pass
        # (a look in flight — GCE's hanging GET, Azure's slow first answer — is left to end on its own:
        # the thread is a daemon and reports nothing after the stop)
        self._thread.join(0 if self._client.hangs else 5)

    def _run(self) -> None:
        while not self._stop.is_set():
            waited = False
            try:
                notice = self._client.notice()
                waited = bool(self._client.hangs)
            except (OSError, ValueError):  # the service not there (not that cloud's VM) or garbled: next look
                notice = None
            if notice is not None:
                with self._report:
                    if self._stop.is_set():
                        return
                    self.seen = notice
                    self.err.write(MARK + json.dumps(notice, sort_keys=True) + "\n")  # (before the program's cue)
                    self.err.flush()
                    tmp = self.path + ".tmp"
                    with open(tmp, "w", encoding="utf-8") as fh:
                        json.dump(notice, fh)
                    os.replace(tmp, self.path)
                return
            if not waited:
                self._stop.wait(self.interval)


def start_for(env: dict[str, str], cwd: str) -> Watcher | None:
    """A watcher for a `run` script whose environment asks for one (`WATCH_ENV`: a cloud of
    `notices.CLOUDS`, which the notice modules declare); it sets `NOTICE_ENV` in `env` (a file beside the script's directory, removed with
    the job's). The looks' interval: `INTERVAL_ENV`, else the cloud's own advice."""
    cloud = env.get(WATCH_ENV, "")
    if cloud not in CLOUDS:
        return None
    path = os.path.join(os.path.dirname(os.path.abspath(cwd)), "interruption-notice.json")
    env[NOTICE_ENV] = path
    try:
        os.remove(path)  # an earlier attempt's, on the same machine
    except FileNotFoundError:
        pass
    try:
        interval = float(env.get(INTERVAL_ENV) or 0) or None
    except ValueError:
        interval = None
    source = source_for(cloud, wait=interval or 5.0)
    interval = max(0.05, interval or source.interval)
    return Watcher(path, interval, source=source).start()
