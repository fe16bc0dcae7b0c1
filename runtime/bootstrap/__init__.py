"""Preparing a node to run workers: a check for Local nodes, wheels and an environment for SSH and cloud nodes."""
