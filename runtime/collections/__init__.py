"""Skyward's distributed collections (`sky.dict`, `sky.set`, `sky.counter`, `sky.queue`, `sky.barrier`,
`sky.lock`): state shared by every task of a pool. `store.py` holds them (in the client), `proxies.py`
is what tasks call. See docs/collections.md."""
