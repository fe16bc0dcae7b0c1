"""Test infrastructure: real OpenSSH servers (sshd.py), network-namespace hosts (netns.py),
pytest fixtures (fixtures.py)."""
