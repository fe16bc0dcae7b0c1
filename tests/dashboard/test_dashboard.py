"""`skyhive dashboard` (issue 30) against real pools, through a real headless Chromium.

Each test starts the dashboard as its own process over the test's state directory, makes real pools
(a named Local pool running a job through `skyhive launch -c`; a Python client's Local pool with a
failed node), and drives the pages as a person would. Screenshots of every page go to
`build/dashboard-screenshots/`.
"""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.dashboard.dashboard_infra import Dashboard, auth, browser, dashboard, shot, wait_until  # noqa: F401 - fixtures
from tests.procs import Lines, state_of
from tests.clusters.test_clusters import clean, running_under, skyhive, write  # noqa: F401 - `clean`: a fixture

pytestmark = pytest.mark.slow

SECRET = "hunter2dashboard"
SLOW = """\
    name: ticker
    num_nodes: 2
    resources:
      cloud: local
    secrets:
      TOKEN: null
    run: |
      echo "start on node $SKYPILOT_NODE_RANK with token=$TOKEN"
      for i in $(seq 1 {n}); do echo "tick $i"; sleep 0.3; done
      echo "end"
    """


def request(dash: Dashboard, path: str, *, method: str = "GET", headers: dict[str, str] | None = None,
            body: bytes | None = None, read: bool = True) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", dash.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read() if read else b""  # (a live stream is not read: it does not end)
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


def _listening_addresses(port: int) -> set[str]:
    """The local addresses of listening TCP sockets on `port` (IPv4 and IPv6), from /proc/net."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, _, hexport = local.partition(":")
            if state == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                found.add(addr)
    return found


# ---- security: the token, loopback, the action header ----------------------------------------------------


def test_every_request_needs_the_token_and_it_listens_on_loopback_only(dashboard):
    dash = dashboard
    assert _listening_addresses(dash.port) == {"0100007F"}, "not bound to 127.0.0.1 only"
    paths = ["/api/pools", "/api/named", "/api/live", "/api/live/log?pool=x", "/api/pools/x/timeline",
             "/api/pools/x/output/download", "/api/named/x/jobs/1/log/download"]
    for path in paths:
        status, _, body = request(dash, path)
        assert status == 403 and b"token" in body, (path, status, body)
        sep = "&" if "?" in path else "?"
        status, _, _ = request(dash, f"{path}{sep}token=not-{dash.token}")
        assert status == 403, (path, status)
        assert request(dash, path, headers={"Authorization": f"Bearer not-{dash.token}"})[0] == 403, path
    # the page's own code (no data) is served on loopback without the token; nothing sets a cookie
    for path in ("/", "/static/app.js"):
        status, headers, body = request(dash, path)
        assert status == 200 and "set-cookie" not in headers, (path, status)
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert dash.token.encode() not in body
    jar = auth(dash)
    status, headers, body = request(dash, "/api/pools", headers=jar)  # the token in the header
    assert "set-cookie" not in headers
    assert status == 200 and json.loads(body) == {"pools": [], "version": json.loads(body)["version"]}
    status, headers, _ = request(dash, "/api/live", headers=jar, read=False)
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    # another Host (DNS rebinding) is refused even with the token
    status, _, _ = request(dash, f"/api/pools?token={dash.token}", headers={"Host": f"evil.example:{dash.port}"})
    assert status == 403
    # an action needs the dashboard's header as well as the token (no cross-site form can send it)
    status, _, body = request(dash, "/api/pools/x/down", method="POST", headers=jar, body=b"{}")
    assert status == 403 and b"x-skyhive-dashboard" in body
    status, _, body = request(dash, "/api/pools/nosuchpool/down", method="POST", body=b"{}",
                              headers={**jar, "X-Skyhive-Dashboard": "1", "Content-Type": "application/json"})
    assert status == 404 and b"no pool 'nosuchpool'" in body


def test_the_browser_without_the_token_is_refused(dashboard, browser):
    browser.get(dashboard.base + "/")
    wait_until(lambda: "forbidden" in browser.find_element("tag name", "body").text, what="the page refusing")
    shot(browser, "0-no-token")
    browser.get(dashboard.url)
    wait_until(lambda: "Pools" in browser.find_element("tag name", "h1").text, what="the pools page")
    assert "token=" not in browser.current_url, "the token stayed in the address bar"


# ---- a named Local pool running a job: nodes, live log, cancel, down ---------------------------------------


def _click(browser, selector: str, *, until=None) -> None:
    """Click what `selector` finds (found again if the live page redrew it meanwhile). With `until`, click
    again until `until()` holds: a live page that redraws its table between the press and the release of a
    click loses that click without an error (the two land on different elements), as a person's would."""
    def click() -> bool:
        browser.find_element("css selector", selector).click()
        return True

    def clicked() -> bool:
        if until():
            return True
        wait_until(click, what=f"{selector} to click")
        for _ in range(25):  # a moment for the click's effect, then (if it was lost) the next try
            if until():
                return True
            time.sleep(0.2)
        return False

    wait_until(click if until is None else clicked, what=f"{selector} to click")


def _click_confirm(browser, selector: str) -> None:
    _click(browser, selector)
    wait_until(lambda: browser.find_element("css selector", "#modal").is_displayed(), what="the confirmation")
    _click(browser, "#modal-ok")


# (read in one script: the live page may redraw a table between two WebDriver calls)
def _text(browser, selector: str) -> str:
    text = browser.execute_script("const e = document.querySelector(arguments[0]); return e ? e.innerText : null;",
                                  selector)
    if text is None:
        raise LookupError(f"nothing on the page matches {selector}")
    return text


def _cells(browser, selector: str) -> list[str]:
    cells = browser.execute_script("const r = document.querySelector(arguments[0]); "
                                   "return r ? Array.from(r.querySelectorAll('td'), td => td.innerText) : null;", selector)
    if cells is None:
        raise LookupError(f"nothing on the page matches {selector}")
    return cells


def _column(browser, table: str, index: int) -> set[str]:
    return set(browser.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0] + ' tbody tr'), r => r.querySelectorAll('td')[arguments[1]].innerText);",
        table, index))


def _log_lines(browser) -> list[str]:
    return _text(browser, "#log").splitlines()


def test_a_named_pools_job_nodes_live_log_cancel_and_down(tmp_path, clean, dashboard, browser):
    home = clean  # (takes the pool down, and checks nothing is left, whatever the test did)
    task = write(tmp_path / "slow.yaml", SLOW.format(n=2000))
    launched = skyhive("launch", "-y", "-d", "-c", "web", "--secret", f"TOKEN={SECRET}", str(task), cwd=tmp_path)
    assert launched.returncode == 0, launched.stderr
    from skyhive.runtime.clusters import jobs as jobq

    wait_until(lambda: jobq.load_job("web", 1).state == jobq.RUNNING, what="job 1 to run")

    # the pools page: the pool with its nodes
    browser.get(dashboard.url)
    row = '#pools tr[data-pool="web"]'
    wait_until(lambda: _cells(browser, row)[4] == "2", what="the pool's row with 2 nodes ready")
    cells = _cells(browser, row)
    assert cells[0].startswith("web") and "named" in cells[0] and cells[1] == "running", cells
    assert cells[3] == "2" and cells[5] == "0", cells
    shot(browser, "1-pools")

    # the pool page: its nodes (lifecycle and workers), its job, its timeline and events
    _click(browser, f"{row} a", until=lambda: "#/pool/" in browser.current_url)
    wait_until(lambda: len(browser.find_elements("css selector", "#nodes tbody tr")) == 2, what="the nodes table")
    assert _column(browser, "#nodes", 0) == {"0", "1"}
    assert _column(browser, "#nodes", 1) == {"ready"}
    wait_until(lambda: "RUNNING" in _text(browser, "#jobs") and "ticker" in _text(browser, "#jobs"), what="the job")
    assert browser.find_elements("css selector", "#timeline svg rect[data-span]"), "no timeline drawn"
    labels = set(browser.execute_script(
        "return Array.from(document.querySelectorAll('#timeline svg .lane-label'), t => t.textContent);"))
    assert {"node 0", "node 1"} <= labels, labels
    # the timeline is interactive: hovering a bar says what it is, the wheel zooms, a double-click resets
    hover = ("const bars = Array.from(document.querySelectorAll(\"#timeline rect[data-lane='0']\")); "
             "const bar = bars.reduce((a, b) => (+b.getAttribute('width') > +a.getAttribute('width') ? b : a)); "
             "const r = bar.getBoundingClientRect(); bar.dispatchEvent(new MouseEvent('mousemove', "
             "{bubbles: true, clientX: r.left + r.width / 2, clientY: r.top + r.height / 2})); return bar.getAttribute('fill');")
    wait_until(lambda: browser.execute_script(hover) and _text(browser, "#tip").startswith("node 0\n"),
               what="the bar's tooltip")
    assert " → " in _text(browser, "#tip")
    axis = "return Array.from(document.querySelectorAll('#timeline svg .axis'), t => t.textContent).join(' ');"
    whole = browser.execute_script(axis)
    browser.execute_script("const s = document.querySelector('#timeline svg'), r = s.getBoundingClientRect(); "
                           "for (let i = 0; i < 6; i++) s.dispatchEvent(new WheelEvent('wheel', {deltaY: -100, "
                           "clientX: r.left + r.width * 0.6, clientY: r.top + 40, bubbles: true, cancelable: true}));")
    zoomed = browser.execute_script(axis)
    assert zoomed != whole and not zoomed.startswith("0 ms"), (whole, zoomed)
    browser.execute_script("document.querySelector('#timeline svg').dispatchEvent(new MouseEvent('dblclick', {bubbles: true}));")
    assert browser.execute_script(axis).startswith("0 ms")
    # the events, filtered by type and by node (a click on a lane of the timeline)
    _click(browser, "#ev-type option[value='node_state']")
    wait_until(lambda: _column(browser, "#events", 2) == {"node_state"}, what="only node_state events listed")
    _click(browser, "#timeline svg .lane-label[data-lane='0']")
    wait_until(lambda: browser.find_element("css selector", "#ev-node").get_attribute("value") == "0",
               what="the lane's node as the filter")
    wait_until(lambda: _column(browser, "#events", 3) == {"0"}, what="only node 0's events listed")
    browser.execute_script("window.scrollTo(0, 0)")
    wait_until(lambda: browser.execute_script("return window.scrollY") == 0, what="the page at its top")
    shot(browser, "2-pool")

    # the job's log: lines arrive live, with node prefixes; the secret never shows
    _click(browser, "#jobs a.btn", until=lambda: "#/log/" in browser.current_url)
    wait_until(lambda: any(ln.startswith("[node 1] tick 3") for ln in _log_lines(browser)), what="the log's lines")
    seen = len(_log_lines(browser))
    url = browser.current_url
    wait_until(lambda: len(_log_lines(browser)) >= seen + 5, what="more lines arriving live")
    assert browser.current_url == url  # no reload: the page was sent them
    text = _text(browser, "#log")
    assert "[node 0] start on node 0 with token=***" in text and "[node 1] start on node 1 with token=***" in text
    assert SECRET not in browser.page_source
    shot(browser, "3-job-log")
    # search: only the matching lines, the match marked
    browser.find_element("css selector", "#log-search").send_keys("tick 7")
    wait_until(lambda: _log_lines(browser) and all("tick 7" in ln for ln in _log_lines(browser)), what="the search")
    assert " of " in _text(browser, "#log-info")
    assert browser.find_elements("css selector", "#log mark")
    shot(browser, "3b-job-log-search")
    # download: the whole log as a file, redacted
    cookie = auth(dashboard)
    status, headers, body = request(dashboard, "/api/named/web/jobs/1/log/download", headers=cookie)
    assert status == 200 and "attachment" in headers["content-disposition"]
    assert b"[node 1] tick 1\n" in body and SECRET.encode() not in body
    for path in ("/api/named", "/api/pools", "/api/pools/web", "/api/pools/web/events?limit=1000"):
        assert SECRET.encode() not in request(dashboard, path, headers=cookie)[2], path

    # cancel the job from the page: confirmed, then done as `skyhive cancel` does
    _click_confirm(browser, "#job-cancel button")
    wait_until(lambda: jobq.load_job("web", 1).state == jobq.CANCELLED, what="the job cancelled")
    wait_until(lambda: "CANCELLED" in _text(browser, "#log-state"), what="the page saying so")
    from skyhive.runtime.events.log import pool_log_path, read_log

    def unfinished() -> set[int]:
        events = list(read_log(pool_log_path("web")))
        return ({ev.task for ev in events if ev.kind == "task_submitted"}
                - {ev.task for ev in events if ev.kind == "task_finished"})
    # the job's command on each node ended, and the log says so, as after `skyhive cancel web 1`
    wait_until(lambda: unfinished() == set(), timeout=60, what="the job's tasks recorded as ended")

    # named pools page, then down from the page: every process of the pool ends
    browser.get(dashboard.base + "/#/named")
    wait_until(lambda: "CANCELLED" in _text(browser, 'section.named[data-named="web"]'), what="the named pool")
    shot(browser, "4-named")
    assert [p for p in running_under(home) if p != dashboard.proc.pid], "the pool runs nothing before down?"
    _click_confirm(browser, 'section.named button[data-down="web"]')
    wait_until(lambda: "down" in _text(browser, "#toast"), what="the toast")
    left = lambda: [p for p in running_under(home) if p != dashboard.proc.pid]  # noqa: E731
    try:
        wait_until(lambda: left() == [], timeout=30, what="every process of the pool to end")
    except AssertionError:
        raise AssertionError("left running: " + "; ".join(
            Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:160]
            for p in left())) from None
    from skyhive.runtime.clusters import record as records

    assert records.names() == []
    last = list(read_log(pool_log_path("web")))[-1]
    assert last.kind == "pool_stopped" and "skyhive down web" in last.error
    browser.get(dashboard.url)
    wait_until(lambda: _cells(browser, row)[1] == "stopped", what="the pool shown stopped")


# ---- a managed job: listed, its log, cancelled from the page ----------------------------------------------


def test_a_managed_job_is_listed_its_log_shown_and_cancelled_from_the_page(tmp_path, dashboard, browser):
    from skyhive.runtime.control.managed import store
    from skyhive.runtime.control.managed.controller import controller_pid
    from tests.managed.test_managed_jobs import gone, launch, live_workers, task_file

    job = launch(task_file(tmp_path, steps=100000, pause=0.3))  # runs until cancelled
    try:
        _managed_job_on_the_page(job, dashboard, browser, store, controller_pid, gone, live_workers)
    finally:  # a failed step above must not leave the job running (it would never end)
        if store.load(job).state not in store.FINISHED:
            import skyhive as sky

            sky.jobs.cancel(job)


def _managed_job_on_the_page(job, dashboard, browser, store, controller_pid, gone, live_workers) -> None:
    wait_until(lambda: store.load(job).state == store.RUNNING, what="the managed job running")
    controller = controller_pid(job)
    assert controller and controller > 0
    browser.get(dashboard.url)
    _click(browser, 'a[data-nav="managed"]')
    row = f'#managed tr[data-managed="{job}"]'
    cells = wait_until(lambda: (c := _cells(browser, row))[2] == "RUNNING" and c, what="the job listed running")
    assert cells[:2] == [str(job), "train"] and cells[3:6] == ["1", "0", "0/0"], cells
    shot(browser, "7-managed-jobs")

    # its one log, streamed into the page
    _click(browser, f"{row} a.btn", until=lambda: "/log/managed/" in browser.current_url)
    wait_until(lambda: "/log/managed/" in browser.current_url, what="the log page")
    wait_until(lambda: any(line.startswith("step 2") for line in _log_lines(browser)), what="the job's lines")
    # the job's own first line (after skyhive's notes, such as where its checkpoints go)
    assert next(ln for ln in _log_lines(browser) if not ln.startswith("[skyhive]")).startswith("start at step 0")
    wait_until(lambda: "RUNNING" in _text(browser, "#log-state"), what="the job's state on the log page")
    shot(browser, "8-managed-log")

    # cancel from the page: confirmed, then done as `skyhive jobs cancel` does
    pools = store.load(job).pools
    _click_confirm(browser, "#job-cancel button")
    wait_until(lambda: store.load(job).state == store.CANCELLED, what="the job cancelled")
    wait_until(lambda: "CANCELLED" in _text(browser, "#log-state"), what="the page saying so")
    assert f"[skyhive] job {job} cancelled" in _text(browser, "#log")
    marked = browser.execute_script("return Array.from(document.querySelectorAll('#log .skyhive-note'), e => e.innerText);")
    assert any(f"job {job} cancelled" in m for m in marked), marked  # skyhive's own lines marked
    assert gone(controller), f"the controller {controller} still runs"
    assert controller_pid(job) is None
    assert live_workers(pools) == set(), "the job's workers still run"
    browser.get(dashboard.base + "/#/managed")
    wait_until(lambda: _cells(browser, row)[2] == "CANCELLED", what="the job shown cancelled")
    assert not browser.find_elements("css selector", f"{row} button"), "a cancel button on an ended job"
    # a second cancel is refused, naming the job
    cookie = {**auth(dashboard), "X-Skyhive-Dashboard": "1"}
    status, _, body = request(dashboard, f"/api/managed/{job}/cancel", method="POST", headers=cookie, body=b"{}")
    assert status == 400 and f"managed job {job} has already ended" in json.loads(body)["error"]
    # without the action header, refused before anything is done
    del cookie["X-Skyhive-Dashboard"]
    assert request(dashboard, "/api/managed/99/cancel", method="POST", headers=cookie, body=b"{}")[0] == 403


# ---- a failed node, and a pool whose client is gone ---------------------------------------------------------


CLIENT = """
import sys, os, time
import skyhive as sky

def maybe_die():
    if sky.instance_info().node == 1:
        os._exit(7)
    print("alive on node", sky.instance_info().node, flush=True)
    return "ok"

with sky.Pool(nodes=2, max_restarts=0, restart_backoff=0.05, output=None) as pool:
    try:
        pool.broadcast(maybe_die)
    except sky.WorkerLost as exc:
        print("LOST", " ".join(str(exc).split()), flush=True)
    print("POOL", pool.id, flush=True)
    time.sleep(600)
"""


def test_a_failed_node_shows_its_cause_and_a_gone_clients_pool_is_taken_down(tmp_path, dashboard, browser):
    client = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CLIENT)], stdout=subprocess.PIPE, text=True,
                              cwd=tmp_path)
    try:
        out = Lines(client.stdout)
        out.wait_for(lambda line: line.startswith("LOST"), 120, "the client's LOST line")
        pool_id = out.wait_for(lambda line: line.startswith("POOL"), 120, "the client's POOL line").split()[1]
        from skyhive.runtime.events.inventory import find

        worker = [w.pid for n in find(pool_id).state.nodes for w in n.workers if n.node == 0][0]
        browser.get(dashboard.base + f"/?token={dashboard.token}#/pool/{pool_id}")
        node1 = '#nodes tr[data-node="1"]'
        wait_until(lambda: "failed" in _text(browser, node1), what="node 1 failed")
        assert "exited with status 7" in _text(browser, node1), _text(browser, node1)
        # the problems panel is drawn from the same change, but not necessarily in the same frame as the row
        wait_until(lambda: "node 1 failed" in _text(browser, "#pool-problems"), what="the pool's problems naming node 1")
        problems = _text(browser, "#pool-problems")
        assert "node 1 failed" in problems and "exited with status 7" in problems, problems
        assert f"skyhive down {pool_id}" in problems
        # the timeline too: node 1's lane of states (the third lane) ends failed
        lanes = ("return Array.from(document.querySelectorAll('#timeline svg .lane-label'), t => t.textContent + ':' + "
                 "Array.from(document.querySelectorAll(`#timeline rect[data-lane='${t.dataset.lane}']`), r => "
                 "r.getAttribute('fill')).join(',')).join(' | ');")
        try:
            wait_until(lambda: browser.execute_script(
                "const r = document.querySelectorAll('#timeline rect[data-lane=\"2\"]'); "
                "return r.length && r[r.length - 1].getAttribute('fill');") == "#d62728", what="node 1 failed in the timeline")
        except AssertionError:
            served = json.loads(request(dashboard, f"/api/pools/{pool_id}/timeline?token={dashboard.token}")[2])
            raise AssertionError(f"node 1 not failed in the timeline: {browser.execute_script(lanes)} / served: "
                                 f"{[(lane['title'], [sp[2] for sp in lane['spans']]) for lane in served['lanes']]} / "
                                 f"toast {_text(browser, '#toast')!r} / console {browser.get_log('browser')}") from None
        shot(browser, "5-failed-node")
        # its output, from the pool's event log, with node prefixes
        browser.get(dashboard.base + f"/#/log/pool/{pool_id}")
        wait_until(lambda: "[node 0] alive on node 0" in _text(browser, "#log"), what="the pool's output")
        browser.get(dashboard.base + f"/#/pool/{pool_id}")

        # its client dies: the page says so, with the command that cleans up
        client.send_signal(signal.SIGKILL)
        client.wait()
        wait_until(lambda: "client gone" in _text(browser, "#pool-status"), what="the pool shown as client gone")
        assert "is gone" in _text(browser, "#pool-problems")
        _click_confirm(browser, "#down-slot button")
        wait_until(lambda: "stopped" in _text(browser, "#toast"), what="the toast")
        wait_until(lambda: _text(browser, "#pool-status") == "stopped", what="the pool shown stopped")
        from skyhive.runtime.events.inventory import DOWN_REASON, _leftovers

        assert find(pool_id).state.status == "stopped" and DOWN_REASON in find(pool_id).state.error
        assert _leftovers(pool_id) == [] and state_of(worker) in (None, "Z")
        wait_until(lambda: "stopped" in _text(browser, "#timeline .tl-head"), what="the timeline redrawn, stopped")
        shot(browser, "6-pool-down")
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()


def test_down_of_a_pool_whose_client_runs_asks_to_force(tmp_path, dashboard):
    """The page's first `down` is refused while the client runs (409, as `skyhive down` without
    --force), and says so; nothing is recorded."""
    client = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CLIENT)], stdout=subprocess.PIPE, text=True,
                              cwd=tmp_path)
    try:
        out = Lines(client.stdout)
        out.wait_for(lambda line: line.startswith("LOST"), 120, "the client's LOST line")
        pool_id = out.wait_for(lambda line: line.startswith("POOL"), 120, "the client's POOL line").split()[1]
        status, _, body = request(dashboard, f"/api/pools/{pool_id}/down?token={dashboard.token}", method="POST",
                                  body=b"{}", headers={"X-Skyhive-Dashboard": "1"})
        assert status == 409 and json.loads(body)["force"] is True
        assert f"in use by process {client.pid}" in json.loads(body)["error"]
        from skyhive.runtime.events.inventory import find

        assert find(pool_id).state.status == "running"
    finally:
        client.send_signal(signal.SIGTERM)
        try:
            client.wait(timeout=60)
        except subprocess.TimeoutExpired:
            client.kill()
            client.wait()


def test_without_the_extra_the_command_says_what_to_install():
    code = ("import sys; sys.modules['uvicorn'] = None; from skyhive.cli import main; "
            "sys.exit(main(['dashboard', '--port', '0']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "pip install 'skyhive[dashboard]'" in done.stderr, done.stderr
