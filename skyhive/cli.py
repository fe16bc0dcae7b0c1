"""The `skyhive` command."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="skyhive", description="Run Python functions on a pool of machines.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    args = parser.parse_args(argv)
    if args.version:
        from skyhive import __version__

        print(__version__)
        return 0
    parser.print_help(sys.stderr)
    return 2
