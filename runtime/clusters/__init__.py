"""Named pools: kept after their client leaves, attached to by name, with a job queue."""
