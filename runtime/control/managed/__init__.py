"""Managed jobs: a job that outlives its nodes and its client (docs/jobs.md)."""
