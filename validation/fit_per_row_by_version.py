"""Fit ``gpu_per_req_s_by_version["0.4.0"]`` on DataCrunch's open-loop Llama-3.3-70B runs; report the 405B runs held out.

The factor is the serialized per-row time of one decode step of SGLang ≤ 0.4.0 (docs/accuracy.md §3.11): it is
the only factor varied, on a grid of 5 µs; the value with the lowest median-ITL MAPE on the fit rows (Llama-3.3-70B
TP4, the five open-loop rates of validation/datacrunch_h200_sglang.csv) is chosen. The Llama-3.1-405B TP8 rows
(four open-loop rates: another model, TP and step time) are held out and only reported, as are the 70B offline
runs (request rate inf; KV-bound, retraction-dominated).

Usage (from the repo root): python validation/fit_per_row_by_version.py [--grid-us 15,20,...]
Then: shadowsim calibrate --base simcore/perf/data/default_profile.json --gpu-per-req-s-for 0.4.0=<best>e-06
      --out simcore/perf/data/default_profile.json
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FILE = HERE / "datacrunch_h200_sglang.csv"
METRICS = ("ttft_p50", "itl_p50", "output_tps")


def main(argv: list[str] | None = None) -> int:
    from simcore.perf.profile import default_profile
    from simcore.perf.validation import rows_from_records, validate

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid-us", default=",".join(str(x) for x in range(15, 125, 5)))
    a = ap.parse_args(argv)
    with FILE.open() as f:
        reader = csv.DictReader(f)
        rows = rows_from_records(list(reader), reader.fieldnames or [], str(FILE))
    groups = {"fit: 70B open (5)": lambda r: "70b" in r["id"] and r["request_rate"] is not None,
              "held out: 405B open (4)": lambda r: "405b" in r["id"],
              "offline 70B (6)": lambda r: r["request_rate"] is None}
    base = default_profile()
    best: tuple[float, float] | None = None
    print("per-row us | " + " | ".join(f"{g}: TTFT50 / ITL50 / out tok/s MAPE" for g in groups))
    for us in (float(x) for x in a.grid_us.split(",")):
        prof = base.model_copy(update={"gpu_per_req_s_by_version": {"0.4.0": us * 1e-6}})
        out = validate(rows, profile=prof)
        cells = []
        for name, sel in groups.items():
            rs = [r for r in out["rows"] if sel(r)]
            mape = [float(np.mean([r[f"{m}_ape_pct"] for r in rs])) for m in METRICS]
            cells.append(" / ".join(f"{v:5.1f}" for v in mape))
            if name.startswith("fit") and (best is None or mape[1] < best[1]):
                best = (us, mape[1])
        print(f"{us:10.0f} | " + " | ".join(cells), flush=True)
    assert best is not None
    print(f"best on the fit rows (median-ITL MAPE {best[1]:.1f}%): {best[0]:.0f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
