""""Did you mean ...?" for a misspelt name: one wording for keyword arguments and task-file keys."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["did_you_mean", "unexpected_keywords"]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """' (did you mean nodes?)' for the closest of `known` to `name`, or '' when none is close."""
    near = difflib.get_close_matches(name, sorted(known), n=1)
    return f" (did you mean {near[0]}?)" if near else ""


def unexpected_keywords(where: str, unknown: Iterable[str], known: Iterable[str]) -> str:
    """The message for keyword arguments `where` does not take, each with its nearest known spelling:
    "Pool() got unexpected keyword arguments: node (did you mean nodes?)"."""
    names = sorted(unknown)
    known = sorted(known)
    listed = ", ".join(f"{n}{did_you_mean(n, known)}" for n in names)
    return f"{where} got unexpected keyword arguments: {listed}"
