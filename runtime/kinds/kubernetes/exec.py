"""`ExecStream`: one `pods/exec` WebSocket of the official client, whose stdout/stderr arrive by callback on
the event loop and whose stdin is written from it, with flow control both ways.

The client is synchronous (websocket-client): a stream has two threads of its own — one reads frames (and
stops reading while the consumer is paused: TCP then holds the pod's writes back), one writes what the loop
queued (the loop never blocks on a socket). The exit status comes on the error channel (3) as a `Status`,
which the client parses (`WSClient.returncode`); stdin's end is v5's close signal (`close_channel(0)`), or
the stream's close over v4.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ....errors import ProvisionError
from ....providers.kubernetes_api import api_error, kubernetes_client

log = logging.getLogger("skyhive.kubernetes")

__all__ = ["ExecStream", "HIGH_WATER"]


#: Bytes queued for a stream's stdin above which `drain` waits (the writer thread takes them off).
HIGH_WATER = 4 << 20


class ExecStream:
    """One `pods/exec` stream (`open` runs the command; see the module docstring). `on_data(channel, bytes)`
    hears stdout (1) and stderr (2) on the loop; `on_end(exit_status, error)` once, when it ended (exit
    status None: the stream broke, `error` says how)."""

    def __init__(self, api: Any, namespace: str, pod: str, container: str | None, argv: Sequence[str], *,
                 on_data: Callable[[int, bytes], None], on_end: Callable[[int | None, str], None]) -> None:
        self.api = api
        self.namespace = namespace
        self.pod = pod
        self.container = container
        self.argv = list(argv)
        self.on_data = on_data
        self.on_end = on_end
        self.ws: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._out: queue.Queue[bytes | None] = queue.Queue()
        self._queued = 0
        self._queued_lock = threading.Lock()
        self._writable = asyncio.Event()
        self._writable.set()
        self._resume = threading.Event()
        self._resume.set()
        self._closing = False
        self.returncode: int | None = None
        self.ended = False

    async def open(self) -> None:
        """Open the stream (in a thread) and start its reader and writer. Raises `ProvisionError` naming the pod."""
        self.loop = asyncio.get_running_loop()
        k8s = kubernetes_client()
        kwargs: dict[str, Any] = {"command": self.argv, "stdin": True, "stdout": True, "stderr": True, "tty": False,
                                  "_preload_content": False, "binary": True}
        if self.container:
            kwargs["container"] = self.container

        def connect() -> Any:
            return k8s.stream.stream(self.api.connect_get_namespaced_pod_exec, self.pod, self.namespace, **kwargs)

        try:
            self.ws = await asyncio.to_thread(connect)
        except Exception as exc:  # noqa: BLE001 - the client wraps every failure in ApiException(status=0)
            raise ProvisionError(f"pod {self.pod} (namespace {self.namespace}): exec failed: {api_error(exc)[2]}") from None
        threading.Thread(target=self._read, name=f"k8s-exec-read-{self.pod}", daemon=True).start()
        threading.Thread(target=self._write, name=f"k8s-exec-write-{self.pod}", daemon=True).start()

    # ---- stdin (from the loop) ---------------------------------------------------------------------------

    def write(self, data: bytes | memoryview) -> None:
        if self._closing or not data:
            return
        data = bytes(data)
        with self._queued_lock:
            self._queued += len(data)
            if self._queued > HIGH_WATER:
                self._writable.clear()
        self._out.put(data)

    async def drain(self) -> None:
        await self._writable.wait()

    def close_stdin(self) -> None:
        """The command's stdin ends (v5's close signal; over v4 the stream is closed instead)."""
        if not self._closing:
            self._closing = True
            self._out.put(None)

    def close(self) -> None:
        """End the stream (the command sees its stdin end; it is not killed by this)."""
        self.close_stdin()
        self._resume.set()
        ws = self.ws
        if ws is not None:
            try:
                ws.close()
            except Exception:  # noqa: BLE001 - closing a broken socket
                pass

    def pause_reading(self) -> None:
        self._resume.clear()

    def resume_reading(self) -> None:
        self._resume.set()

    # ---- the threads ---------------------------------------------------------------------------------------

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:  # the loop closed meanwhile
                pass

    def _write(self) -> None:
        ws = self.ws
        while True:
            data = self._out.get()
            if data is None:
                try:
                    if ws.subprotocol == "v5.channel.k8s.io":
                        ws.close_channel(0)
                    else:
                        ws.close()
                except Exception:  # noqa: BLE001 - already closed
                    pass
                return
            try:
                ws.write_channel(0, data)
            except Exception as exc:  # noqa: BLE001 - the stream broke: the reader reports the end
                log.debug("pod %s: exec stdin write failed: %s", self.pod, exc)
                self._closing = True
                return
            finally:
                with self._queued_lock:
                    self._queued -= len(data)
                    if self._queued <= HIGH_WATER // 2:
                        self._call(self._writable.set)

    def _read(self) -> None:
        ws = self.ws
        error = ""
        try:
            while ws.is_open():
                self._resume.wait()
                ws.update(timeout=0.5)
                for channel in (1, 2):
                    data = ws.read_channel(channel)
                    if data:
                        self._call(self.on_data, channel, data)
            try:
                code = ws.returncode
            except Exception:  # noqa: BLE001 - no Status on channel 3: the stream broke
                code = None
                error = "the exec stream ended without an exit status"
        except Exception as exc:  # noqa: BLE001 - the connection dropped
            code, error = None, f"the exec stream broke: {exc}"
        self.returncode = code
        self.ended = True
        self._closing = True
        self._out.put(None)
        self._call(self._writable.set)
        self._call(self.on_end, code, error)
