"""Detaching a process from its caller: the worker server, the cloud watchdog and a named pool's
queue agent all fork into the background this way (standard library only)."""

from __future__ import annotations

import os
import sys
from typing import TextIO

__all__ = ["daemonize", "emit"]


def daemonize(log_path: str) -> tuple[int, int]:
    """Fork into the background. Returns (write end of the ready pipe, 0) in the child; the parent
    prints what the child reports and exits."""
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(w)
        chunks = []
        while chunk := os.read(r, 4096):
            chunks.append(chunk)
        report = b"".join(chunks).decode(errors="replace").strip()
        os.waitpid(pid, os.WNOHANG)
        if report.startswith("{"):
            emit(sys.stdout, report)
            os._exit(0)
        emit(sys.stderr, report or f"the process exited before it was ready (see {log_path})")
        os._exit(1)
    os.close(r)
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    logfd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(logfd, 1)
    os.dup2(logfd, 2)
    os.close(logfd)
    return w, 0


def emit(stream: TextIO, line: str) -> None:
    """The one line this command answers with (JSON on stdout, read by the SSH transport), or why not."""
    stream.write(line + "\n")
    stream.flush()


