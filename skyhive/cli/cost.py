"""`skyhive cost-report [--json]`: every pool and managed job of this state directory, its hours and cost
(`runtime/commands/cost.py`)."""

from __future__ import annotations

import argparse
import json

from .common import table


def cmd_cost_report(args: argparse.Namespace) -> int:
    from skyhive.runtime.commands.cost import cost_rows, total
    from skyhive.runtime.control.managed import store

    jobs = [st for st in (store.load_listed(i) for i in store.list_ids()) if st is not None]
    rows = cost_rows(jobs)
    if args.json:
        for row in rows:
            print(json.dumps(row.as_dict()))
        return 0
    if not rows:
        print("no pools or managed jobs in this state directory")
        return 0

    def money(value: float | None) -> str:
        return "unknown" if value is None else f"${value:.4f}" if value < 1 else f"${value:.2f}"

    lines = table(("KIND", "NAME", "PROVIDER", "STATUS", "HOURS", "$/H", "COST", "NOTE"),
                  [(r.kind, r.name, r.provider, r.status, f"{r.hours:.3f}",
                    "-" if r.per_hour is None else f"${r.per_hour:.4g}", money(r.cost), r.why) for r in rows])
    print("\n".join(lines))
    known, unknown = total(rows)
    print(f"total of the pools: {money(known)}" + (f" (and {unknown} pool{'s' if unknown != 1 else ''} of unknown "
                                                   f"cost)" if unknown else "") + "; jobs are counted in their pools")
    return 0


def add_cost_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cost-report", help="every pool and managed job: hours and cost (from the event logs)")
    p.add_argument("--json", action="store_true", help="one JSON object per pool or job")
    p.set_defaults(func=cmd_cost_report)
