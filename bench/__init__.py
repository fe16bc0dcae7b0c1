"""skyhive's benchmark harness: ``python -m bench`` (options in bench/cli.py; report in bench/results.md).

skyhive against the raw floor of its transport (bare worker subprocesses on pipes) and against Ray
and Dask, measured in one run and reported as ratios. Kept import-light: the heavy libraries are
only imported in the per-system subprocesses (bench.runner).
"""
