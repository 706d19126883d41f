"""Acceptance: interpolation of the SGLang-measured per-op tables on points it never saw.

For each op class and GPU, every fifth value of one measured axis is removed from the table (GEMM: token
count m; context attention: prompt length; generation attention: KV length), the table is rebuilt from the
rest, and the removed measurements are predicted. Median absolute percentage error must stay ≤ 5%.

The floor is the measurements' own noise: neighbouring GEMM points differ by 3–6% run to run, which is why
the vendored tables are the median of three SGLang collections (see docs/accuracy.md). fp8 GEMMs are noisier
(5.6–8.4% held-out median) and are reported, not asserted.
"""
from __future__ import annotations

import numpy as np
import pytest

from simcore.perf.tables import _load_npz, build_tables


def _held(values: np.ndarray) -> set[int]:
    uniq = np.unique(values)
    held = set(uniq[2::5].tolist())
    held.discard(int(uniq.max()))  # keep the last point: held-out tests interpolation, not extrapolation
    return held


def _median_ape(pred: list[float], meas: np.ndarray) -> float:
    return float(np.median(np.abs(np.asarray(pred) - meas) / meas * 100))


@pytest.mark.parametrize("gpu", ["h100_sxm", "h200_sxm"])
def test_gemm_held_out_median_error_within_5pct(gpu: str) -> None:
    g = _load_npz(gpu, "gemm")
    held = _held(g["m"])
    t = build_tables(gpu, drop={"gemm_m": held})
    sel = (g["dtype"] == 0) & np.isin(g["m"], list(held))
    pred = [t.gemm["bf16"].latency_ms(int(m), int(n), int(k)) for m, n, k in zip(g["m"][sel], g["n"][sel], g["k"][sel])]
    assert sel.sum() > 5000
    assert _median_ape(pred, g["latency_ms"][sel]) <= 5.0


@pytest.mark.parametrize("gpu", ["h100_sxm", "h200_sxm"])
def test_context_attention_held_out_median_error_within_5pct(gpu: str) -> None:
    c = _load_npz(gpu, "context_attention")
    held = _held(c["isl"])
    t = build_tables(gpu, drop={"ctx_isl": held})
    sel = (c["kv_dtype"] == 0) & np.isin(c["isl"], list(held))
    pred = [t.context_attention["bf16"].latency_ms(int(b), float(s), int(h), int(kv))
            for b, s, h, kv in zip(c["batch"][sel], c["isl"][sel], c["heads"][sel], c["kv_heads"][sel])]
    assert sel.sum() > 500
    assert _median_ape(pred, c["latency_ms"][sel]) <= 5.0


@pytest.mark.parametrize("gpu", ["h100_sxm", "h200_sxm"])
def test_generation_attention_held_out_median_error_within_5pct(gpu: str) -> None:
    q = _load_npz(gpu, "generation_attention")
    held = _held(q["step"])
    t = build_tables(gpu, drop={"gen_step": held})
    sel = (q["kv_dtype"] == 0) & np.isin(q["step"], list(held))
    kv_len = q["isl"][sel] + q["step"][sel]
    pred = [t.generation_attention["bf16"].latency_ms(int(b), float(s), int(h), int(kv))
            for b, s, h, kv in zip(q["batch"][sel], kv_len, q["heads"][sel], q["kv_heads"][sel])]
    assert sel.sum() > 500
    assert _median_ape(pred, q["latency_ms"][sel]) <= 5.0


def test_tables_reproduce_the_measured_points() -> None:
    t = build_tables("h100_sxm")
    c = _load_npz("h100_sxm", "context_attention")
    i = int(np.flatnonzero((c["kv_dtype"] == 0) & (c["batch"] == 4) & (c["isl"] == 2048) & (c["heads"] == 32)
                           & (c["kv_heads"] == 4))[0])
    assert t.context_attention["bf16"].latency_ms(4, 2048, 32, 4) == pytest.approx(float(c["latency_ms"][i]), rel=1e-5)
    # GEMMs are denoised by a running median of three token counts: measured points move by the noise only.
    g = _load_npz("h100_sxm", "gemm")
    sel = (g["dtype"] == 0) & (g["n"] == 5120) & (g["k"] == 5120)
    for m, lat in zip(g["m"][sel], g["latency_ms"][sel]):
        assert t.gemm["bf16"].latency_ms(int(m), 5120, 5120) == pytest.approx(float(lat), rel=0.25)
