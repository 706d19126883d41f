"""Which KV pool did the Qwen3-32B H100 servers run with? Scan ``--mem-fraction-static`` over the KV-bound rows.

The file (../shared/data/validation/sglang_qwen3_32b_h100.csv, docs/accuracy.md §3.2/§3.4) records no launch flags,
so `validate` sizes each pool by SGLang's default rule for the row's version (0.5.1.post1: the table by GPU memory,
``mem_fraction_static`` 0.868 at TP2; 0.5.8.post1: the reserve formula, 0.835 at TP1; simcore.memory). Only rows
whose clients need most of that pool can tell how large the real pool was. They are chosen before any fit, by one
rule: C × (isl + 8 + osl) ≥ 80% of the default pool (every TP1 row, six TP2 rows at 2048 × 128 clients and
4096 × 64 clients; no TP4/TP8 row). The two groups come from different SGLang versions whose default fractions
differ (0.868 vs 0.835), so each group fitted alone is an independent estimate of the fraction the servers ran.

For each fraction on the grid the script prints the pool at TP1 and TP2, TTFT / TPOT MAPE of each group, and of
the calibration split used throughout docs/accuracy.md (every third row of the file held out); then the fraction
that minimises TTFT MAPE on each group alone. Rows that are not KV-bound do not depend on the fraction (checked:
``--check-insensitive`` simulates the TP4/TP8 rows at the default and at the best fraction).

Usage (repo root): python validation/kv_fraction_scan.py [--grid 0.78,0.785,...] [--check-insensitive]
Nothing is written: the shipped default stays SGLang's rule (rows without server_args run the defaults, §3.1).
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILE = HERE.parent.parent / "shared" / "data" / "validation" / "sglang_qwen3_32b_h100.csv"
PROMPT_OVERHEAD = 8  # simcore.perf.validation.PROMPT_OVERHEAD_TOKENS (chat template)
BOUND_SHARE = 0.8    # a row is KV-bound when its clients need >= this share of the default pool


def default_pool(row) -> int:  # type: ignore[no-untyped-def]
    from simcore.gpus import load_gpu
    from simcore.memory import size_kv_pool
    from simcore.models import load_model
    from simcore.settings import ServerSettings, resolve

    gpu = load_gpu(row.gpu)
    s = resolve(ServerSettings(sglang_version=row.sglang_version, tp_size=row.tp), gpu.memory_bytes)
    return size_kv_pool(load_model(row.model), gpu, s, row.precision or "bf16").max_total_num_tokens


def pool_at(row, fraction: float) -> int:  # type: ignore[no-untyped-def]
    from simcore.gpus import load_gpu
    from simcore.memory import size_kv_pool
    from simcore.models import load_model
    from simcore.settings import ServerSettings, resolve

    gpu = load_gpu(row.gpu)
    s = resolve(ServerSettings(sglang_version=row.sglang_version, tp_size=row.tp, mem_fraction_static=fraction),
                gpu.memory_bytes)
    return size_kv_pool(load_model(row.model), gpu, s, row.precision or "bf16").max_total_num_tokens


def mape(rows: list[dict], metric: str) -> float:
    vals = [r[f"{metric}_ape_pct"] for r in rows if r.get(f"{metric}_ape_pct") is not None]
    return sum(vals) / len(vals) if vals else float("nan")


def main(argv: list[str] | None = None) -> int:
    from simcore.perf.validation import Protocol, rows_from_records, validate

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", default=str(FILE))
    ap.add_argument("--grid", default="0.78,0.785,0.79,0.795,0.80,0.805,0.81,0.82,0.84")
    ap.add_argument("--check-insensitive", action="store_true", help="also simulate the TP4/TP8 rows")
    a = ap.parse_args(argv)
    with open(a.file) as f:
        reader = csv.DictReader(f)
        rows = rows_from_records(list(reader), reader.fieldnames or [], a.file)
    index = {r.id: i for i, r in enumerate(rows)}
    held = {r.id for i, r in enumerate(rows) if i % 3 == 2}
    pools = {r.id: default_pool(r) for r in rows}
    bound = [r for r in rows if r.concurrency * (r.isl + PROMPT_OVERHEAD + r.osl) >= BOUND_SHARE * pools[r.id]]
    groups = {
        "TP1 0.5.8 (bound)": lambda d: d["tp"] == 1,
        "TP2 0.5.1 (bound)": lambda d: d["tp"] == 2,
        "bound, fit split": lambda d: d["id"] not in held,
        "bound, held out": lambda d: d["id"] in held,
    }
    print(f"{len(bound)} KV-bound rows of {len(rows)} (C x (isl+{PROMPT_OVERHEAD}+osl) >= {BOUND_SHARE:.0%} of the "
          f"default pool): " + ", ".join(f"#{index[r.id]} tp{r.tp} {r.isl}x{r.osl} c{r.concurrency}" for r in bound))
    tp1 = next(r for r in bound if r.tp == 1)
    tp2 = next(r for r in bound if r.tp == 2)
    grid: list[float | None] = [None] + [float(x) for x in a.grid.split(",")]
    print("fraction | pool TP1 / TP2 tokens | " + " | ".join(f"{g}: TTFT / TPOT MAPE" for g in groups))
    results: dict[float | None, dict[str, float]] = {}
    for fr in grid:
        proto = Protocol(server_args=None if fr is None else f"--mem-fraction-static {fr}")
        out = validate(bound, protocol=proto)
        if out["skipped"]:
            print(f"{fr}: skipped {len(out['skipped'])} rows ({out['skipped'][0]['reason']})")
            continue
        cells, res = [], {}
        for name, sel in groups.items():
            rs = [d for d in out["rows"] if sel(d)]
            res[name] = mape(rs, "ttft")
            cells.append(f"{mape(rs, 'ttft'):6.1f} / {mape(rs, 'tpot'):4.1f}")
        results[fr] = res
        p1 = pools[tp1.id] if fr is None else pool_at(tp1, fr)
        p2 = pools[tp2.id] if fr is None else pool_at(tp2, fr)
        label = "default" if fr is None else f"{fr:.3f}"
        print(f"{label:>8} | {p1:6d} / {p2:6d} | " + " | ".join(cells))
    for name in groups:
        fitted = [(v[name], fr) for fr, v in results.items() if fr is not None]
        if fitted:
            best = min(fitted)
            print(f"best fraction on {name} alone: {best[1]:.3f} (TTFT MAPE {best[0]:.1f}; default "
                  f"{results.get(None, {}).get(name, float('nan')):.1f})")
    if a.check_insensitive:
        rest = [r for r in rows if r not in bound and r.tp >= 4]
        best_fr = min((v["bound, fit split"], fr) for fr, v in results.items() if fr is not None)[1]
        for fr in (None, best_fr):
            out = validate(rest, protocol=Protocol(server_args=None if fr is None else f"--mem-fraction-static {fr}"))
            print(f"TP4/TP8 rows ({len(rest)}) at {fr or 'default'}: TTFT {mape(out['rows'], 'ttft'):.2f} / "
                  f"TPOT {mape(out['rows'], 'tpot'):.2f} MAPE")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
