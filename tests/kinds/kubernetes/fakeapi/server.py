"""FAKE Kubernetes API server (a test stand-in, labelled as one everywhere it shows: the server header
says "FAKE kube-apiserver"): the core/v1 pod endpoints the official client calls, served over HTTP on
127.0.0.1 only (a port the OS picks), behind a bearer token, from a thread of the test process.

    POST   /api/v1/namespaces/NS/pods                 create (201; 409 AlreadyExists; 422 Invalid)
    GET    /api/v1/namespaces/NS/pods[?labelSelector=&watch=1&resourceVersion=&timeoutSeconds=]
    GET    /api/v1/namespaces/NS/pods/NAME            read (404 NotFound)
    DELETE /api/v1/namespaces/NS/pods/NAME            delete: Terminating with a grace period
    GET    /api/v1/namespaces/NS/pods/NAME/exec       WebSocket, v5.channel.k8s.io / v4.channel.k8s.io
    GET    /api/v1/namespaces/NS/pods/NAME/portforward WebSocket, v4.channel.k8s.io
    GET    /api/v1/namespaces/NS/events, /api/v1/nodes, /version
    POST   /apis/authorization.k8s.io/v1/selfsubjectaccessreviews   (allowed, unless the test denies it)

Exec (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/ "connect GET exec";
the channel framing of k8s.io/apimachinery/pkg/util/httpstream/wsstream and KEP 4006,
https://github.com/kubernetes/enhancements/tree/master/keps/sig-api-machinery/4006-transition-spdy-to-websockets):
every binary message starts with its channel byte — 0 stdin, 1 stdout, 2 stderr, 3 the error channel, 4
resize; on exit the server writes a `Status` on channel 3 (Success, or Failure reason NonZeroExitCode with
the exit code in details.causes[ExitCode]) and closes. v5 adds the close signal [255, channel] (the client's
stdin EOF). A subprotocol the server does not speak is refused (400), as the real one does. The command runs
as a real local process in the pod's directory with the pod's environment (argv as given, no shell).

Port-forward: channel 2i carries port i's data and 2i+1 its errors; each starts with a frame of the port
number (2 bytes, little-endian); the fake connects to the port on 127.0.0.1 (the fake pods share this
machine's loopback).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from .cluster import NAME_KEY, FakeCluster, FakeNode, matches
from .rules import Refused, status

log = logging.getLogger("tests.fake_k8s")

__all__ = ["FakeAPIServer", "EXEC_PROTOCOLS"]

#: the exec subprotocols the fake speaks, preferred first (as the real server picks v5 when offered)
EXEC_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
HEADERS = {"server": "FAKE kube-apiserver (tests/kinds/kubernetes/fakeapi)"}


def _refusal(exc: Refused) -> JSONResponse:
    return JSONResponse(exc.body, status_code=exc.code, headers=HEADERS)


class FakeAPIServer:
    """FAKE: the API server in a thread (`start`, `stop`), its cluster (`cluster`), and a kubeconfig for it
    (`write_kubeconfig`). Listens on 127.0.0.1 only."""

    TOKEN = "fake-token-for-tests"

    def __init__(self, root: str, nodes: list[FakeNode] | None = None) -> None:
        self.cluster = FakeCluster(root, nodes)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: uvicorn.Server | None = None
        self.port = 0
        self.execs: list[dict[str, Any]] = []  # every exec asked: pod, command, protocol (tests read them)
        self.denied: set[tuple[str, str]] = set()  # (verb, "resource[/subresource]") an access review refuses

    # ---- HTTP ----------------------------------------------------------------------------------------

    def _authorized(self, headers: Any) -> bool:
        return headers.get("authorization") == f"Bearer {self.TOKEN}"

    def app(self) -> Starlette:
        cluster = self.cluster

        async def guard(request: Request) -> JSONResponse | None:
            if not self._authorized(request.headers):
                return JSONResponse(status("Unauthorized", "Unauthorized", kind=""), status_code=401, headers=HEADERS)
            return None

        async def pods(request: Request) -> Response:
            if (denied := await guard(request)) is not None:
                return denied
            ns = request.path_params["ns"]
            if request.method == "POST":
                try:
                    body = json.loads(await request.body())
                    pod = await cluster.create_pod(ns, body)
                except Refused as exc:
                    return _refusal(exc)
                except (ValueError, KeyError, TypeError) as exc:
                    return _refusal(Refused("BadRequest", f"the body of the request could not be decoded: {exc}"))
                return JSONResponse(pod, status_code=201, headers=HEADERS)
            q = request.query_params
            selector = q.get("labelSelector", "")
            field = q.get("fieldSelector", "")
            if field:  # metadata.name=NAME is the field selector the fake serves (as a label-like match)
                name = dict(t.split("=", 1) for t in field.split(",") if "=" in t).get("metadata.name")
                if name is None:
                    return _refusal(Refused("BadRequest", f'"{field}" is not a known field selector'))
                selector = ",".join(filter(None, [selector, f"{NAME_KEY}={name}"]))
            if q.get("watch") in ("1", "true", "True"):
                return StreamingResponse(self._watch(ns, selector, q.get("resourceVersion"),
                                                     float(q.get("timeoutSeconds") or 0) or None),
                                         media_type="application/json", headers=HEADERS)
            return JSONResponse({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": str(cluster.rv)},
                                 "items": cluster.list_pods(ns, selector)}, headers=HEADERS)

        async def pod(request: Request) -> Response:
            if (denied := await guard(request)) is not None:
                return denied
            ns, name = request.path_params["ns"], request.path_params["name"]
            try:
                if request.method == "DELETE":
                    raw = await request.body()
                    grace = request.query_params.get("gracePeriodSeconds")
                    if raw:
                        grace = json.loads(raw).get("gracePeriodSeconds", grace)
                    return JSONResponse(await cluster.delete_pod(ns, name, None if grace is None else int(grace)),
                                        headers=HEADERS)
                return JSONResponse(cluster.get_pod(ns, name), headers=HEADERS)
            except Refused as exc:
                return _refusal(exc)

        async def events(request: Request) -> Response:
            if (denied := await guard(request)) is not None:
                return denied
            ns = request.path_params["ns"]
            field = request.query_params.get("fieldSelector", "")
            want = dict(t.split("=", 1) for t in field.split(",") if "=" in t)
            items = [e for e in cluster.events if e["metadata"]["namespace"] == ns
                     and all(e["involvedObject"].get(k.split(".", 1)[1]) == v for k, v in want.items()
                             if k.startswith("involvedObject."))]
            return JSONResponse({"apiVersion": "v1", "kind": "EventList", "metadata": {}, "items": items}, headers=HEADERS)

        async def nodes(request: Request) -> Response:
            if (denied := await guard(request)) is not None:
                return denied
            items = [n.to_json() for n in cluster.nodes]
            return JSONResponse({"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": items}, headers=HEADERS)

        async def access_review(request: Request) -> Response:
            """SelfSubjectAccessReview: may this user do it? (the fake allows all but `denied`)
            https://kubernetes.io/docs/reference/access-authn-authz/authorization/#checking-api-access"""
            if (denied := await guard(request)) is not None:
                return denied
            body = json.loads(await request.body())
            attrs = (body.get("spec") or {}).get("resourceAttributes") or {}
            what = "/".join(filter(None, [attrs.get("resource"), attrs.get("subresource")]))
            allowed = (attrs.get("verb"), what) not in self.denied
            body["status"] = {"allowed": allowed, **({} if allowed else {"reason": "FAKE: denied by the test"})}
            return JSONResponse(body, status_code=201, headers=HEADERS)

        async def version(request: Request) -> Response:
            return JSONResponse({"major": "1", "minor": "33", "gitVersion": "v1.33.0-fake", "platform": "FAKE"},
                                headers=HEADERS)

        return Starlette(routes=[
            Route("/version", version),
            Route("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", access_review, methods=["POST"]),
            Route("/api/v1/nodes", nodes),
            Route("/api/v1/namespaces/{ns}/events", events),
            Route("/api/v1/namespaces/{ns}/pods", pods, methods=["GET", "POST"]),
            Route("/api/v1/namespaces/{ns}/pods/{name}", pod, methods=["GET", "DELETE"]),
            WebSocketRoute("/api/v1/namespaces/{ns}/pods/{name}/exec", self._exec),
            WebSocketRoute("/api/v1/namespaces/{ns}/pods/{name}/portforward", self._portforward),
        ])

    async def _watch(self, ns: str, selector: str, since: str | None, timeout: float | None) -> Any:
        """Watch events after resourceVersion `since` (none or "0": the current objects as ADDED first)."""
        cluster = self.cluster
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout else None
        if since and since != "0" and int(since) < cluster.compacted:
            gone = status("Expired", f"too old resource version: {since} ({cluster.compacted})")
            yield json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n"
            return
        if not since or since == "0":
            for p in cluster.list_pods(ns, selector):
                yield json.dumps({"type": "ADDED", "object": p}).encode() + b"\n"
            last = cluster.rv
        else:
            last = int(since)
        while deadline is None or loop.time() < deadline:
            for rv, kind, obj in cluster.history:
                if rv > last and obj["metadata"]["namespace"] == ns and matches(obj, selector):
                    yield json.dumps({"type": kind, "object": obj}).encode() + b"\n"
            last = cluster.rv
            wait = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                await asyncio.wait_for(cluster.changed.wait(), wait)
            except asyncio.TimeoutError:
                pass

    # ---- exec ----------------------------------------------------------------------------------------

    async def _open(self, ws: WebSocket, protocols: tuple[str, ...]) -> tuple[dict[str, Any], str] | None:
        """Check the upgrade (token, pod Running, subprotocol); accept it, or refuse it with a Status."""
        ns, name = ws.path_params["ns"], ws.path_params["name"]
        offered = list(ws.scope.get("subprotocols") or [])
        chosen = next((p for p in protocols if p in offered), None)
        refusal: Refused | None = None
        pod: dict[str, Any] | None = None
        if not self._authorized(ws.headers):
            refusal = Refused("Unauthorized", "Unauthorized")
        elif chosen is None:
            refusal = Refused("BadRequest", f"unable to upgrade connection: none of the subprotocols {offered} is "
                              f"supported (the server speaks {', '.join(protocols)})")
        else:
            try:
                pod = self.cluster.get_pod(ns, name)
            except Refused as exc:
                refusal = exc
            else:
                if pod["status"].get("phase") != "Running":
                    refusal = Refused("BadRequest", f"unable to upgrade connection: pod {name} is not running "
                                      f"(phase {pod['status'].get('phase')})")
        if refusal is not None:
            await ws.send_denial_response(JSONResponse(refusal.body, status_code=refusal.code, headers=HEADERS))
            return None
        assert pod is not None and chosen is not None
        await ws.accept(subprotocol=chosen)
        return pod, chosen

    async def _exec(self, ws: WebSocket) -> None:
        q = ws.query_params
        command = q.getlist("command")
        opened = await self._open(ws, EXEC_PROTOCOLS)
        if opened is None:
            return
        pod, protocol = opened
        self.execs.append({"pod": pod["metadata"]["name"], "command": command, "protocol": protocol,
                           "stdin": q.get("stdin") in ("true", "1", "True")})
        containers = pod["spec"]["containers"]
        cname = q.get("container") or containers[0]["name"]
        container = next((c for c in containers if c["name"] == cname), None)
        if container is None or not command:
            why = f"container {cname} is not valid for pod {pod['metadata']['name']}" if container is None \
                else "you must specify at least one command for the container"
            await ws.send_bytes(b"\x03" + json.dumps(status("BadRequest", why)).encode())
            await ws.close()
            return
        want_stdin = q.get("stdin") in ("true", "1", "True")
        inside = self.cluster.exec_argv(pod, command)
        if inside is None:
            await ws.send_bytes(b"\x03" + json.dumps(status("BadRequest", f"container {cname} is not running")).encode())
            await ws.close()
            return
        try:
            proc = await asyncio.create_subprocess_exec(
                *inside, cwd=self.cluster.pod_dir(pod), env=self.cluster.pod_env(pod, container),
                stdin=asyncio.subprocess.PIPE if want_stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            # what the runtime says for a missing executable (the exec's own Status, on channel 3)
            msg = (f'failed to exec in container: failed to start exec: OCI runtime exec failed: exec failed: '
                   f'unable to start container process: exec: "{command[0]}": {exc.strerror}')
            await ws.send_bytes(b"\x03" + json.dumps(status("BadRequest", msg) | {"reason": "InternalError"}).encode())
            await ws.close()
            return

        async def pump(stream: Any, channel: int) -> None:
            while data := await stream.read(65536):
                await ws.send_bytes(bytes([channel]) + data)

        async def feed() -> None:
            try:
                while True:
                    msg = await ws.receive()
                    if msg["type"] == "websocket.disconnect":
                        break
                    data = msg.get("bytes")
                    if data is None:
                        data = (msg.get("text") or "").encode()
                    if not data:
                        continue
                    if data[0] == 255 and protocol.startswith("v5") and len(data) > 1 and data[1] == 0:
                        if proc.stdin is not None:
                            proc.stdin.close()  # the v5 close signal: stdin's EOF
                        continue
                    if data[0] == 0 and proc.stdin is not None and not proc.stdin.is_closing():
                        proc.stdin.write(data[1:])
                        try:
                            await proc.stdin.drain()
                        except (BrokenPipeError, ConnectionResetError):
                            pass
            except (WebSocketDisconnect, RuntimeError):
                pass
            finally:  # the client went away: the command's stdin ends (it is not killed, as with the real one)
                if proc.stdin is not None and not proc.stdin.is_closing():
                    proc.stdin.close()

        feeder = asyncio.get_running_loop().create_task(feed())
        try:
            await asyncio.gather(pump(proc.stdout, 1), pump(proc.stderr, 2))
            code = await proc.wait()
            if code == 0:
                result = {"metadata": {}, "status": "Success"}
            else:
                shown = code if code > 0 else 128 - code  # killed by a signal: the shell's convention
                result = {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                          "message": f"command terminated with non-zero exit code: error executing command "
                                     f"{command}, exit code {shown}",
                          "details": {"causes": [{"reason": "ExitCode", "message": str(shown)}]}}
            await ws.send_bytes(b"\x03" + json.dumps(result).encode())
            await ws.close()
        except (WebSocketDisconnect, RuntimeError, ConnectionError):
            await proc.wait()
        finally:
            feeder.cancel()

    async def _portforward(self, ws: WebSocket) -> None:
        ports = [int(p) for p in ws.query_params.get("ports", "").split(",") if p.strip()]
        opened = await self._open(ws, ("v4.channel.k8s.io",))
        if opened is None:
            return
        if len(ports) != 1:
            await ws.close(code=1011)
            return
        port = ports[0]
        head = port.to_bytes(2, "little")
        await ws.send_bytes(b"\x00" + head)
        await ws.send_bytes(b"\x01" + head)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError as exc:
            await ws.send_bytes(b"\x01" + f"error forwarding port {port} to pod: {exc}".encode())
            await ws.close()
            return

        async def down() -> None:
            while data := await reader.read(65536):
                await ws.send_bytes(b"\x00" + data)
            await ws.close()

        task = asyncio.get_running_loop().create_task(down())
        try:
            while True:
                msg = await ws.receive()
                if msg["type"] == "websocket.disconnect":
                    break
                data = msg.get("bytes") or b""
                if data[:1] == b"\x00" and len(data) > 1:
                    writer.write(data[1:])
                    await writer.drain()
        except (WebSocketDisconnect, RuntimeError, ConnectionError):
            pass
        finally:
            task.cancel()
            writer.close()

    # ---- the thread ----------------------------------------------------------------------------------

    def start(self) -> FakeAPIServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))  # loopback only: nothing else can reach the fake
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app(), log_level="warning", ws="wsproto", lifespan="off", server_header=False,
                                timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        started = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self.loop = loop
            asyncio.set_event_loop(loop)
            loop.call_soon(started.set)
            try:
                loop.run_until_complete(self._server.serve(sockets=[sock]))
                loop.run_until_complete(self.cluster.shutdown())
            finally:
                loop.close()
                sock.close()

        self._thread = threading.Thread(target=run, name="fake-kube-apiserver", daemon=True)
        self._thread.start()
        started.wait(30)
        for _ in range(600):
            if self._server.started:
                break
            threading.Event().wait(0.05)
        return self

    def call(self, coro: Any, timeout: float = 60) -> Any:
        """Run `coro` on the fake's loop (a test changing the cluster from outside) and return its result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(60)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_kubeconfig(self, path: str | Path, *, context: str = "fake", namespace: str = "default") -> Path:
        """A kubeconfig whose context `context` reaches this fake with its token."""
        path = Path(path)
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": context,
            "clusters": [{"name": "fake-cluster", "cluster": {"server": self.url}}],
            "users": [{"name": "fake-user", "user": {"token": self.TOKEN}}],
            "contexts": [{"name": context, "context": {"cluster": "fake-cluster", "user": "fake-user",
                                                        "namespace": namespace}}],
        }))
        path.chmod(0o600)
        return path
