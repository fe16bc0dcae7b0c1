"""`skyhive dashboard`: serve the app with uvicorn on 127.0.0.1, print its URL with the token.

`--open` never puts the token on the browser's command line (every local user can read
`/proc/PID/cmdline`): the browser is given a file (0600, in the state directory's private `dashboard/`)
that sends it to the dashboard with a one-time code, which the page exchanges once for the token
(`gate.TokenGate.open_code`). The file is removed when the dashboard stops."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import sys
import threading
import webbrowser
from pathlib import Path
from typing import TextIO

from ...paths import private_dir

__all__ = ["serve", "DEFAULT_PORT", "HOST"]

log = logging.getLogger("skyhive.dashboard")
HOST = "127.0.0.1"  # loopback only, whatever is asked: the dashboard can take pools down
DEFAULT_PORT = 8765


def _bind(port: int | None) -> socket.socket:
    """A listening socket on `HOST`: `port`, or `DEFAULT_PORT` (any free port when that one is taken)."""
    for candidate in ([port] if port is not None else [DEFAULT_PORT, 0]):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, candidate))
        except OSError as exc:
            sock.close()
            if port is None and exc.errno == errno.EADDRINUSE:
                continue
            raise OSError(exc.errno, f"skyhive dashboard: cannot listen on {HOST}:{candidate}: {exc.strerror} "
                                     "(`--port 0` takes any free port)") from None
        sock.listen(128)
        sock.set_inheritable(True)
        return sock
    raise AssertionError("unreachable: port 0 always binds")


def serve(port: int | None = None, *, open_browser: bool = False, out: TextIO | None = None) -> int:
    """Serve the dashboard until interrupted; prints its URL (with the token) to `out` first.
    Raises `ImportError` saying what to install when the `dashboard` extra is missing, `OSError`
    naming the address when the port cannot be had."""
    out = out or sys.stdout
    try:
        import uvicorn

        from .app import make_app
        from .gate import new_token
    except ImportError as exc:
        raise ImportError(f"skyhive dashboard needs the dashboard extra: pip install 'skyhive[dashboard]' "
                          f"({exc})") from None
    sock = _bind(port)
    actual = sock.getsockname()[1]
    token = new_token()
    url = f"http://{HOST}:{actual}/#token={token}"
    opener: list[Path] = []

    def forget_opener() -> None:  # once the code was used, and as the server stops
        while opener:
            with contextlib.suppress(FileNotFoundError):
                opener.pop().unlink()

    app = make_app(token=token, port=lambda: actual, on_stop=forget_opener)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=2, server_header=False)
    server = uvicorn.Server(config)
    out.write(f"skyhive dashboard: {url}\n(serving on {HOST} only; Ctrl-C stops it)\n")
    out.flush()
    if open_browser:
        opener.append(_open_file(actual, f"http://{HOST}:{actual}/#code={app.open_code(on_used=forget_opener)}"))
        threading.Thread(target=webbrowser.open, args=(opener[0].as_uri(),), daemon=True).start()
    try:
        server.run(sockets=[sock])
    finally:
        forget_opener()
    return 0


def _open_file(port: int, url: str) -> Path:
    """A page (0600) that sends the browser to `url`: what `--open` gives the browser instead of the URL,
    so that no secret is on its command line. `url` holds a one-time code, not the token."""
    path = private_dir("dashboard") / f"open-{port}.html"
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # (a dashboard killed before it could remove its own: only its own user could read it)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(f'<!doctype html><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
                 f'<meta http-equiv="refresh" content="0;url={url}"><title>skyhive dashboard</title>'
                 f'<p><a href="{url}">skyhive dashboard</a></p>\n')
    return path
