"""The model and GPU catalogues as plain records (``shadowsim models``, ``shadowsim gpus``, the API).

Every model comes from a public ``config.json`` shipped in ``simcore/models/configs`` (sources in its NOTICE);
every GPU from ``simcore/perf/data/gpus.json``. Units are in the keys.
"""
from __future__ import annotations

from typing import Any


def models() -> list[dict[str, Any]]:
    """One record per catalogued model: id, architecture, parameters (total and active per token), layers,
    attention kind, KV bytes per token (bf16, whole model), context length, shipped precision, sliding-window
    layers and their window."""
    from simcore.models.loader import _canonical, list_models, load_model

    out = []
    for key in list_models():
        m = load_model(key)
        out.append({
            "id": _canonical(key), "architecture": m.architecture,
            "params_billion": round(m.num_params() / 1e9, 2), "active_params_billion": round(m.num_active_params() / 1e9, 2),
            "num_layers": m.num_layers, "hidden_size": m.hidden_size,
            "attention": "MLA" if m.is_mla else ("MHA" if m.num_kv_heads == m.num_heads else "GQA"),
            "num_experts": m.num_experts, "experts_per_token": m.top_k,
            "kv_bytes_per_token": int(m.kv_cell_bytes(1, 2)), "context_length_tokens": m.context_length,
            "precision": m.default_precision,
            # sliding-window layers (gpt-oss, Gemma 3): how many, and how far back they look
            "sliding_window_layers": m.num_swa_layers, "sliding_window_tokens": m.sliding_window,
        })
    return out


def gpus() -> list[dict[str, Any]]:
    """One record per catalogued GPU: name, aliases, memory (GiB), HBM bandwidth (TB/s), interconnect (GB/s per
    direction), dense peak TFLOP/s per dtype, SM version."""
    from simcore.gpus import list_gpus, load_gpu

    out = []
    for name in list_gpus():
        g = load_gpu(name)
        out.append({
            "name": g.name, "aliases": list(g.aliases), "memory_gib": round(g.memory_gib, 1),
            "hbm_tb_per_s": round(g.hbm_bytes_per_s / 1e12, 2),
            "interconnect_gb_per_s": round(g.nvlink_bytes_per_s / 1e9, 1),
            "peak_tflops": {k: round(v / 1e12, 1) for k, v in sorted(g.peak_flops.items())},
            "sm_version": g.sm_version,
        })
    return out
