"""Providers used by tests only."""
