"""Per-slice error of a validation run: MAPE / median / P90 of TTFT and TPOT by GPU, precision, TP and EP.

  python -m validation.slices ../shared/data/validation/sglang_deepseek_b200_b300.csv
  shadowsim validate FILE --json > v.json && python -m validation.slices FILE --from-json v.json

The first form simulates every row (as `shadowsim validate` does); the second reuses a `validate --json` output
(rows are joined by id with the measurement file, whose tp/ep/precision columns define the slices).
Numbers in docs/accuracy.md §3.10 come from this command.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from shadowsim.commands.validate import read_rows
from simcore.perf.slices import DEFAULT_SLICES, all_slices
from simcore.perf.validation import METRICS, Protocol, RowResult, validate


def _results_from_json(rows: list[Any], path: str) -> tuple[list[RowResult], list[dict[str, str]]]:
    with open(path) as fh:
        out = json.load(fh)
    by_id = {r.id: r for r in rows}
    results = []
    for d in out["rows"]:
        row = by_id.get(d["id"])
        if row is None:
            raise SystemExit(f"validation.slices: row {d['id']!r} of {path} is not in the measurement file")
        pred, ape = {}, {}
        for m in METRICS:
            unit = "rps" if m == "throughput" else "ms"
            pred[m] = d.get(f"predicted_{m}_{unit}")
            ape[m] = d.get(f"{m}_ape_pct")
        results.append(RowResult(row, pred, ape))
    return results, out.get("skipped", [])


def _fmt(v: Any) -> str:
    return "-" if v is None else f"{v:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m validation.slices", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("measurements", help="measurement CSV (the format of shadowsim validate)")
    ap.add_argument("--from-json", metavar="VALIDATE.json", help="reuse a `shadowsim validate --json` output")
    ap.add_argument("--by", default=",".join(DEFAULT_SLICES), help="comma-separated row attributes "
                    f"(default {','.join(DEFAULT_SLICES)})")
    ap.add_argument("--json", action="store_true", help="print the slices as JSON")
    ap.add_argument("--deployment", default="as-deployed", choices=("as-deployed", "recorded"),
                    help="read the rows as `shadowsim validate --deployment` does (as-deployed: known published "
                         "deployments' tp/ep and flags, shadowsim/known_deployments.py; default as-deployed); give "
                         "the mode the --from-json run used")
    args = ap.parse_args(argv)
    rows = read_rows(args.measurements, args.deployment)
    if args.from_json:
        results, skipped = _results_from_json(rows, args.from_json)
    else:
        out = validate(rows, protocol=Protocol(deployment=args.deployment), progress=lambda i, n, row: print(f"[{i + 1}/{n}] {row.id}", file=sys.stderr))
        results, skipped = out["_results"], out["skipped"]
    slices = all_slices(results, [s.strip() for s in args.by.split(",") if s.strip()])
    if args.json:
        print(json.dumps({"slices": slices, "skipped": skipped}, indent=1, default=str))
        return 0
    print(f"{'slice':<10} {'value':<10} {'rows':>4} | {'TTFT MAPE':>9} {'median':>6} {'P90':>6} |"
          f" {'TPOT MAPE':>9} {'median':>6} {'P90':>6}")
    for s in slices:
        t, p = s["summary"]["ttft"], s["summary"]["tpot"]
        print(f"{s['slice']:<10} {str(s['value']):<10} {s['rows']:>4} | {_fmt(t['mape']):>9} {_fmt(t['median_ape']):>6}"
              f" {_fmt(t['p90_ape']):>6} | {_fmt(p['mape']):>9} {_fmt(p['median_ape']):>6} {_fmt(p['p90_ape']):>6}")
    print(f"skipped: {len(skipped)}" + "".join(f"\n  {s['id']}: {s['reason']}" for s in skipped))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
