"""Entry point: `python -m skyhive.runtime.worker` speaks the protocol on stdin/stdout.

A worker the client started early (`providers/local_early.py`) imports its modules first, then reads
its environment from the first frame on stdin (`runtime/onnode/early.py`): the imports run while the client's own do.
"""

import os
import sys

from .serve import serve

if __name__ == "__main__":
    from ..onnode.early import ENV_VAR as EARLY_ENV

    if os.environ.pop(EARLY_ENV, None) is not None:
        from ..onnode.early import read_env

        env = read_env(0)
        if env is None:  # not taken: the client closed our stdin before sending anything
            os._exit(0)
        os.environ.update(env)
    code = serve()
    sys.stdout.flush()
    os._exit(code)
