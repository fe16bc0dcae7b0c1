"""The real-programs audit (issue 40): Skyward's and SkyPilot's own programs run on skyhive's Local provider.

`python -m bench.audit --help`; the programs counted are listed in bench/audit/programs.py, the rules that may
touch them in bench/audit/rewrite.py, the last table in bench/audit/results.md.
"""
