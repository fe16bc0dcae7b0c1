"""The dashboard's web app (Starlette): the JSON routes and the live streams, behind `gate.TokenGate`
(the token on every request: docs/dashboard.md).

Live updates: one task reads what the logs gained every `POLL` seconds (`StateDir.refresh`, in a
thread) and looks at the named pools' queues; each change bumps a version that the `/api/live`
stream (Server-Sent Events) sends to the pages, which then fetch what they show. A log page streams
its lines through `/api/live/log` as they are appended.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.concurrency import iterate_in_threadpool as iterate_in_thread
from starlette.staticfiles import StaticFiles

from ...errors import PoolInUse, PoolNotFound
from ...paths import state_dir
from ...providers.base import ProvisionError
from ..clusters import jobs as jobq
from ..control.managed.store import FINISHED
from . import actions, logrange, views
from .managed_view import ManagedJobs, managed_log, managed_log_path
from .gate import TokenGate
from .watch import StateDir, output_text

__all__ = ["make_app", "Live", "POLL"]

log = logging.getLogger("skyhive.dashboard")
STATIC = Path(__file__).resolve().parent / "static"
#: Seconds between looks at the state directory.
POLL = 0.3
#: Seconds after a page last asked for a pool's timeline during which the refresher keeps it built.
TIMELINE_VIEWED = 60.0
#: Events past which a pool's timeline is served as last built rather than rebuilt on the request.
STALE_TIMELINE_EVENTS = 20_000
#: Seconds between keep-alive comments on an idle live stream.
KEEPALIVE = 15.0


class Live:
    """What changed, for the live streams: a version bumped on every change, and a way to wait for one."""

    def __init__(self, store: StateDir, after: Callable[[], object] | None = None,
                 managed: ManagedJobs | None = None) -> None:
        self.store = store
        self.managed = managed or ManagedJobs()
        self.after = after  # run in a thread after each look (the timelines being viewed rebuilt)
        self.version = 0
        self._changed = anyio.Event()
        self._named = ()  # type: tuple[Any, ...]

    def bump(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = anyio.Event()

    async def wait(self, version: int, timeout: float) -> bool:
        """Until the version passes `version` (True) or `timeout` seconds went by (False)."""
        if self.version != version:
            return True
        with anyio.move_on_after(timeout):
            await self._changed.wait()
            return True
        return False

    async def poll(self) -> None:
        """Forever: read what the logs gained and look at the named pools; bump on a change."""
        while True:
            try:
                changed = await anyio.to_thread.run_sync(self.store.refresh)
                named = await anyio.to_thread.run_sync(
                    lambda: (_named_fingerprint(), self.store.clients(), self.managed.fingerprint()))
                if self.after is not None:
                    await anyio.to_thread.run_sync(self.after)
            except Exception:  # noqa: BLE001 - one bad read must not end the live updates
                log.exception("dashboard: reading the state directory failed")
                changed, named = False, self._named
            if changed or named != self._named:
                self._named = named
                self.bump()
            await anyio.sleep(POLL)


def _named_fingerprint() -> tuple[Any, ...]:
    """The named pools' records and job files, by name, size and mtime (a change in a queue changes it)."""
    root = state_dir() / "clusters"
    out: list[Any] = []
    if not root.is_dir():
        return ()
    for entry in sorted(root.iterdir()):
        for path in (entry / "record.json", *sorted((entry / "jobs").glob("*.json")),
                     *sorted((entry / "jobs").glob("*.log"))):
            with contextlib.suppress(OSError):
                st = path.stat()
                out.append((str(path), st.st_size, st.st_mtime_ns))
    return tuple(out)


def _error(exc: Exception) -> JSONResponse:
    if isinstance(exc, PoolInUse):
        return JSONResponse({"error": str(exc), "force": True}, status_code=409)
    if isinstance(exc, (PoolNotFound, LookupError)):
        return JSONResponse({"error": str(exc)}, status_code=404)
    if isinstance(exc, ValueError):
        return JSONResponse({"error": str(exc)}, status_code=400)
    return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=502)


def _int(request: Request, name: str, default: int) -> int:
    value = request.query_params.get(name, "")
    if value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"query parameter {name}={value!r}: not an integer") from None


def _opt_int(request: Request, name: str) -> int | None:
    return _int(request, name, -1) if request.query_params.get(name, "") != "" else None


def _download(body: AsyncIterator[bytes], filename: str) -> Response:
    return StreamingResponse(body, media_type="text/plain; charset=utf-8",
                             headers={"content-disposition": f'attachment; filename="{filename}"'})


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def make_app(*, token: str, port: Callable[[], int], store: StateDir | None = None,
             on_stop: Callable[[], None] | None = None) -> TokenGate:
    """The dashboard app over the state directory, behind `TokenGate` with `token`; `port()` is the
    port it is served on (the Host header depends on it); `on_stop` runs as the server stops."""
    store = store or StateDir()
    # a pool's timeline, built once per change of its log by the refresher for the pools whose page
    # asked for it in the last minute (so the page gets it at once) and once ahead for each pool that
    # runs; else when asked
    timelines: dict[str, tuple[int, dict[str, Any]]] = {}
    viewed: dict[str, float] = {}

    def build_timeline(pool_id: str) -> dict[str, Any]:
        version = store.get(pool_id).version
        cached = timelines.get(pool_id)
        if cached is None or cached[0] != version:
            cached = (version, views.timeline_json(store, pool_id))
            timelines[pool_id] = cached
        return cached[1]

    def rebuild_viewed() -> None:
        now = time.monotonic()
        for pool_id, when in list(viewed.items()):
            if now - when > TIMELINE_VIEWED:
                viewed.pop(pool_id, None)
            else:
                with contextlib.suppress(LookupError):
                    build_timeline(pool_id)
        # a pool that runs gets its timeline built once ahead of its first view (a 10,000-node
        # pool's takes seconds); after that only a viewed one is kept up to date
        with store.lock:
            running = [w.pool_id for w in store.pools.values() if w.state.status != "stopped"]
        for pool_id in running:
            if pool_id not in timelines:
                with contextlib.suppress(LookupError):
                    build_timeline(pool_id)

    managed = ManagedJobs()
    live = Live(store, after=rebuild_viewed, managed=managed)

    def json_route(fn: Callable[[Request], Any]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return JSONResponse(await anyio.to_thread.run_sync(fn, request))
            except (PoolNotFound, LookupError, ValueError) as exc:
                return _error(exc)
        return endpoint

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"cache-control": "no-store"})

    def pools(request: Request) -> Any:
        return {"pools": views.pool_rows(store), "version": live.version}

    def pool(request: Request) -> Any:
        return views.pool_detail(store, request.path_params["pool"])

    def nodes(request: Request) -> Any:
        return views.node_rows(store, request.path_params["pool"], state=request.query_params.get("state", ""),
                               offset=_int(request, "offset", 0) or 0, limit=min(_int(request, "limit", 200) or 200, 1000))

    def events(request: Request) -> Any:
        return views.event_rows(store, request.path_params["pool"], kind=request.query_params.get("type", ""),
                                node=_opt_int(request, "node"), before=_opt_int(request, "before"),
                                limit=_int(request, "limit", 200) or 200)

    def timeline(request: Request) -> Any:
        """The pool's timeline as its log is now; a big pool's (more than `STALE_TIMELINE_EVENTS`
        events) as the refresher last built it, up to one change behind while the log grows."""
        pool_id = request.path_params["pool"]
        watch = store.get(pool_id)
        viewed[pool_id] = time.monotonic()
        cached = timelines.get(pool_id)
        if cached is not None and (cached[0] == watch.version or len(watch.events) > STALE_TIMELINE_EVENTS):
            return cached[1]  # (a big pool's, a change behind: the refresher is rebuilding it)
        return build_timeline(pool_id)

    def output(request: Request) -> Any:
        return views.output_lines(store, request.path_params["pool"], after=_int(request, "after", -1),
                                  before=_opt_int(request, "before"), limit=max(1, min(_int(request, "limit", 5000), 5000)))

    def named(request: Request) -> Any:
        return {"named": views.named_rows()}

    def job(request: Request) -> Any:
        name, job_id = request.path_params["name"], request.path_params["job"]
        return {"job": views.job_json(jobq.load_job(name, job_id))}

    def job_log(request: Request) -> Any:
        return views.job_log(request.path_params["name"], request.path_params["job"],
                             offset=_int(request, "offset", 0) or 0, before=_opt_int(request, "before"))

    def managed_jobs(request: Request) -> Any:
        return {"jobs": managed.rows()}

    def managed_job(request: Request) -> Any:
        st = managed.get(request.path_params["job"])
        return {"job": {**st.as_dict(), "finished": st.state in FINISHED}}

    def managed_job_log(request: Request) -> Any:
        return managed_log(managed, request.path_params["job"], offset=_int(request, "offset", 0) or 0,
                           before=_opt_int(request, "before"))

    async def output_download(request: Request) -> Response:
        """The pool's whole output, read from its log on disk (the page holds only the last lines)."""
        pool_id = request.path_params["pool"]
        try:
            path = store.get(pool_id).path
        except LookupError as exc:
            return _error(exc)
        return _download(iterate_in_thread(t.encode() for t in output_text(path)), f"{pool_id}.log")

    async def job_log_download(request: Request) -> Response:
        """Every byte of a named pool's job log (its secret values redacted)."""
        name, job_id = request.path_params["name"], request.path_params["job"]
        try:
            job = await anyio.to_thread.run_sync(lambda: jobq.load_job(name, job_id))
        except (LookupError, ValueError) as exc:
            return _error(exc)
        redact = (lambda text: views.redact_job(job, text)) if job.secrets else None
        chunks = logrange.download(jobq.log_path(name, job_id), job.state in jobq.FINISHED, redact)
        return _download(iterate_in_thread(chunks), f"{name}-job{job_id}.log")

    async def managed_log_download(request: Request) -> Response:
        job_id = request.path_params["job"]
        try:
            st = await anyio.to_thread.run_sync(lambda: managed.get(job_id))
        except LookupError as exc:
            return _error(exc)
        chunks = logrange.download(managed_log_path(job_id), st.state in FINISHED)
        return _download(iterate_in_thread(chunks), f"managed-job{job_id}.log")

    async def live_changes(request: Request) -> Response:
        async def stream() -> AsyncIterator[bytes]:
            version = -1
            while True:
                if await live.wait(version, KEEPALIVE):
                    version = live.version
                    yield _sse("changed", {"version": version})
                else:
                    yield b": keep-alive\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"cache-control": "no-store"})

    async def live_log(request: Request) -> Response:
        """A log's new text as it is appended: a pool's output (`pool`, from line `after`) or a named
        pool's job (`named`, `job`, from byte `offset`); `end` once nothing more can come."""
        q = request.query_params
        try:
            if q.get("pool"):
                pool_id = q["pool"]
                store.get(pool_id)

                def read(pos: int) -> tuple[str, int, bool]:
                    part = views.output_lines(store, pool_id, after=pos)
                    return part["text"], part["next"], store.get(pool_id).state.status == "stopped"

                position = _int(request, "after", -1)
            elif q.get("managed"):
                managed_id = int(q["managed"])
                managed.get(managed_id)

                def read(pos: int) -> tuple[str, int, bool]:
                    part = managed_log(managed, managed_id, offset=pos)
                    return part["text"], part["next"], part["job"]["finished"] and not part["more"]

                position = _int(request, "offset", 0)
            else:
                name, job_id = q.get("named", ""), int(q.get("job", ""))
                jobq.load_job(name, job_id)

                def read(pos: int) -> tuple[str, int, bool]:
                    part = views.job_log(name, job_id, offset=pos)
                    return part["text"], part["next"], part["job"]["finished"] and not part["more"]

                position = _int(request, "offset", 0)
        except (LookupError, ValueError) as exc:
            return _error(exc)

        async def stream() -> AsyncIterator[bytes]:
            pos = position
            idle = 0
            while True:
                version = live.version
                text, pos, ended = await anyio.to_thread.run_sync(read, pos)
                if text:
                    yield _sse("lines", {"text": text, "next": pos})
                    continue
                if ended:
                    yield _sse("end", {"next": pos})
                    return
                # a change anywhere, or a second: look again (a job's log grows between its events)
                idle = 0 if await live.wait(version, 1.0) else idle + 1
                if idle >= KEEPALIVE:
                    idle = 0
                    yield b": keep-alive\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"cache-control": "no-store"})

    async def pool_down(request: Request) -> Response:
        pool_id = request.path_params["pool"]
        try:
            body = await request.json() if await request.body() else {}
            force = bool(body.get("force", False))
            text = await anyio.to_thread.run_sync(lambda: actions.down_pool(pool_id, force=force))
        except (PoolInUse, PoolNotFound, LookupError, ValueError, ProvisionError, OSError, RuntimeError) as exc:
            return _error(exc)
        await anyio.to_thread.run_sync(store.refresh)
        live.bump()
        return JSONResponse({"ok": True, "message": text})

    async def job_cancel(request: Request) -> Response:
        name, job_id = request.path_params["name"], request.path_params["job"]
        try:
            text = await anyio.to_thread.run_sync(lambda: actions.cancel_job(name, job_id))
        except (PoolNotFound, LookupError, ValueError, OSError) as exc:
            return _error(exc)
        live.bump()
        return JSONResponse({"ok": True, "message": text})

    async def managed_cancel(request: Request) -> Response:
        job_id = request.path_params["job"]
        try:
            text = await anyio.to_thread.run_sync(lambda: actions.cancel_managed_job(job_id))
        except (LookupError, ValueError, OSError, RuntimeError) as exc:
            return _error(exc)
        live.bump()
        return JSONResponse({"ok": True, "message": text})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await anyio.to_thread.run_sync(store.refresh)
        async with anyio.create_task_group() as tg:
            tg.start_soon(live.poll)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
                if on_stop is not None:
                    on_stop()

    routes = [
        Route("/", index),
        Route("/api/pools", json_route(pools)),
        Route("/api/pools/{pool}", json_route(pool)),
        Route("/api/pools/{pool}/nodes", json_route(nodes)),
        Route("/api/pools/{pool}/events", json_route(events)),
        Route("/api/pools/{pool}/timeline", json_route(timeline)),
        Route("/api/pools/{pool}/output", json_route(output)),
        Route("/api/pools/{pool}/output/download", output_download),
        Route("/api/pools/{pool}/down", pool_down, methods=["POST"]),
        Route("/api/named", json_route(named)),
        Route("/api/named/{name}/jobs/{job:int}", json_route(job)),
        Route("/api/named/{name}/jobs/{job:int}/log", json_route(job_log)),
        Route("/api/named/{name}/jobs/{job:int}/log/download", job_log_download),
        Route("/api/named/{name}/jobs/{job:int}/cancel", job_cancel, methods=["POST"]),
        Route("/api/managed", json_route(managed_jobs)),
        Route("/api/managed/{job:int}", json_route(managed_job)),
        Route("/api/managed/{job:int}/log", json_route(managed_job_log)),
        Route("/api/managed/{job:int}/log/download", managed_log_download),
        Route("/api/managed/{job:int}/cancel", managed_cancel, methods=["POST"]),
        Route("/api/live", live_changes),
        Route("/api/live/log", live_log),
        Mount("/static", app=StaticFiles(directory=STATIC)),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    return TokenGate(app, token=token, port=port)
