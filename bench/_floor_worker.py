"""The floor's worker: a bare subprocess answering cloudpickled calls over its stdin/stdout pipes.

Run as a script (``python bench/_floor_worker.py``); it imports nothing from the project.

Wire format, both directions: a frame is a 4-byte big-endian length followed by that many bytes.
  request:  frame(msgpack [req_id, fn_payload, args_payload, n_buffers, batch]) then n_buffers raw frames,
            the pickle protocol-5 out-of-band buffers of the arguments, in order (no join, no copy
            on the sender). fn_payload is cloudpickle(fn); the worker keeps the functions it has
            unpickled, keyed by those bytes. args_payload is cloudpickle((args, kwargs)); if
            batch is true, args is (items,) and the answer is [fn(x) for x in items].
  response: frame(msgpack [req_id, ok, cloudpickle(result or exception)])
Calls are answered one at a time, in order, one write() per response. The worker exits on EOF.
"""

import os
import sys


def main() -> None:
    import cloudpickle
    import msgpack

    # Keep the protocol on a private copy of fd 1 and send anything the function prints
    # (Python or native code) to stderr, so it can never corrupt a frame.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer

    def read_frame() -> bytes | None:
        head = inp.read(4)
        if len(head) < 4:
            return None
        n = int.from_bytes(head, "big")
        body = inp.read(n)  # BufferedReader.read(n) loops until n bytes (one copy, from the kernel)
        if len(body) < n:
            return None
        return body

    functions: dict = {}
    while True:
        frame = read_frame()
        if frame is None:
            return
        req_id, fn_payload, payload, n_buffers, batch = msgpack.unpackb(frame)
        buffers = []
        for _ in range(n_buffers):
            buf = read_frame()
            if buf is None:
                return
            buffers.append(buf)
        try:
            fn = functions.get(fn_payload)
            if fn is None:
                fn = functions[fn_payload] = cloudpickle.loads(fn_payload)
            args, kwargs = cloudpickle.loads(payload, buffers=buffers)
            del buffers, payload
            result = [fn(x) for x in args[0]] if batch else fn(*args, **kwargs)
            reply = [req_id, True, cloudpickle.dumps(result)]
        except BaseException as exc:  # report, keep serving
            try:
                reply = [req_id, False, cloudpickle.dumps(exc)]
            except Exception:
                reply = [req_id, False, cloudpickle.dumps(RuntimeError(repr(exc)))]
        body = msgpack.packb(reply)
        out.write(len(body).to_bytes(4, "big") + body)
        out.flush()


if __name__ == "__main__":
    try:
        main()
    except (KeyboardInterrupt, BrokenPipeError):
        pass
