"""Driving live pools: what runs a task on a pool (launch, a named pool's queue agent, exec, managed jobs);
below the CLI and the dashboard, above the pool (`runtime/pool.py`), which it drives through its
`PoolDriver` (`pool.driver()`), never its actors. `runtime/commands/` says what (task files, flags,
plans, checks)."""
