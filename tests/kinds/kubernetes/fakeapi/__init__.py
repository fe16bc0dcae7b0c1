"""FAKE Kubernetes API server for the tests (not a cluster): `server.FakeAPIServer` serves the pod endpoints
the official client calls on 127.0.0.1, refusing what the real API server refuses (`rules.py`, each rule
citing its page), with pods whose processes are real local processes (`cluster.py`)."""
