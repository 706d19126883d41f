"""Fitting calibration factors: roofline efficiencies from the per-op tables, ratio factors from timings.

Two sources, both documented in docs/accuracy.md:

1. **Per-op tables** (`fit_roofline`): the efficiencies the roofline backend needs (fraction of peak FLOP/s,
   of HBM and NVLink bandwidth, and the smallest kernel times) are measured on the GPUs that have tables,
   so a GPU without tables inherits efficiencies observed on real SGLang kernels rather than guesses.
2. **Timings** (`RatioFit`): a multiplicative factor k minimizing Σ(measured − k·predicted)² is
   Σ(measured·predicted) / Σ(predicted²). Keeping the two sums makes refitting incremental: the live
   shadow adds one observed step at a time (`add`), optionally with exponential forgetting, and reads `k`.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

from simcore.gpus import GpuSpec, load_gpu
from simcore.perf.costs import DEFAULT_ROOFLINE, RooflineCosts
from simcore.perf.profile import FitStat
from simcore.perf.tables import _load_npz


@dataclass
class RatioFit:
    """Incremental least-squares fit of measured ≈ k · predicted (k > 0)."""

    sxy: float = 0.0
    sxx: float = 0.0
    n: int = 0

    def add(self, predicted: float, measured: float, weight: float = 1.0, forget: float = 1.0) -> None:
        """Add one observation. ``forget`` < 1 decays the past (e.g. 0.999 per step) for drifting servers."""
        self.sxy = self.sxy * forget + weight * predicted * measured
        self.sxx = self.sxx * forget + weight * predicted * predicted
        self.n += 1

    @property
    def k(self) -> float:
        return self.sxy / self.sxx if self.sxx > 0 else 1.0

    def stat(self) -> FitStat:
        return FitStat(sxy=self.sxy, sxx=self.sxx, n=self.n)

    @classmethod
    def from_stat(cls, s: FitStat) -> RatioFit:
        return cls(s.sxy, s.sxx, s.n)


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def measure_efficiencies(gpu: GpuSpec) -> dict[str, float]:
    """Roofline efficiencies observed in one GPU's measured tables (keys of DEFAULT_ROOFLINE)."""
    out: dict[str, float] = {}
    g = _load_npz(gpu.name, "gemm")
    if g is not None:
        bf = g["dtype"] == 0
        m, n, k, lat = (g[c][bf].astype(float) for c in ("m", "n", "k", "latency_ms"))
        lat = lat * 1e-3
        big = (m >= 4096) & (n >= 4096) & (k >= 4096)
        out["gemm_compute_eff"] = float(np.median(2 * m[big] * n[big] * k[big] / (lat[big] * gpu.flops("bf16"))))
        stream = (m <= 16) & (n * k >= 2**24)
        out["mem_eff"] = float(np.median(2 * n[stream] * k[stream] / (lat[stream] * gpu.hbm_bytes_per_s)))
        tiny = (m <= 16) & (n * k <= 2**20)
        out["gemm_floor_s"] = float(np.median(lat[tiny]))
    c = _load_npz(gpu.name, "context_attention")
    if c is not None:
        sel = (c["kv_dtype"] == 0) & (c["isl"] >= 4096) & (c["heads"] >= 16)
        b, s, h = (c[x][sel].astype(float) for x in ("batch", "isl", "heads"))
        lat = c["latency_ms"][sel] * 1e-3
        flops = 4.0 * b * h * 128 * s * s / 2
        out["attn_compute_eff"] = float(np.median(flops / (lat * gpu.flops("bf16"))))
    q = _load_npz(gpu.name, "generation_attention")
    if q is not None:
        small = (q["kv_dtype"] == 0) & (q["batch"] <= 4) & (q["step"] <= 63)
        out["attn_floor_s"] = float(np.median(q["latency_ms"][small])) * 1e-3
    mo = _load_npz(gpu.name, "moe")
    if mo is not None:
        sel = (mo["dtype"] == 0) & (mo["ep"] == 1) & (mo["tokens"] >= 4096) & (mo["power_law"] == 0)
        tok, hid, inter, k, tp = (mo[x][sel].astype(float) for x in ("tokens", "hidden", "inter", "topk", "tp"))
        flops = 2.0 * 3.0 * tok * k * hid * inter / tp
        if sel.any():
            out["moe_compute_eff"] = float(np.median(flops / (mo["latency_ms"][sel] * 1e-3 * gpu.flops("bf16"))))
    a = _load_npz(gpu.name, "allreduce")
    if a is not None:
        big = (a["graph"] == 1) & (a["message_elements"] >= 2**25)
        nb = a["message_elements"][big] * 2.0
        ng = a["num_gpus"][big].astype(float)
        wire = 2 * (ng - 1) / ng * nb
        out["comm_eff"] = float(np.median(wire / (a["latency_ms"][big] * 1e-3 * gpu.nvlink_bytes_per_s)))
        small = (a["graph"] == 1) & (a["message_elements"] <= 4096)
        out["comm_floor_s"] = float(np.median(a["latency_ms"][small])) * 1e-3
    return out


def fit_roofline(gpus: list[str]) -> dict[str, float]:
    """Median over ``gpus`` of each measured efficiency; defaults where nothing could be measured."""
    per = [measure_efficiencies(load_gpu(name)) for name in gpus]
    out = dict(DEFAULT_ROOFLINE)
    for key in DEFAULT_ROOFLINE:
        vals = [p[key] for p in per if key in p and math.isfinite(p[key])]
        if vals:
            out[key] = float(f"{_median(vals):.4g}")  # 4 significant digits: stable hashes
    return out


def roofline_gemm_error(gpu_name: str, eff: dict[str, float], dtype_code: int = 0) -> dict[str, float]:
    """How far the roofline with ``eff`` is from a GPU's measured GEMMs: median and P90 |error| in %."""
    gpu = load_gpu(gpu_name)
    roof = RooflineCosts(gpu, eff)
    g = _load_npz(gpu_name, "gemm")
    if g is None:
        return {}
    sel = g["dtype"] == dtype_code
    errs = [abs(roof.gemm_s(float(m), int(n), int(k), "bf16") - lat * 1e-3) / (lat * 1e-3) * 100
            for m, n, k, lat in zip(g["m"][sel], g["n"][sel], g["k"][sel], g["latency_ms"][sel])]
    return {"median_ape": float(np.median(errs)), "p90_ape": float(np.percentile(errs, 90)), "n": len(errs)}


# ---- end-to-end fitting ------------------------------------------------------------------------------------
# Candidate values of the per-row serialized step time (seconds per request row per step). A grid rather than
# a gradient method: each evaluation is a full simulation of every fitting row, the objective is flat near its
# optimum and noisy, and a grid makes the fit reproducible and its sensitivity visible in the report.
PER_REQ_GRID_S = (0.0, 2.5e-6, 5e-6, 7.5e-6, 1e-5, 1.25e-5, 1.5e-5, 1.75e-5, 2e-5, 2.5e-5, 3e-5, 4e-5)


def split_holdout(rows: list, every: int) -> tuple[list, list]:
    """Deterministic split: every ``every``-th row (1-based) is held out; ``every`` ≤ 1 holds out nothing."""
    if every <= 1:
        return list(rows), []
    fit = [r for i, r in enumerate(rows) if (i + 1) % every != 0]
    hold = [r for i, r in enumerate(rows) if (i + 1) % every == 0]
    return fit, hold


def fit_e2e(rows: list, base, *, grid: tuple[float, ...] = PER_REQ_GRID_S, validate_fn=None,
            metric: str = "tpot") -> tuple[object, list[dict]]:
    """Fit ``gpu_per_req_s`` on measurement rows: the grid value with the lowest MAPE of ``metric``.

    TPOT is the target because it isolates the step time; TTFT is dominated by queueing and prefill/decode
    interleaving (the scheduler's job). Returns (profile with the fitted value, one report line per value).
    ``validate_fn(rows, profile=...)`` defaults to simcore.perf.validation.validate (tests pass a fake).
    """
    from simcore.perf.validation import validate

    fn = validate_fn or validate
    report = []
    best = None
    for v in grid:
        prof = base.model_copy(update={"gpu_per_req_s": v})
        s = fn(rows, profile=prof)["summary"]
        m = s[metric]["mape"]
        report.append({"gpu_per_req_s": v, "ttft_mape": s["ttft"]["mape"], "tpot_mape": s["tpot"]["mape"]})
        if m is not None and (best is None or m < best[0] - 1e-9):
            best = (m, v)
    chosen = best[1] if best is not None else base.gpu_per_req_s
    return base.model_copy(update={"gpu_per_req_s": chosen}), report
