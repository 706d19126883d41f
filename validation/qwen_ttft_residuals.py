"""Signed TTFT residuals of the Qwen3-32B H100 rows by prefill wave (docs/accuracy.md §3.4, issue 9).

  shadowsim validate ../shared/data/validation/sglang_qwen3_32b_h100.csv --json > v.json
  python validation/qwen_ttft_residuals.py v.json

Every row of the file is a closed loop of C identical clients, so the simulated server prefills all C prompts of a
round as one wave and the simulated TTFT does not depend on the output length. This script averages the three
output lengths of each (TP, isl, C) and prints, per wave, how many 8192-token chunks it fills
(C × (isl + 8) / 8192, rounded up), the simulated TTFT, the measured TTFT at osl 128/256/512 and the signed error
of the simulated TTFT against their mean; then the signed mean / MAPE of TTFT by TP, isl, osl and C, the TP2-8 and
whole-file MAPE and the fit (rows 1, 2, 4, 5, ...) / held-out (every third row) split of docs/accuracy.md §3.2.
Reads only the JSON that ``validate --json`` writes; simulates nothing.
"""
from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from statistics import mean
from typing import Any

CHUNK_TOKENS = 8192  # SGLang's default --chunked-prefill-size on an 80 GB GPU
TEMPLATE_TOKENS = 8  # the chat template around one user turn (validate --prompt-overhead-tokens)


def signed_pct(row: dict[str, Any], metric: str = "ttft") -> float:
    """Simulated minus measured, in percent of measured."""
    return (row[f"predicted_{metric}_ms"] / row[f"measured_{metric}_ms"] - 1.0) * 100.0


def waves(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (tp, isl, concurrency): chunks, simulated TTFT (mean over its rows), measured TTFT by osl,
    and the signed error of the simulated TTFT against the mean measured one."""
    groups: dict[tuple[int, int, int], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["tp"], r["isl"], r["concurrency"])].append(r)
    out = []
    for (tp, isl, c), rs in sorted(groups.items()):
        rs.sort(key=lambda r: r["osl"])
        measured = mean(r["measured_ttft_ms"] for r in rs)
        simulated = mean(r["predicted_ttft_ms"] for r in rs)
        out.append({"tp": tp, "isl": isl, "concurrency": c,
                    "chunks": math.ceil(c * (isl + TEMPLATE_TOKENS) / CHUNK_TOKENS),
                    "simulated_ms": simulated, "measured_ms": {r["osl"]: r["measured_ttft_ms"] for r in rs},
                    "signed_pct": (simulated / measured - 1.0) * 100.0})
    return out


def by_column(rows: list[dict[str, Any]], column: str) -> dict[Any, tuple[float, float, int]]:
    """Signed mean and MAPE of TTFT per value of ``column``, with the row count."""
    groups: dict[Any, list[float]] = defaultdict(list)
    for r in rows:
        groups[r[column]].append(signed_pct(r))
    return {k: (mean(v), mean(abs(x) for x in v), len(v)) for k, v in sorted(groups.items())}


def mape(rows: list[dict[str, Any]], metric: str) -> float:
    return mean(abs(signed_pct(r, metric)) for r in rows)


def large_waves_by_osl(rows: list[dict[str, Any]], min_chunks: int = 33) -> dict[int, dict[str, float]]:
    """The TP4/TP8 rows whose wave fills at least ``min_chunks`` chunks, per output length: signed mean TTFT, TPOT
    and e2e error (percent), and the mean of simulated − measured TTFT next to measured − simulated decode span
    (TPOT × (osl − 1)), in ms. Every chunk of such a row is priced the same at every osl, so a chunk-cost error moves
    all three output lengths alike; time that moves from TTFT into the decode span leaves e2e where it is."""
    out: dict[int, dict[str, float]] = {}
    big = [r for r in rows if r["tp"] in (4, 8)
           and math.ceil(r["concurrency"] * (r["isl"] + TEMPLATE_TOKENS) / CHUNK_TOKENS) >= min_chunks]
    for osl in sorted({r["osl"] for r in big}):
        rs = [r for r in big if r["osl"] == osl]
        out[osl] = {"n": len(rs),
                    "ttft_pct": mean(signed_pct(r, "ttft") for r in rs),
                    "tpot_pct": mean(signed_pct(r, "tpot") for r in rs),
                    "e2e_pct": mean((r["predicted_e2e_ms"] / r["measured_e2e_ms"] - 1.0) * 100.0 for r in rs),
                    "ttft_excess_ms": mean(r["predicted_ttft_ms"] - r["measured_ttft_ms"] for r in rs),
                    "decode_deficit_ms": mean((r["measured_tpot_ms"] - r["predicted_tpot_ms"]) * (osl - 1)
                                              for r in rs)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("validate_json", help="output of `shadowsim validate ... --json`")
    args = ap.parse_args(argv)
    with open(args.validate_json) as fh:
        rows = json.load(fh)["rows"]
    multi = [r for r in rows if r["tp"] > 1]
    print("tp  isl     C chunks | simulated | measured osl 128 / 256 / 512 | signed vs their mean")
    for w in waves(multi):
        m = " / ".join(f"{w['measured_ms'][o]:.0f}" for o in sorted(w["measured_ms"]))
        print(f"{w['tp']:<3} {w['isl']:<5} {w['concurrency']:>4} {w['chunks']:>6} | {w['simulated_ms']:9.0f} | {m:>28} |"
              f" {w['signed_pct']:+6.1f}%")
    for column in ("tp", "isl", "osl", "concurrency"):
        cells = ", ".join(f"{k}: {s:+.1f} / {a:.1f} ({n})" for k, (s, a, n) in by_column(multi, column).items())
        print(f"TP2-8 TTFT signed mean / MAPE by {column}: {cells}")
    for osl, g in large_waves_by_osl(multi).items():
        print(f"TP4/TP8 waves >= 33 chunks, osl {osl} ({g['n']:.0f} rows): signed TTFT {g['ttft_pct']:+.1f}% / "
              f"TPOT {g['tpot_pct']:+.1f}% / e2e {g['e2e_pct']:+.1f}%; simulated - measured TTFT "
              f"{g['ttft_excess_ms']:+.0f} ms, measured - simulated decode span {g['decode_deficit_ms']:+.0f} ms")
    fit = [r for i, r in enumerate(rows) if i % 3 != 2]
    held = [r for i, r in enumerate(rows) if i % 3 == 2]
    print(f"TP2-8 ({len(multi)} rows): TTFT {mape(multi, 'ttft'):.2f} / TPOT {mape(multi, 'tpot'):.2f}")
    print(f"all ({len(rows)} rows): TTFT {mape(rows, 'ttft'):.2f} / TPOT {mape(rows, 'tpot'):.2f}; "
          f"fit ({len(fit)}) {mape(fit, 'ttft'):.2f} / {mape(fit, 'tpot'):.2f}; "
          f"held out ({len(held)}) {mape(held, 'ttft'):.2f} / {mape(held, 'tpot'):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
