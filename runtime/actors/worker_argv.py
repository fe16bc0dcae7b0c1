"""A worker's command line after the interpreter: one place for the node actor, which starts workers,
and the pool, which starts a plain Local pool's workers early (before it imports the actors' modules:
this one is light)."""

WORKER_ARGV = ("-m", "skyhive.runtime.worker")
