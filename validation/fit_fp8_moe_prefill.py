"""Fit the profile's ``fp8_moe_prefill_scale`` on the fit split of the B200 fp8 InferenceX rows; report held out.

The factor multiplies the block-fp8 fused MoE's time above its memory floor (`simcore.perf.moe_parallel`,
docs/accuracy.md §3.16). Rows: the B200 fp8 rows of validation/sglang_deepseek_inferencex.csv in file order; fit =
rows 1, 2, 4, 5, … (not every third), held out = every third (as docs/accuracy.md's other splits). For each scale on
the grid, `shadowsim validate` runs those rows with a profile that differs from the shipped one in this factor
only; the scale with the lowest sum of TTFT MAPE and TPOT MAPE on the fit rows is chosen (both metrics: a longer
prefill also pauses the decode of every running request). Held-out rows, the B300 fp8 rows and every other file
are never used for the choice; run `shadowsim validate` on them afterwards.

Usage (from the repo root): python validation/fit_fp8_moe_prefill.py [--scales 1,1.5,...] [--write]
    (--write stores the best scale in simcore/perf/data/default_profile.json). ~1 minute of CPU per scale.
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILE = HERE / "sglang_deepseek_inferencex.csv"


def split_ids(path: Path = FILE) -> tuple[list[str], list[str], dict[str, dict[str, str]]]:
    """(fit ids, held-out ids, rows by id) of the B200 fp8 rows, in file order."""
    with open(path, newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["gpu"] == "b200_sxm" and r["precision"] == "fp8"]
    ids = [r["id"] for r in rows]
    return ([i for j, i in enumerate(ids) if j % 3 != 2], [i for j, i in enumerate(ids) if j % 3 == 2],
            {r["id"]: r for r in rows})


def errors(out: dict, ids: list[str], rows: dict[str, dict[str, str]], metric: str) -> tuple[float, float]:
    """(MAPE, signed median of predicted / measured − 1), percent, over ``ids``."""
    pred = {d["id"]: d.get(f"predicted_{metric}_ms") for d in out["rows"]}
    rel = [100.0 * (pred[i] / float(rows[i][f"measured_{metric}_ms"]) - 1.0) for i in ids if pred.get(i)]
    return statistics.mean(abs(x) for x in rel), statistics.median(rel)


def run(scale: float, tmp: Path) -> dict:
    from simcore.perf.profile import default_profile

    prof = tmp / f"s{scale}.json"
    default_profile().model_copy(update={"fp8_moe_prefill_scale": float(scale)}).save(prof)
    cmd = [sys.executable, "-m", "shadowsim", "validate", str(FILE), "--only", "gpu=b200_sxm", "--only",
           "precision=fp8", "--profile", str(prof), "--json"]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scales", default="1,1.5,2,2.5,3,3.25,3.5,3.75,4,4.25,4.5,5")
    ap.add_argument("--write", action="store_true", help="store the best scale in the shipped profile")
    args = ap.parse_args(argv)
    fit, held, rows = split_ids()
    best: tuple[float, float] | None = None
    print(f"{'scale':>6} | fit {len(fit)}: TTFT MAPE / median, TPOT MAPE / median | held out {len(held)}: the same")
    with tempfile.TemporaryDirectory() as d:
        for s in [float(x) for x in args.scales.split(",")]:
            out = run(s, Path(d))
            ft, fp, ht, hp = (errors(out, ids, rows, m) for ids in (fit, held) for m in ("ttft", "tpot"))
            print(f"{s:6.2f} | {ft[0]:5.1f} / {ft[1]:+6.1f}, {fp[0]:4.1f} / {fp[1]:+5.1f} |"
                  f" {ht[0]:5.1f} / {ht[1]:+6.1f}, {hp[0]:4.1f} / {hp[1]:+5.1f}", flush=True)
            if best is None or ft[0] + fp[0] < best[1]:
                best = (s, ft[0] + fp[0])
    assert best is not None
    print(f"best on the fit rows (TTFT + TPOT MAPE): {best[0]}")
    if args.write:
        from simcore.perf.profile import default_profile, default_profile_path

        p = default_profile().model_copy(update={"fp8_moe_prefill_scale": best[0]})
        p.save(default_profile_path())
        print(f"wrote {default_profile_path()} (hash {p.profile_hash})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
