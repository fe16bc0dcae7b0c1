"""Preparing any node to run workers, over its `Shell` (`runtime/nodes/shell.py`): `node.py` (the
bootstrap a kind declares), `remote.py` (a node with a Python of its own: runtime wheels and the Image's
environment, cached by content hash), `here.py` (a node sharing this machine's Python: the Image checked,
or built here), `envkey.py` (the cache key), `wheels.py` (the wheels shipped), `script.py` (what runs on
the node, standard library only), `output.py` (reading the script's output)."""
