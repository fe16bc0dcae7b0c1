"""Run tests inside a network namespace that has only loopback, so that no packet can leave.

moto invents public-looking addresses for its instances (54.x.x.x); a test that talked to one by mistake
would send traffic to a stranger. Tests marked ``@pytest.mark.loopback_only`` are therefore not run in
the pytest process: the first such test of a module re-runs all the selected marked tests of that module
in a child pytest under ``unshare --net`` (a fresh namespace; ``lo`` brought up, nothing else, no route),
and each test's outcome (passed, failed with its report, skipped with its reason) is reported here as
if it had run here. Inside, a connect to any non-loopback address fails at once (ENETUNREACH).

Not root (or no ``unshare``/``ip``): the tests skip, saying why. Load as a plugin (``tests/conftest.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from _pytest.reports import TestReport

ENV_FLAG = "SKYHIVE_TEST_IN_LOOPBACK_NS"
MARK = "loopback_only"
CHILD_TIMEOUT = 900  # seconds for one module's marked tests

_results: dict[str, list[dict[str, Any]]] = {}  # nodeid -> reports from the child


def in_loopback_namespace() -> bool:
    """Whether this process runs in the loopback-only namespace made for it (checked: only ``lo``)."""
    import socket

    return os.environ.get(ENV_FLAG) == "1" and [name for _, name in socket.if_nameindex()] == ["lo"]


def unavailable() -> str:
    """Why this machine cannot make a loopback-only namespace ("" if it can)."""
    if os.geteuid() != 0:
        return "needs root to create a network namespace (unshare --net)"
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            return f"needs the {tool!r} tool to create a loopback-only network namespace"
    return ""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARK}: run in a network namespace with only loopback (moto tests)")
    if in_loopback_namespace() and os.environ.get("SKYHIVE_TEST_RESULTS"):
        config.pluginmanager.register(_Recorder(os.environ["SKYHIVE_TEST_RESULTS"]), "skyhive-loopback-recorder")


class _Recorder:
    """In the child: write each report as a JSON line for the parent."""

    def __init__(self, path: str) -> None:
        self.path = path

    def pytest_runtest_logreport(self, report: TestReport) -> None:
        longrepr: Any = None
        if report.skipped and isinstance(report.longrepr, tuple):
            longrepr = list(report.longrepr)
        elif report.longrepr is not None:
            longrepr = str(report.longrepr)
        line = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome, "longrepr": longrepr,
                "sections": [list(s) for s in report.sections], "duration": report.duration}
        with open(self.path, "a") as fh:
            fh.write(json.dumps(line) + "\n")


def _run_module(item: pytest.Item) -> None:
    """Run every selected marked test of `item`'s module in the namespace; fill `_results`."""
    module_items = [i for i in item.session.items if i.fspath == item.fspath and i.get_closest_marker(MARK)]
    ids = [i.nodeid for i in module_items]
    root = Path(str(item.config.rootpath))
    with tempfile.TemporaryDirectory(prefix="skyhive-loopback-") as tmp:
        results = Path(tmp) / "results.jsonl"
        env = dict(os.environ, **{ENV_FLAG: "1", "SKYHIVE_TEST_RESULTS": str(results)})
        script = 'ip link set lo up && exec "$0" "$@"'
        cmd = ["unshare", "--net", "sh", "-c", script, sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
               "-q", *ids]
        try:
            proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
            output = proc.stdout[-4000:] + proc.stderr[-4000:]
        except subprocess.TimeoutExpired as exc:
            output = f"the namespace run timed out after {CHILD_TIMEOUT} s: {exc}"
        reports: dict[str, list[dict[str, Any]]] = {}
        if results.exists():
            for line in results.read_text().splitlines():
                rec = json.loads(line)
                reports.setdefault(rec["nodeid"], []).append(rec)
    for nodeid in ids:
        _results[nodeid] = reports.get(nodeid) or [{
            "nodeid": nodeid, "when": "call", "outcome": "failed", "sections": [], "duration": 0.0,
            "longrepr": f"the test did not report from the loopback-only namespace; child output:\n{output}"}]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    if item.get_closest_marker(MARK) is None or in_loopback_namespace():
        return None
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    why = unavailable()
    if why:
        records = [{"when": "setup", "outcome": "skipped", "longrepr": [str(item.path), 0, f"Skipped: {why}"],
                    "sections": [], "duration": 0.0}]
    else:
        if item.nodeid not in _results:
            _run_module(item)
        records = _results.pop(item.nodeid)
    for rec in records:
        longrepr = rec["longrepr"]
        if rec["outcome"] == "skipped" and isinstance(longrepr, list):
            longrepr = tuple(longrepr)
        report = TestReport(item.nodeid, item.location, {k: 1 for k in item.keywords}, rec["outcome"], longrepr,
                            rec["when"], sections=[tuple(s) for s in rec["sections"]], duration=rec["duration"])
        ihook.pytest_runtest_logreport(report=report)
    # what pytest's own protocol does after an item: tear down the collectors `nextitem` does not share (an
    # item before this one kept those it shares with this one, which ran elsewhere; left set up, the next
    # item in another folder fails with "previous item was not torn down properly")
    item.session._setupstate.teardown_exact(nextitem)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
