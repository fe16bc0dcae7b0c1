"""How a user reaches a pod of a kept Kubernetes pool (`skyhive ssh`, `forward`): `PodAccess`, the kind's
`NodeAccess` — an exec of the command (an interactive shell when none: `kubectl exec -it`) with this process's
stdin/stdout/stderr, and a port-forward to a port on the pod's loopback (`kubectl port-forward`). No SSH
entries (`ssh_config` is None): a pod runs no sshd; no address of its own for `status --ip` (`ip` is None).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.abc

from ....providers.kubernetes import PodReach
from ....providers.kubernetes_api import api_error, exec_api, kubernetes_client
from ....errors import ProvisionError

from ...nodes.keep import NodeAccess

__all__ = ["PodAccess"]


class PodAccess(NodeAccess):
    """A pod of a kept pool, reached over exec and port-forward (see the module docstring)."""

    def __init__(self, reach: PodReach) -> None:
        self.reach = reach

    def describe(self) -> str:
        return f"pod {self.reach.pod} (namespace {self.reach.namespace})"

    def ssh_config(self) -> str | None:
        return None

    def run(self, argv: Sequence[str] | None, *, tty: bool) -> int:
        """`argv` (None: an interactive `/bin/sh`) in the pod with this process's stdio; its exit status."""
        k8s = kubernetes_client()
        api = exec_api(self.reach.kubeconfig, self.reach.context)
        command = list(argv) if argv else ["/bin/sh"]
        try:
            ws = k8s.stream.stream(api.connect_get_namespaced_pod_exec, self.reach.pod, self.reach.namespace,
                                   container=self.reach.container, command=command, stdin=True, stdout=True,
                                   stderr=True, tty=tty, _preload_content=False, binary=True)
        except Exception as exc:  # noqa: BLE001 - the client wraps every failure in ApiException(status=0)
            raise ProvisionError(f"{self.describe()}: exec failed: {api_error(exc)[2]}") from None
        raw = _RawTerminal() if tty and sys.stdin.isatty() else None

        def pump_stdin() -> None:
            try:
                while ws.is_open():
                    data = os.read(0, 65536)
                    if not data:
                        ws.close_channel(0)
                        return
                    ws.write_stdin(data)
            except (OSError, Exception):  # noqa: BLE001 - the stream ended under us
                return

        threading.Thread(target=pump_stdin, name="skyhive-ssh-stdin", daemon=True).start()
        try:
            while ws.is_open():
                ws.update(timeout=0.2)
                for channel, fd in ((1, 1), (2, 2)):
                    data = ws.read_channel(channel)
                    if data:
                        os.write(fd, data)
            try:
                return int(ws.returncode)
            except Exception:  # noqa: BLE001 - no Status on channel 3: the stream broke
                return 255
        finally:
            if raw is not None:
                raw.restore()
            ws.close()

    async def connect(self, port: int) -> anyio.abc.ByteStream:
        """A stream to TCP `port` on the pod's loopback, over a port-forward."""
        k8s = kubernetes_client()
        api = exec_api(self.reach.kubeconfig, self.reach.context)

        def forward() -> Any:
            return k8s.stream.portforward(api.connect_get_namespaced_pod_portforward, self.reach.pod,
                                          self.reach.namespace, ports=str(int(port)))

        try:
            pf = await anyio.to_thread.run_sync(forward)
        except Exception as exc:  # noqa: BLE001
            raise ProvisionError(f"{self.describe()}: port-forward to port {port} failed: {api_error(exc)[2]}") from None
        # the client's end of its socketpair (its proxy thread serves the other end), as a stream of ours
        ours = socket.socket(fileno=pf.socket(int(port)).detach())
        return await anyio.abc.SocketStream.from_socket(ours)


class _RawTerminal:
    """This terminal in raw mode while an interactive exec runs (restored after)."""

    def __init__(self) -> None:
        import termios
        import tty

        self.fd = sys.stdin.fileno()
        self.saved = termios.tcgetattr(self.fd)
        tty.setraw(self.fd)

    def restore(self) -> None:
        import termios

        termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)
