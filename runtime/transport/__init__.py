"""How a node is reached: the declared hooks (`base`), the registry from reach kind to transport, the local and SSH transports."""
