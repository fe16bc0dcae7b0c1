"""The worker daemon that runs tasks on a node (`python -m skyhive.runtime.worker`)."""
