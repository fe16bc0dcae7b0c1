"""Setting up a worker process: the protocol's file descriptors, fd 1/2 turned into pipes pumped as
output frames, the log on the original stderr, this node's instance info — then the daemon's loop.

Split from `daemon.py` (the `WorkerDaemon` every mode shares): this is what a real worker *process* does
before it serves, which in-process workers (`sky.Simulated`) never do.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Callable

from ...protocol.messages import STDERR, STDOUT
from .capture import FdPump
from .daemon import WorkerDaemon

log = logging.getLogger("skyhive.worker")

__all__ = ["serve"]


def serve(fd_in: int = 0, fd_out: int = 1, *, make_worker: Callable[[], WorkerDaemon] | None = None) -> int:
    """Set up the process (fds, streams, instance info) and run the daemon until `Shutdown`.

    The protocol travels on `fd_in`/`fd_out` (pipes: the Local transport), or, with `make_worker`,
    however the worker it makes talks (`SocketWorker`: the detached worker's Unix socket).
    """
    diag = os.dup(2)
    if make_worker is None:
        proto_in, proto_out = os.dup(fd_in), os.dup(fd_out)
    logging.basicConfig(
        # (errors escaped: a message naming a file whose name is not UTF-8 is written, not lost)
        stream=os.fdopen(diag, "w", buffering=1, errors="backslashreplace"), level=os.environ.get("SKYHIVE_WORKER_LOG", "WARNING"),
        format="skyhive-worker[%(process)d] %(levelname)s %(message)s",
    )
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    from .threaded import ENV_VAR as THREADS_ENV, task_threads, threaded_class

    slots = task_threads()
    os.environ.pop(THREADS_ENV, None)  # not for the processes tasks start
    if make_worker is None:
        worker = (WorkerDaemon if slots == 1 else threaded_class(WorkerDaemon))(proto_in, proto_out)
    else:
        worker = make_worker()
    if slots > 1:  # `sky.Worker(concurrency=N)` with the thread executor (runtime/worker/threaded.py)
        worker.start_threads(slots)  # type: ignore[attr-defined]
    pumps = []
    for fd, stream, pystream in ((1, STDOUT, worker.stdout), (2, STDERR, worker.stderr)):
        r, w = os.pipe()
        os.dup2(w, fd)
        os.close(w)
        pumps.append(FdPump(r, stream, pystream, worker._output))
    for pump in pumps:
        pump.start()
    sys.stdout = worker.stdout  # type: ignore[assignment]
    sys.stderr = worker.stderr  # type: ignore[assignment]
    try:
        return worker.run()
    except BaseException:
        log.error("worker crashed:\n%s", traceback.format_exc())
        return 1
