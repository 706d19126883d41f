"""Per row of a measurement file: the simulated decode step, the simulated prefill pause per decode step, and the
decode step the measured TPOT implies (measured TPOT − simulated pause; `simcore.perf.decode_split`).

    python -m validation.decode_step_split validation/sglang_deepseek_inferencex.csv --gpu b300_sxm
    python -m validation.decode_step_split FILE --gpu b200_sxm --json split.json

Columns: precision, TP/EP, ISL, concurrency, measured and simulated TPOT (ms), simulated decode step (ms), mean
decode batch and KV tokens per decode row, simulated pause per decode step (ms), implied measured decode step
(ms) and its ratio to the simulated one. Rows are simulated as `shadowsim validate` does (the file's flags and
client, the default profile). Figures in docs/accuracy.md §3.12 ("B300: the decode step") come from it.
"""
from __future__ import annotations

import argparse
import json
import sys

from shadowsim.commands.validate import read_rows
from simcore.perf.decode_split import split_decode
from simcore.perf.validation import simulate_row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--gpu", help="only the rows of this gpu column value (e.g. b300_sxm)")
    ap.add_argument("--json", help="also write the per-row figures to this file")
    args = ap.parse_args(argv)
    rows = read_rows(args.file)
    out = []
    print("precision tp/ep   isl    C | TPOT meas   sim | decode step sim  batch     kv | pause/step | "
          "implied  ratio")
    for row in rows:
        if args.gpu and row.gpu != args.gpu:
            continue
        steps: list = []
        res = simulate_row(row, observer=steps.append)
        split = split_decode(steps)
        meas = row.measured["tpot"]
        implied = split.implied_decode_step_s(meas * 1e-3) * 1e3 if meas is not None else None
        rec = {"id": row.id, "precision": row.precision, "tp": row.tp, "ep": row.ep, "isl": row.isl,
               "concurrency": row.concurrency, "measured_tpot_ms": meas, "predicted_tpot_ms": res.predicted["tpot"],
               "decode_step_ms": split.decode_step_s * 1e3, "mean_batch": split.mean_batch, "mean_kv": split.mean_kv,
               "pause_per_decode_step_ms": split.pause_per_decode_step_s * 1e3, "implied_decode_step_ms": implied}
        out.append(rec)
        ratio = f"{implied / rec['decode_step_ms']:6.2f}" if implied is not None else "     -"
        print(f"{row.precision or '-':9} {row.tp:>2}/{row.ep:<3} {row.isl:5} {row.concurrency or 0:4} | "
              f"{meas if meas is not None else float('nan'):9.2f} {rec['predicted_tpot_ms']:5.2f} | "
              f"{rec['decode_step_ms']:15.2f} {split.mean_batch:6.1f} {split.mean_kv:6.0f} | "
              f"{rec['pause_per_decode_step_ms']:10.2f} | {implied if implied is not None else float('nan'):7.2f} "
              f"{ratio}", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
