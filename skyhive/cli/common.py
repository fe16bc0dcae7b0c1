"""What the command's modules share: errors on stderr, tables, questions on a terminal."""

from __future__ import annotations

import argparse
import sys


def err(text: str) -> None:
    print(f"skyhive: {text}", file=sys.stderr, flush=True)


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    return ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in (header, *rows)]


def confirm(args: argparse.Namespace, question: str) -> bool:
    """True with -y or off a terminal; else the user's answer (the default is yes, as SkyPilot's)."""
    if args.yes or not sys.stdin.isatty():
        return True
    sys.stderr.write(f"{question} [Y/n] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    return bool(answer) and answer.strip().lower() in ("", "y", "yes")


def ask(prompt: str) -> str:
    sys.stderr.write(prompt)
    sys.stderr.flush()
    return sys.stdin.readline()
