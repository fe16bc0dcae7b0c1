"""The dashboard at its edges (issue 36, points 7 and 8), through a real headless Chromium.

Point 7, the token: no other server on 127.0.0.1 ever receives it (no cookie: the page keeps it in its
tab and sends it in a header), `--open` puts no secret on the browser's command line, a websocket
without it is refused cleanly, and a URL naming an unknown pool creates nothing.

Point 8, logs: a pool's log page says when it holds only the end and its Download has every line; a
big job log shows its end first and loads earlier parts on demand, its Download has every byte; a list
page patches its rows in place (a row element is the same one after a live update).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.dashboard_infra import (Dashboard, auth, browser, dashboard, shot,  # noqa: F401
                                             start_dashboard, stop_dashboard, wait_until)
from tests.dashboard.test_dashboard import _cells, _log_lines, _text, request

pytest.importorskip("starlette", reason="the dashboard extra (starlette, uvicorn) is not installed")

pytestmark = pytest.mark.slow


# ---- point 7: the token --------------------------------------------------------------------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A plain HTTP server's handler that keeps every request's line and headers."""

    seen: list[tuple[str, dict[str, str]]]

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append((self.requestline, dict(self.headers.items())))
        body = b"<!doctype html><title>another local server</title><p>another local server</p>"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def other_server() -> Iterator[tuple[int, list[tuple[str, dict[str, str]]]]]:
    """A plain HTTP server on another 127.0.0.1 port (as a job's web server reached through
    `skyhive forward` would be), recording what it is sent."""
    seen: list[tuple[str, dict[str, str]]] = []
    handler = type("Recorder", (_Recorder,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


def test_another_local_port_never_receives_the_token(dashboard, browser, other_server):
    port, seen = other_server
    browser.get(dashboard.url)
    wait_until(lambda: _text(browser, "h1") == "Pools" and _text(browser, "#live") == "live", what="the pools page, live")
    for url in (f"http://127.0.0.1:{port}/after-the-dashboard", f"http://localhost:{port}/by-name"):
        browser.get(url)
        wait_until(lambda: "another local server" in _text(browser, "body"), what=f"{url} shown")
    assert len(seen) >= 2, seen
    for line, headers in seen:
        assert dashboard.token not in line, line
        for name, value in headers.items():
            assert dashboard.token not in value, f"the other server got the token in its {name} header"
        assert not any(name.lower() == "cookie" for name in headers), headers
    # the dashboard's tab still has it (sessionStorage, this origin's only): back, with no token in the URL,
    # the data routes answer
    browser.get(dashboard.base + "/#/named")
    wait_until(lambda: _text(browser, "h1") == "Named pools" and "No named pools" in _text(browser, "#named-list"),
               what="the named pools page without the token in the URL")


def test_open_puts_no_secret_on_the_browsers_command_line(tmp_path, browser):
    record = tmp_path / "browser-argv"
    fake = tmp_path / "fake-browser"
    # what `/proc/PID/cmdline` of the "browser" shows every local user: kept for the test to read
    fake.write_text(f"#!/bin/sh\ntr '\\0' '\\n' < /proc/$$/cmdline > {record}.tmp && mv {record}.tmp {record}\n")
    fake.chmod(0o755)
    dash = start_dashboard(tmp_path / "dashboard.out", "--open", env={"BROWSER": str(fake)})
    try:
        argv = wait_until(lambda: record.exists() and record.read_text().splitlines(), what="the browser started")
        assert dash.token not in "".join(argv), argv
        assert argv[-1].startswith("file://"), argv
        opener = Path(argv[-1][len("file://"):])
        assert stat.S_IMODE(opener.stat().st_mode) == 0o600, oct(opener.stat().st_mode)
        assert dash.token not in opener.read_text(), "the file holds the token itself"
        assert str(opener).startswith(os.environ["SKYHIVE_HOME"]), opener
        code = opener.read_text().split("#code=")[1].split('"')[0]
        # a real browser given that file ends up on the dashboard, signed in
        browser.get(argv[-1])
        wait_until(lambda: browser.current_url.startswith(dash.base) and _text(browser, "#live") == "live",
                   what="the dashboard, live, from the file")
        wait_until(lambda: "No pools yet" in _text(browser, "#pools-box"), what="the pool list")
        assert "code=" not in browser.current_url and "token=" not in browser.current_url
        # the code in it was good once, and the file is gone once it was used
        wait_until(lambda: not opener.exists(), what="the file removed")
        status, _, body = request(dash, "/api/session", method="POST", body=json.dumps({"code": code}).encode(),
                                  headers={"X-Skyhive-Dashboard": "1", "Content-Type": "application/json"})
        assert status == 403 and dash.token.encode() not in body, (status, body)
    finally:
        stop_dashboard(dash)
    assert not opener.exists(), "the file outlived the dashboard"
    # not used, it goes when the dashboard stops
    record.unlink()
    dash = start_dashboard(tmp_path / "dashboard2.out", "--open", env={"BROWSER": str(fake)})
    try:
        opener = Path(wait_until(lambda: record.exists() and record.read_text().splitlines(), what="the browser")[-1][7:])
        assert opener.exists()
    finally:
        stop_dashboard(dash)
    assert not opener.exists(), "the file outlived the dashboard"
    assert "Traceback" not in dash.output.read_text()


def _upgrade(dash: Dashboard, path: str) -> bytes:
    """A websocket upgrade of `path`; the answer's head (read until its blank line or 30 s)."""
    with socket.create_connection(("127.0.0.1", dash.port), timeout=30) as sock:
        sock.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{dash.port}\r\nUpgrade: websocket\r\n"
                      "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                      "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            part = sock.recv(4096)
            if not part:
                break
            head += part
    return head


def test_a_websocket_without_the_token_is_refused_cleanly(dashboard):
    for path in ("/", "/api/live", f"/api/live?token=not-{dashboard.token}"):
        head = _upgrade(dashboard, path)
        assert head.startswith(b"HTTP/1.1 403"), (path, head)
    # with the token: there is no websocket here, and that is said cleanly too (no server error)
    assert not _upgrade(dashboard, f"/api/live?token={dashboard.token}").startswith(b"HTTP/1.1 500")
    assert "Traceback" not in dashboard.output.read_text(), dashboard.output.read_text()


def test_a_request_naming_an_unknown_pool_creates_nothing(dashboard, skyhive_home):
    token = f"token={dashboard.token}"
    for path in ("/api/named/nosuch/jobs/1", "/api/named/nosuch/jobs/1/log", "/api/named/nosuch/jobs/1/log?before=-1",
                 "/api/named/nosuch/jobs/1/log/download", "/api/live/log?named=nosuch&job=1"):
        status, _, body = request(dashboard, f"{path}{'&' if '?' in path else '?'}{token}")
        assert status == 404 and b"nosuch" in body, (path, status, body)
    status, _, _ = request(dashboard, f"/api/named/..%2F..%2Fetc/jobs/1?{token}")
    assert status in (400, 404)
    assert not (Path(skyhive_home) / "clusters").exists() or list((Path(skyhive_home) / "clusters").iterdir()) == []


# ---- point 8: logs and live lists ---------------------------------------------------------------------------


def _pool_log(pool_id: str, nodes: int = 2) -> Any:
    from skyhive.runtime.events.log import EventLog, pool_log_path
    from skyhive.runtime.events.types import NodeStateChanged, PoolStarted

    log = EventLog(pool_id, path=pool_log_path(pool_id))
    log.emit(PoolStarted, provider="local", nodes=nodes, processes_per_node=1, pid=os.getpid(), host="elsewhere",
             provider_config={"provider": "local"}, plan={"instance_type": "m5.large", "cost_per_hour": 0.5})
    for n in range(nodes):
        log.emit(NodeStateChanged, node=n, state="running", addr="127.0.0.1", provider_id=f"p-{n}")
        log.emit(NodeStateChanged, node=n, state="ready", addr="127.0.0.1", provider_id=f"p-{n}")
    log.flush()
    return log


def test_a_list_row_keeps_its_element_across_a_live_update(dashboard, browser):
    from skyhive.runtime.events.types import NodeStateChanged

    log = _pool_log("pool-rows")
    try:
        browser.get(dashboard.url)
        row_sel = '#pools tr[data-pool="pool-rows"]'
        wait_until(lambda: _cells(browser, row_sel)[4] == "2", what="the pool's row, 2 nodes ready")
        row = browser.find_element("css selector", row_sel)
        link = row.find_element("css selector", "a")
        log.emit(NodeStateChanged, node=1, state="failed", detail="worker 0: the worker process exited with status 7")
        log.flush()
        wait_until(lambda: _cells(browser, row_sel)[5] == "1", what="the row showing the failed node")
        # the same elements: a click pressed before the update and released after lands where it began
        assert row.find_elements("css selector", "td")[5].text == "1"
        assert link.is_displayed() and link.text == "pool-rows"
        # a second pool appearing adds its row; the first row is still the same element
        other = _pool_log("pool-rows-2")
        other.close()
        wait_until(lambda: len(browser.find_elements("css selector", "#pools tbody tr")) == 2, what="the second row")
        assert row.find_elements("css selector", "td")[5].text == "1"

        # the pool's page: a node's row too
        link.click()
        node_sel = '#nodes tr[data-node="0"]'
        wait_until(lambda: _cells(browser, node_sel)[1] == "ready", what="node 0 ready")
        node_row = browser.find_element("css selector", node_sel)
        log.emit(NodeStateChanged, node=0, state="draining", addr="127.0.0.1", provider_id="p-0")
        log.flush()
        wait_until(lambda: _cells(browser, node_sel)[1] == "draining", what="node 0 draining")
        assert node_row.find_elements("css selector", "td")[1].text == "draining"
    finally:
        log.close()


def _ticket_download(dash: Dashboard, path: str) -> bytes:
    """What the page's Download gets: a one-time ticket for `path`, then the link with it."""
    status, _, body = request(dash, "/api/ticket", method="POST", body=json.dumps({"path": path}).encode(),
                              headers={**auth(dash), "X-Skyhive-Dashboard": "1", "Content-Type": "application/json"})
    assert status == 200, body
    ticket = json.loads(body)["ticket"]
    status, headers, data = request(dash, f"{path}?ticket={ticket}")
    assert status == 200 and "attachment" in headers["content-disposition"], (status, data[:200])
    assert request(dash, f"{path}?ticket={ticket}")[0] == 403, "a ticket was good twice"
    return data


def test_a_pools_log_page_says_it_shows_the_end_and_its_download_has_every_line(dashboard, browser):
    from skyhive.runtime.events.types import OutputChunk, PoolStopped

    log = _pool_log("pool-out", nodes=1)
    total = 60_000
    for start in range(0, total, 1000):
        log.emit(OutputChunk, task=1, node=0, local_rank=0, stream="stdout",
                 text="".join(f"out {i}\n" for i in range(start, start + 1000)))
    log.emit(PoolStopped, error="")
    log.close()
    token = f"token={dashboard.token}"
    wait_until(lambda: json.loads(request(dashboard, f"/api/pools/pool-out?{token}")[2]).get("status") == "stopped",
               what="the dashboard to have read the pool's log")
    for get in (lambda: request(dashboard, f"/api/pools/pool-out/output/download?{token}")[2],  # (as a script would)
                lambda: _ticket_download(dashboard, "/api/pools/pool-out/output/download")):  # (as the page does)
        lines = get().decode().splitlines()
        assert len(lines) == total and lines[0] == "[node 0] out 0" and lines[-1] == f"[node 0] out {total - 1}"

    browser.get(dashboard.base + f"/#token={dashboard.token}&/log/pool/pool-out")
    wait_until(lambda: _log_lines(browser) and _log_lines(browser)[-1] == f"[node 0] out {total - 1}",
               what="the output's last line")
    # it shows the end first; earlier lines the dashboard holds load on demand, and it says what it holds
    wait_until(lambda: "lines before it are not shown" in _text(browser, "#log-info"), what="the page saying it shows the end")
    shown = len(_log_lines(browser))
    assert shown < 50_000
    browser.find_element("css selector", "#log-earlier").click()
    wait_until(lambda: len(_log_lines(browser)) > shown, what="earlier lines loaded")
    for _ in range(20):
        if not browser.find_element("css selector", "#log-earlier").is_displayed():
            break
        before = len(_log_lines(browser))
        browser.find_element("css selector", "#log-earlier").click()
        wait_until(lambda: len(_log_lines(browser)) > before, what="earlier lines loaded")
    assert _log_lines(browser)[0] == f"[node 0] out {total - 50_000}"
    info = _text(browser, "#log-info")
    assert f"the {total - 50_000} before them are in Download" in info, info


def _big_job(name: str, lines: int) -> tuple[Path, Any]:
    """A job of named pool `name` (recorded by the job queue's own functions) running, its log `lines`
    numbered lines of 101 bytes, written at once."""
    import dataclasses

    from skyhive.runtime.clusters import jobs as jobq

    job = jobq.submit(name, job_name="big", steps=b"", with_setup=False, env={}, secrets={})
    jobq.save_job(name, dataclasses.replace(job, state=jobq.RUNNING, started=time.time()))
    path = jobq.log_path(name, job.id)
    with open(path, "wb") as fh:
        for start in range(0, lines, 10_000):
            fh.write(b"".join(b"line %08d %s\n" % (i, b"x" * 86) for i in range(start, min(lines, start + 10_000))))
    return path, job


def test_a_big_job_log_shows_its_end_first_loads_earlier_parts_and_downloads_every_byte(dashboard, browser):
    import dataclasses

    from skyhive.runtime.clusters import jobs as jobq

    count = 520_000  # 52.5 MB
    path, job = _big_job("big", count)
    assert path.stat().st_size > 50_000_000
    browser.get(dashboard.url)
    wait_until(lambda: _text(browser, "#live") == "live", what="the dashboard")
    browser.get(dashboard.base + f"/#/log/named/big/{job.id}")
    last = f"line {count - 1:08d} "
    wait_until(lambda: _log_lines(browser) and _log_lines(browser)[-1].startswith(last), timeout=60,
               what="the log's last line")
    first_shown = _log_lines(browser)[0]
    assert not first_shown.startswith("line 00000000"), "the page read the log from its start"
    assert len(_log_lines(browser)) < 50_000
    assert "the end of the log" in _text(browser, "#log-info")
    # earlier parts on demand: the lines just before the first shown one come in above it
    number = int(first_shown.split()[1])
    browser.find_element("css selector", "#log-earlier").click()
    wait_until(lambda: _log_lines(browser)[0] != first_shown, what="earlier lines loaded")
    loaded = _log_lines(browser)
    at = loaded.index(first_shown)
    assert at > 0 and loaded[at - 1].startswith(f"line {number - 1:08d} ")
    assert [int(ln.split()[1]) for ln in loaded] == list(range(int(loaded[0].split()[1]), count))
    shot(browser, "9-big-log-earlier")
    # it still follows the log: a line written now is shown (read on from the end, nothing twice)
    with open(path, "ab") as fh:
        fh.write(b"the live line\n")
    wait_until(lambda: _log_lines(browser)[-1] == "the live line", what="the new line")
    assert _log_lines(browser)[-2].startswith(last)
    jobq.save_job("big", dataclasses.replace(jobq.load_job("big", job.id), state=jobq.SUCCEEDED, ended=time.time(),
                                             exit_code=0))
    wait_until(lambda: "ended" in _text(browser, "#log-state") or "SUCCEEDED" in _text(browser, "#log-state"),
               what="the log shown ended")
    # Download: every byte of it
    data = _ticket_download(dashboard, f"/api/named/big/jobs/{job.id}/log/download")
    assert len(data) == path.stat().st_size and hashlib.sha256(data).digest() == hashlib.sha256(path.read_bytes()).digest()


def test_a_download_without_a_ticket_or_the_token_is_refused(dashboard):
    status, _, _ = request(dashboard, "/api/pools/x/output/download?ticket=made-up")
    assert status == 403
    # a ticket is for one path only
    status, _, body = request(dashboard, "/api/ticket", method="POST", body=json.dumps({"path": "/api/pools/a/output/download"}).encode(),
                              headers={**auth(dashboard), "X-Skyhive-Dashboard": "1"})
    ticket = json.loads(body)["ticket"]
    assert request(dashboard, f"/api/pools/b/output/download?ticket={ticket}")[0] == 403
    assert request(dashboard, f"/api/pools/a/output/download?ticket={ticket}")[0] == 403, "used up by the wrong path"
    # a ticket for anything but a download is not given
    status, _, _ = request(dashboard, "/api/ticket", method="POST", body=json.dumps({"path": "/api/pools"}).encode(),
                           headers={**auth(dashboard), "X-Skyhive-Dashboard": "1"})
    assert status == 400
