"""`skyhive dashboard`: serve the app with uvicorn on 127.0.0.1, print its URL with the token."""

from __future__ import annotations

import errno
import logging
import socket
import sys
import threading
import webbrowser
from typing import TextIO

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
    url = f"http://{HOST}:{actual}/?token={token}"
    app = make_app(token=token, port=lambda: actual)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=2, server_header=False)
    server = uvicorn.Server(config)
    out.write(f"skyhive dashboard: {url}\n(serving on {HOST} only; Ctrl-C stops it)\n")
    out.flush()
    if open_browser:
        threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
    server.run(sockets=[sock])
    return 0
