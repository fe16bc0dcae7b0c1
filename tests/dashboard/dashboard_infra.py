"""What the dashboard's tests share: the `skyhive dashboard` process, a headless Chromium (Debian's
`chromium` and `chromium-driver`, driven by Selenium; skipped with the reason when one is missing),
and screenshots written under `build/dashboard-screenshots/` for a person to look at."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "build" / "dashboard-screenshots"
CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
CHROMEDRIVER = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")


@dataclass
class Dashboard:
    proc: subprocess.Popen[str]
    url: str  # with the token (in the fragment: #token=...)
    base: str  # http://127.0.0.1:PORT
    token: str
    port: int
    output: Path  # what it printed (its log: read it when a test fails)


def start_dashboard(output: Path, *args: str, env: dict[str, str] | None = None) -> Dashboard:
    """`skyhive dashboard --port 0 [ARGS]` in its own process (what it prints goes to `output`, read
    for its URL: a pipe nobody reads would stall it once full)."""
    pytest.importorskip("starlette", reason="the dashboard extra (starlette, uvicorn) is not installed")
    pytest.importorskip("uvicorn", reason="the dashboard extra (starlette, uvicorn) is not installed")
    with open(output, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "skyhive", "dashboard", "--port", "0", *args], stdout=out,
                                stderr=subprocess.STDOUT, text=True, env={**os.environ, **(env or {})})
    deadline = time.monotonic() + 120
    while True:
        found = re.search(r"(http://127\.0\.0\.1:(\d+))/[#?]token=(\S+)", output.read_text())
        if found:
            return Dashboard(proc, found.group(0), found.group(1), found.group(3), int(found.group(2)), output)
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise AssertionError(f"skyhive dashboard printed no URL: {output.read_text()!r}")
        time.sleep(0.05)


def auth(dash: Dashboard) -> dict[str, str]:
    """The header a script sends the token in (the page sends the same)."""
    return {"Authorization": f"Bearer {dash.token}"}


def stop_dashboard(dash: Dashboard) -> None:
    dash.proc.terminate()
    try:
        dash.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        dash.proc.kill()
        dash.proc.wait()
        raise AssertionError("skyhive dashboard did not stop on SIGTERM within 30 s") from None


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[Dashboard]:
    dash = start_dashboard(tmp_path / "dashboard.out")
    try:
        yield dash
    finally:
        stop_dashboard(dash)
        printed = dash.output.read_text()
        assert "Traceback" not in printed, f"the dashboard logged an error:\n{printed}"


def _first(paths: tuple[str, ...]) -> str | None:
    return next((p for p in paths if os.access(p, os.X_OK)), None)


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium through Selenium (no browser download: the system's chromium)."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the dev extra has it)")
    chromium = _first(CHROMIUM) or shutil.which("chromium")
    driver_path = _first(CHROMEDRIVER) or shutil.which("chromedriver")
    if not chromium or not driver_path:
        pytest.skip("no chromium/chromedriver here (.ci/system-deps.sh installs Debian's chromium and "
                    "chromium-driver as root)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    # the browser's processes are not the pools': without the state directory in their environment,
    # a check for what runs under it does not count them
    env = {k: v for k, v in os.environ.items() if k != "SKYHIVE_HOME"}
    driver = webdriver.Chrome(service=Service(driver_path, env=env), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver: Any, name: str) -> Path:
    """A screenshot of the page as it is, `build/dashboard-screenshots/NAME.png`."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 5000, f"screenshot {path} is empty"
    return path


def wait_until(predicate: Callable[[], Any], *, timeout: float = 90.0, what: str) -> Any:
    """`predicate()` once it is truthy (errors while the page changes count as not yet)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception as exc:  # noqa: BLE001 - a stale element while the page redraws
            last, value = exc, None
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}" + (f" (last error: {last!r})" if last else ""))
