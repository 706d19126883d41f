"""Measure the run-to-run scatter of SGLang's kernels in aiconfigurator's per-op collections (docs/accuracy.md §3.7).

Two figures, per GPU and op table, over the parquet collections in ../shared/data/aiconfigurator:

- **between collections**: the same shape (same kernel source, dtype and dimensions) measured by several SGLang
  collections (0.5.9, 0.5.10, 0.5.14); scatter of log(latency / median of the collections);
- **between neighbours**: within one collection, m and m + 1 tokens of the same GEMM (the same kernel doing one
  more row: the true latencies are within a fraction of a percent), scatter of log(latency ratio) / √2.

"Scatter" is robust: 1.4826 × the median absolute deviation of the log values, read as a coefficient of
variation (for small spreads σ_log ≈ CV). Only shapes of at least 20 µs count (below, launch jitter dominates and
such steps do not make a forward pass).

    .venv/bin/pip install pyarrow   # only this script needs it
    .venv/bin/python validation/kernel_scatter.py
"""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "aiconfigurator" / "aic-core" / "src" / \
    "aiconfigurator_core" / "systems" / "data"
TABLES = {"gemm": ("gemm_dtype", "kernel_source", "m", "n", "k"),
          "context_attention": None, "generation_attention": None}
MIN_LATENCY_MS = 0.02


def _robust_cv(logs: np.ndarray) -> float:
    return float(1.4826 * np.median(np.abs(logs - np.median(logs))))


def _read(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def _key_columns(rows: list[dict]) -> list[str]:
    skip = {"framework", "version", "device", "latency", "power", "energy"}
    return [c for c in rows[0] if c not in skip and not c.startswith("power") and not c.startswith("energy")]


def scatter(gpu: str, table: str) -> dict[str, float] | None:
    versions = sorted(p.parent.name for p in (ROOT / gpu).glob(f"*/sglang/*/{table}_perf.parquet"))
    paths = sorted((ROOT / gpu).glob(f"*/sglang/*/{table}_perf.parquet"))
    if len(paths) < 2:
        return None
    by_key: dict[tuple, list[float]] = defaultdict(list)
    neighbour_logs: list[float] = []
    for path in paths:
        rows = _read(path)
        cols = _key_columns(rows)
        seen: dict[tuple, float] = {}
        for r in rows:
            key = tuple(r[c] for c in cols)
            lat = float(r["latency"])
            if lat >= MIN_LATENCY_MS:
                seen[key] = lat
        for key, lat in seen.items():
            by_key[key].append(lat)
        if table == "gemm":
            im = cols.index("m")
            for key, lat in seen.items():
                nxt = key[:im] + (key[im] + 1,) + key[im + 1:]
                if nxt in seen:
                    neighbour_logs.append(np.log(seen[nxt] / lat) / np.sqrt(2))
    between = [np.log(v / np.median(v)) for v in by_key.values() if len(v) >= 3]
    if not between:
        return None
    logs = np.concatenate(between)
    out = {"collections": len(versions), "shapes": len(between), "between_collections_cv": _robust_cv(logs)}
    if neighbour_logs:
        out["between_neighbours_cv"] = _robust_cv(np.asarray(neighbour_logs))
        out["neighbour_pairs"] = len(neighbour_logs)
    return out


def main() -> int:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        print("kernel_scatter.py needs pyarrow: .venv/bin/pip install pyarrow", file=sys.stderr)
        return 2
    for gpu in ("h100_sxm", "h200_sxm"):
        for table in TABLES:
            s = scatter(gpu, table)
            if s:
                print(gpu, table, {k: round(v, 4) if isinstance(v, float) else v for k, v in s.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
