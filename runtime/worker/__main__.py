"""Entry point: `python -m skyhive.runtime.worker` speaks the protocol on stdin/stdout."""

import os
import sys

from .serve import serve

if __name__ == "__main__":
    code = serve()
    sys.stdout.flush()
    os._exit(code)
