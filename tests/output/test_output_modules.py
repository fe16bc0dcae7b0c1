"""runtime/output/ by what each module is about (issue 37): the router (where output goes: the log, the
terminal, the subscribers, backpressure) and a subscriber's side (its records, queue and stream), each
under the house's ~500 lines."""

from __future__ import annotations

import ast
from pathlib import Path

OUTPUT = Path(__file__).resolve().parents[2] / "runtime" / "output"


def test_every_output_module_stays_under_500_lines():
    long = {p.name: n for p in OUTPUT.glob("*.py") if (n := len(p.read_text().splitlines())) >= 500}
    assert not long, f"split these by what they are about: {long}"


def test_the_subscribers_side_is_its_own_module_and_the_router_reexports_it():
    defined = {p.stem: {n.name for n in ast.parse(p.read_text()).body if isinstance(n, ast.ClassDef)}
               for p in OUTPUT.glob("*.py")}
    assert {"OutputRecord", "OutputStream", "_Queue"} <= defined["stream"]
    assert "OutputRouter" in defined["router"] and not {"OutputRecord", "OutputStream", "_Queue"} & defined["router"]
    from skyhive.runtime.output import router, stream

    assert router.OutputRecord is stream.OutputRecord and router.OutputStream is stream.OutputStream  # as before
