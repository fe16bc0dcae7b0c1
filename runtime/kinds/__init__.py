"""The built-in kinds of node, one folder each (local, ssh, slurm, simulated; the clouds' instances are
SSH nodes). Each folder declares its kinds in its `__init__.py` as `NodeKind`s (cheap to import: the
transport and bootstrap are named as "module:attribute" and loaded on first use), registered through the
`skyhive.transports` entry points in `pyproject.toml` — the same way another package adds a kind."""
