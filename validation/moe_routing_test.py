"""Test of the input-dependent-routing hypothesis for the B300 nvfp4 decode steps (docs/accuracy.md §3.12, issue 14).

The MoE tables measured two routing distributions (aiconfigurator ``collector/sglang/collect_moe.py``):
``balanced`` (token t's i-th expert is ``(t + 32 i) mod 256``) and ``power_law`` with exponent 1.01 (per-expert token
counts drawn from a power law, scaled to tokens × top-k routes, the busiest EP rank's experts swapped onto the
measured rank 0). shadowsim prices every EP row with ``power_law`` (`simcore.perf.moe_parallel`). This script, with
nothing fitted:

1. ``--generators``: distinct experts and routes on the measured (busiest) rank per distribution, from the
   collector's generators re-implemented here (numpy, seeded, mean of ``--draws``), against uniform routing
   (E/ep · (1 − (1 − k/E)^T)); the expert weight bytes a decode step then reads per rank (58 MoE layers, nvfp4 =
   4.5 bits a weight with its fp8 block scales); and the measured table latency of each distribution on B200/B300.
2. per row of FILE (``--gpu``, ``--isl``): the simulated decode step (`simcore.perf.decode_split`) and its fused-MoE
   part (the step model's own `_moe_layers_s` at the padded CUDA-graph batch, × the profile's MoE scale), the
   implied measured decode step, the MoE time the implied step leaves (implied − the non-MoE part), and the token
   count T_eff whose measured power-law entry costs that (the measured curve inverted; "<1": less than one token's
   routing); the same decode shapes priced with ``balanced``; with ``--rerun-balanced`` also the whole row
   re-simulated with ``balanced`` (its TPOT).

    python -m validation.moe_routing_test --generators
    python -m validation.moe_routing_test validation/sglang_deepseek_inferencex.csv --gpu b300_sxm --isl 1024
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

import numpy as np

EXPERTS, TOP_K = 256, 8
HIDDEN, MOE_INTER, MOE_LAYERS = 7168, 2048, 58  # DeepSeek-V3/R1
NVFP4_BYTES_PER_WEIGHT = 0.5 + 1.0 / 16  # 4-bit weights + one fp8 scale per 16 (ModelOpt NVFP4)
ALPHA = 1.01  # the tables' power_law_1.01


def power_law_busiest_rank(tokens: int, ep: int, rng: np.random.Generator) -> np.ndarray:
    """Per-expert routes on the busiest EP rank under the collector's power-law generator (``power_law_logits_v3``:
    inverse-CDF samples on [1, 0.8 T] when T·k > E, else [0.01, 2], scaled and rounded to T·k routes, the rounding
    remainder added to the largest / taken from the smallest, the busiest rank's expert group measured)."""
    lo, hi = (1.0, tokens * 0.8) if tokens * TOP_K > EXPERTS else (0.01, 2.0)
    u = rng.random(EXPERTS)
    w = ((hi ** (1 - ALPHA) - lo ** (1 - ALPHA)) * u + lo ** (1 - ALPHA)) ** (1 / (1 - ALPHA))
    target = tokens * TOP_K
    counts = np.round(w / w.sum() * target).astype(np.int64)
    delta = int(target - counts.sum())
    order = np.argsort(-counts, kind="stable")
    for i in range(abs(delta)):
        if delta > 0:
            counts[order[i % EXPERTS]] += 1
        else:
            j = order[-(i % EXPERTS) - 1]
            counts[j if counts[j] > 0 else int(np.argmax(counts))] -= 1
    groups = counts.reshape(ep, EXPERTS // ep)
    return groups[int(np.argmax(groups.sum(axis=1)))]


def balanced_rank0(tokens: int, ep: int) -> np.ndarray:
    """Per-expert routes on rank 0 under the collector's ``balanced_logits``."""
    stride = math.ceil(EXPERTS / TOP_K)
    hit = np.zeros(EXPERTS, dtype=np.int64)
    for t in range(tokens):
        for i in range(TOP_K):
            e = (t + i * stride) % EXPERTS if tokens >= stride else int((t * stride / tokens + i * stride) % EXPERTS)
            hit[e] += 1
    return hit.reshape(ep, EXPERTS // ep)[0]


def expert_bytes_per_step(distinct: float, moe_tp: int = 1) -> float:
    """nvfp4 expert weight bytes one rank reads in a decode step that touches ``distinct`` of its experts."""
    return distinct * 3 * HIDDEN * (MOE_INTER / moe_tp) * NVFP4_BYTES_PER_WEIGHT * MOE_LAYERS


def generator_table(draws: int, seed: int) -> list[dict[str, Any]]:
    from simcore.perf.tables import load_tables

    rng = np.random.default_rng(seed)
    curves = {}
    for gpu in ("b200_sxm", "b300_sxm"):
        mt = load_tables(gpu).moe
        for ep in (4, 8):
            for pl in (True, False):
                curves[gpu, ep, pl] = mt.curve(dtype="nvfp4", hidden=HIDDEN, inter=MOE_INTER, topk=TOP_K,
                                               experts=EXPERTS, tp=1, ep=ep, power_law=pl)
    out = []
    for ep in (4, 8):
        for t in (1, 2, 4, 8, 16, 32, 64, 128, 256):
            pl = [power_law_busiest_rank(t, ep, rng) for _ in range(draws)]
            bal = balanced_rank0(t, ep)
            rec = {"ep": ep, "tokens": t,
                   "power_law_distinct": float(np.mean([(c > 0).sum() for c in pl])),
                   "power_law_routes": float(np.mean([c.sum() for c in pl])),
                   "balanced_distinct": int((bal > 0).sum()), "balanced_routes": int(bal.sum()),
                   "uniform_distinct": EXPERTS / ep * (1 - (1 - TOP_K / EXPERTS) ** t),
                   "uniform_routes": t * TOP_K / ep}
            for gpu in ("b200_sxm", "b300_sxm"):
                g = gpu[:4]
                rec[f"{g}_power_law_ms"] = float(curves[gpu, ep, True](t))
                rec[f"{g}_balanced_ms"] = float(curves[gpu, ep, False](t))
            out.append(rec)
    return out


def print_generators(recs: list[dict[str, Any]]) -> None:
    print("ep     T | distinct experts on the measured rank: power-law balanced uniform | routes: power-law balanced"
          " | GB a decode step reads (58 layers): power-law balanced uniform | table ms a layer B200 pl / bal, "
          "B300 pl / bal | B300 TB/s pl / bal")
    for r in recs:
        gb = [expert_bytes_per_step(r[k]) / 1e9
              for k in ("power_law_distinct", "balanced_distinct", "uniform_distinct")]
        bw = [expert_bytes_per_step(r[k]) / MOE_LAYERS / (r[f"b300_{m}_ms"] * 1e-3) / 1e12
              for k, m in (("power_law_distinct", "power_law"), ("balanced_distinct", "balanced"))]
        print(f"{r['ep']:2} {r['tokens']:5} | {r['power_law_distinct']:9.1f} {r['balanced_distinct']:8d} "
              f"{r['uniform_distinct']:7.1f} | {r['power_law_routes']:9.1f} {r['balanced_routes']:8d} | "
              f"{gb[0]:9.1f} {gb[1]:8.1f} {gb[2]:7.1f} | {r['b200_power_law_ms']:.4f} / {r['b200_balanced_ms']:.4f}, "
              f"{r['b300_power_law_ms']:.4f} / {r['b300_balanced_ms']:.4f} | {bw[0]:4.2f} / {bw[1]:4.2f}")


def _latency_models(row: Any) -> tuple[Any, Any, Any]:
    """(power-law model, balanced model, the row's settings), built as `simulate_row` builds them."""
    from simcore.gpus import load_gpu
    from simcore.models import load_model
    from simcore.perf import ParallelLayout, build_latency_model
    from simcore.perf.profile import default_profile
    from simcore.settings import ServerSettings, resolve

    model, gpu = load_model(row.model), load_gpu(row.gpu)
    flags = dict(row.server_settings)
    flags.setdefault("ep_size", row.ep)
    settings = resolve(ServerSettings(sglang_version=row.sglang_version, tp_size=row.tp, **flags), gpu.memory_bytes)
    profile = default_profile().for_version(settings.sglang_version)
    precision = row.precision or model.default_precision
    out = []
    for routing in ("power_law", "balanced"):
        out.append(build_latency_model(model, gpu, row.tp, precision, profile=profile,
                                       kv_cache_dtype=settings.kv_cache_dtype,
                                       parallel=ParallelLayout.from_settings(settings, gpu, routing=routing)))
    return out[0], out[1], settings


def _t_eff(curve: Any, per_layer_ms: float) -> float | None:
    """The token count whose measured entry costs ``per_layer_ms`` (the monotone envelope of the curve between 1 and
    512 tokens inverted on a fine grid); None below one token's cost."""
    grid = np.exp(np.linspace(0.0, math.log(512.0), 400))
    vals = np.maximum.accumulate(np.array([curve(float(t)) for t in grid]))
    if per_layer_ms < vals[0]:
        return None
    i = int(np.searchsorted(vals, per_layer_ms))
    return float(grid[min(i, len(grid) - 1)])


def row_figures(row: Any, rerun_balanced: bool) -> dict[str, Any]:
    from simcore.perf.decode_split import split_decode
    from simcore.perf.tables import load_tables
    from simcore.perf.validation import simulate_row

    steps: list[Any] = []
    res = simulate_row(row, observer=steps.append)
    split = split_decode(steps)
    pl_model, bal_model, _ = _latency_models(row)
    decode = [s for s in steps if s.shape.mode == "decode"]
    sim_s = [s.end_s - s.start_s for s in decode]
    priced = [pl_model.step_time(s.shape).gpu_s for s in decode]
    check = max(abs(a - b) / a for a, b in zip(sim_s, priced))  # the rebuilt model is the simulated one
    tokens = [s.shape.cuda_graph_bs or s.shape.num_decode for s in decode]
    moe_s = float(np.mean([pl_model._k_moe * pl_model._moe_layers_s(m) for m in tokens]))  # noqa: SLF001
    bal_step = float(np.mean([bal_model.step_time(s.shape).gpu_s for s in decode]))
    meas = row.measured["tpot"] * 1e-3
    implied = split.implied_decode_step_s(meas)
    needed_moe = implied - (split.decode_step_s - moe_s)
    rec: dict[str, Any] = {
        "id": row.id, "precision": row.precision, "tp": row.tp, "ep": row.ep, "isl": row.isl, "osl": row.osl,
        "concurrency": row.concurrency, "mean_batch": split.mean_batch, "mean_graph_tokens": float(np.mean(tokens)),
        "measured_tpot_ms": meas * 1e3, "predicted_tpot_ms": res.predicted["tpot"],
        "decode_step_ms": split.decode_step_s * 1e3, "moe_ms": moe_s * 1e3, "implied_step_ms": implied * 1e3,
        "needed_moe_ms": needed_moe * 1e3, "balanced_step_ms": bal_step * 1e3, "rebuilt_model_max_rel_diff": check,
    }
    if row.precision == "nvfp4" and row.ep > 1:
        curve = load_tables(row.gpu).moe.curve(dtype="nvfp4", hidden=HIDDEN, inter=MOE_INTER, topk=TOP_K,
                                               experts=EXPERTS, tp=row.tp // row.ep, ep=row.ep, power_law=True)
        per_layer = needed_moe / MOE_LAYERS / pl_model._k_moe * 1e3  # noqa: SLF001
        rec["t_eff"] = _t_eff(curve, per_layer) if needed_moe > 0 else None
    if rerun_balanced:
        rec["balanced_predicted_tpot_ms"] = simulate_row(row, moe_routing="balanced").predicted["tpot"]
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", nargs="?")
    ap.add_argument("--gpu")
    ap.add_argument("--isl", type=int)
    ap.add_argument("--precision")
    ap.add_argument("--generators", action="store_true")
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rerun-balanced", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    dump: dict[str, Any] = {}
    if args.generators:
        dump["generators"] = generator_table(args.draws, args.seed)
        print_generators(dump["generators"])
    if args.file:
        from shadowsim.commands.validate import read_rows

        print("prec  tp/ep  isl    C batch | TPOT meas   sim | decode step sim  moe | implied | MoE left  T_eff | "
              "balanced step" + (" | balanced TPOT" if args.rerun_balanced else ""))
        dump["rows"] = []
        for row in read_rows(args.file):
            if (args.gpu and row.gpu != args.gpu) or (args.isl and row.isl != args.isl) or \
                    (args.precision and row.precision != args.precision):
                continue
            r = row_figures(row, args.rerun_balanced)
            dump["rows"].append(r)
            te = r.get("t_eff")
            te_text = "-" if "t_eff" not in r else ("<1" if te is None else f"{te:.1f}")
            print(f"{r['precision']:5} {r['tp']:2}/{r['ep']:<2} {r['isl']:5} {r['concurrency']:4}"
                  f" {r['mean_batch']:5.1f} |"
                  f" {r['measured_tpot_ms']:9.2f} {r['predicted_tpot_ms']:5.2f} | {r['decode_step_ms']:15.2f}"
                  f" {r['moe_ms']:5.2f} | {r['implied_step_ms']:7.2f} | {r['needed_moe_ms']:8.2f} {te_text:>6} |"
                  f" {r['balanced_step_ms']:13.2f}" + (f" | {r['balanced_predicted_tpot_ms']:13.2f}"
                                                       if args.rerun_balanced else ""), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dump, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
