"""The detached (SSH-mode) worker at the socket level, no sshd: drop/resume, replay limit, idle exit, Goodbye."""

import json
import os
import pickle
import socket
import subprocess
import sys
import time

import cloudpickle
from skyhive.protocol import Connection, Role, Submit, Result, Output, Hello, Shutdown
from skyhive.protocol.messages import PROTOCOL_VERSION, Resume, Goodbye, Ack, Welcome
from skyhive.protocol.resume import Inbox, Outbox, encode_control

PY = "%d.%d.%d" % sys.version_info[:3]

def start(path, *extra):
    out = subprocess.run([sys.executable, "-m", "skyhive.runtime.worker.server", "--socket", path, *extra],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out
    return json.loads(out.stdout.strip().splitlines()[-1])

class Client:
    def __init__(self, path):
        self.path = path
        self.conn = Connection(Role.CLIENT)
        self.inbox = Inbox()
        self.outbox = Outbox()
        self.msgs = []
        self.goodbye = None
        self.sock = None
    def attach(self):
        self.sock = socket.socket(socket.AF_UNIX); self.sock.connect(self.path); self.sock.settimeout(10)
        self.inbox.reset()
        asked = self.inbox.received
        self.sock.sendall(encode_control(Hello(protocol_version=PROTOCOL_VERSION, python_version=PY, skyhive_version="x", max_frame=1<<26, resume_from=asked)))
        resumed = False
        while not resumed:
            for item in self.inbox.feed(self.sock.recv(65536)):
                if isinstance(item, Resume):
                    assert item.from_seq == asked
                    pieces = self.outbox.replay(item.received)
                    if pieces: self.sock.sendall(b"".join(bytes(p) for p in pieces))
                    resumed = True
                    continue
                self._item(item)
    def _item(self, item):
        if isinstance(item, memoryview):
            self.msgs += self.conn.receive_data(item)
        elif isinstance(item, Goodbye):
            self.goodbye = item.exit_status
        elif isinstance(item, Welcome):
            raise RuntimeError(item.error)
    def send(self, msg):
        data = self.conn.send(msg)
        self.outbox.record((data,))
        if self.sock is not None:
            try: self.sock.sendall(data)
            except OSError: pass
    def pump(self, until, timeout=20):
        deadline = time.monotonic() + timeout
        while not until():
            assert time.monotonic() < deadline, ("timeout", self.msgs[-3:], self.inbox, len(self.msgs))
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:  # the worker closed with our last Ack unread: closed all the same
                return False
            except TimeoutError:
                raise AssertionError(("recv timeout", self.msgs[-3:], self.inbox, len(self.msgs), [type(m).__name__ for m in self.msgs][-10:]))
            if not data: return False
            for item in self.inbox.feed(data): self._item(item)
            if self.inbox.ack_due(): self.sock.sendall(self.inbox.ack())
        return True
    def drop(self):
        self.sock.close(); self.sock = None

def chatty(n, pause):
    for i in range(n):
        print(f"line {i}", flush=True)
        if pause: time.sleep(pause)
    return n

def submit(c, tid, fn, *args):
    c.send(Submit(task_id=tid, fn_id=b"%d" % tid, fn=cloudpickle.dumps(fn), args=pickle.dumps((args, {}))))

def result(c, tid):
    return [m for m in c.msgs if isinstance(m, Result) and m.task_id == tid]

def text(c, tid):
    return "".join(m.data for m in c.msgs if isinstance(m, Output) and m.task_id == tid)

def test_socket_worker_resumes_replays_and_exits(tmp_path):
    d = str(tmp_path)
    # 1. drop mid task twice, results and lines once and in order
    path = f"{d}/a.sock"
    info = start(path, "--idle-timeout", "5")
    c = Client(path); c.attach()
    c.send(Hello(protocol_version=PROTOCOL_VERSION, python_version=PY, skyhive_version="x", max_frame=1<<26))
    c.pump(lambda: any(isinstance(m, Welcome) for m in c.msgs))
    submit(c, 1, chatty, 300, 0.005)
    c.pump(lambda: text(c, 1).count("\n") > 20)
    c.drop(); submit(c, 2, chatty, 3, 0)  # written while down
    time.sleep(0.3); c.attach()
    c.pump(lambda: text(c, 1).count("\n") > 150)
    c.drop(); time.sleep(0.5); c.attach()
    c.pump(lambda: result(c, 1) and result(c, 2))
    assert text(c, 1) == "".join(f"line {i}\n" for i in range(300)), text(c, 1)[:200]
    assert text(c, 2) == "line 0\nline 1\nline 2\n"
    assert pickle.loads(result(c, 1)[0].value) == 300
    welcome = [m for m in c.msgs if isinstance(m, Welcome)][0]
    assert welcome.pid == info["pid"]
    # 2. shutdown: Goodbye, exit file, socket gone
    c.send(Shutdown())
    c.pump(lambda: c.goodbye is not None)
    try:
        c.sock.sendall(c.inbox.ack())
    except (BrokenPipeError, ConnectionResetError):
        pass  # the pump's own acks already covered everything: the worker left as soon as they arrived
    else:
        c.pump(lambda: False, timeout=10)  # until the worker closes
    for _ in range(50):
        if not os.path.exists(path): break
        time.sleep(0.1)
    assert not os.path.exists(path) and open(path + ".exit").read().strip() == "0"
    # 3. replay limit: no client, the task's output waits; a reconnect gets it all
    path = f"{d}/b.sock"
    start(path, "--idle-timeout", "20", "--replay-limit", "200000")
    c = Client(path); c.attach()
    c.send(Hello(protocol_version=PROTOCOL_VERSION, python_version=PY, skyhive_version="x", max_frame=1<<26))
    c.pump(lambda: any(isinstance(m, Welcome) for m in c.msgs))
    c.drop()
    submit(c, 1, chatty, 20000, 0)  # ~250 KB of output: past the limit while nobody reads
    c.attach()
    time.sleep(1.0)
    c.drop(); time.sleep(1.0)
    c.attach()
    c.pump(lambda: result(c, 1), timeout=60)
    assert text(c, 1) == "".join(f"line {i}\n" for i in range(20000))
    # 4. idle: no client → exits, socket gone
    c.drop()
    info = start(f"{d}/c.sock", "--idle-timeout", "1")
    t0 = time.monotonic()
    while os.path.exists(f"{d}/c.sock") and time.monotonic() - t0 < 10:
        time.sleep(0.1)
    assert not os.path.exists(f"{d}/c.sock")
    time.sleep(0.2)
    assert not os.path.exists(f"/proc/{info['pid']}") or open(f"/proc/{info['pid']}/stat").read().split()[2] == "Z"
    # 5. b.sock worker: Shutdown to end it
    c.attach(); c.send(Shutdown()); c.pump(lambda: c.goodbye is not None)
