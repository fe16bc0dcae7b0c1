"""The client's actors: the pool actor, the node actors (lifecycle and supervision) and the worker channels."""
