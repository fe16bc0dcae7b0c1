"""The node's idle watchdog (runtime/worker/watchdog.py), run for real on this machine: it counts real
TCP connections, fires its command after the idle time, and a second start finds the first."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

from skyhive.runtime.worker.watchdog import connected_unix, established, main


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_established_counts_connections_to_the_port():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert established(port) == 0
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = server.accept()
        assert established(port) == 1  # the server side's entry; the client's local port is another
        client.close()
        conn.close()
        assert established(port) == 0


def test_connected_unix_counts_connections_to_the_sockets_of_a_directory(tmp_path):
    path = str(tmp_path / "w.sock")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        server.listen()
        assert connected_unix(str(tmp_path)) == 0  # a listener is not a client
        client = socket.socket(socket.AF_UNIX)
        client.connect(path)
        conn, _ = server.accept()
        assert connected_unix(str(tmp_path)) == 1  # the accepted side carries the socket's path
        assert connected_unix(str(tmp_path / "other")) == 0
        client.close()
        conn.close()
        assert connected_unix(str(tmp_path)) == 0


def test_bad_arguments_are_refused(tmp_path, capsys):
    assert main(["--idle", "0", "--state-dir", str(tmp_path)]) == 2
    assert "--idle and --interval must be positive" in capsys.readouterr().err


def run_watchdog(tmp_path, idle: float, port: int, marker) -> dict:
    out = subprocess.run([sys.executable, "-m", "skyhive.runtime.worker.watchdog", "--idle", str(idle),
                          "--interval", "0.1", "--port", str(port), "--command", f"touch {marker}",
                          "--state-dir", str(tmp_path / "wd")], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_it_fires_after_the_idle_time_and_one_runs_per_node(tmp_path):
    marker = tmp_path / "fired"
    first: dict = {}
    try:
        with socket.socket() as server:  # a client stays connected until the second has started: the
            server.bind(("127.0.0.1", 0))  # first cannot fire and exit meanwhile (no timing margin)
            server.listen()
            port = server.getsockname()[1]
            client = socket.create_connection(("127.0.0.1", port))
            conn, _ = server.accept()
            try:
                first = run_watchdog(tmp_path, 1.0, port, marker)
                second = run_watchdog(tmp_path, 1.0, free_port(), tmp_path / "second")
            finally:
                client.close()
                conn.close()
        assert second == {"pid": first["pid"], "already": True}
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists() and not (tmp_path / "second").exists()
    finally:
        try:
            if first:
                os.kill(first["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_connected_client_keeps_it_from_firing(tmp_path):
    marker = tmp_path / "fired"
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = server.accept()
        started = run_watchdog(tmp_path, 0.5, port, marker)
        try:
            time.sleep(2.0)  # four idle periods with the connection up
            assert not marker.exists()
            client.close()
            conn.close()
            deadline = time.monotonic() + 20
            while not marker.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert marker.exists()
        finally:
            try:
                os.kill(started["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
