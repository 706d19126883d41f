"""GPU step latency models (see simcore.perf.base for the interface).

``build_latency_model(model, gpu, tp, precision)`` is the one entry point the rest of shadowsim uses:

>>> from simcore.models import load_model
>>> from simcore.gpus import load_gpu
>>> lm = build_latency_model(load_model("Qwen/Qwen3-32B"), load_gpu("h100"), tp=2, precision="bf16")
>>> lm.step_time(BatchShape(num_decode=16, decode_sum_kv=16 * 2048, cuda_graph_bs=16)).gpu_s  # doctest: +SKIP

Backends: ``table`` interpolates SGLang-measured per-op tables (H100/H200/A100 SXM, B200, L40S);
``roofline`` uses peak FLOP/s and bandwidth with efficiencies measured on the tabulated GPUs; ``auto``
picks ``table`` when the GPU has tables. ``linear`` is `LinearLatencyModel`, for tests.
"""
from __future__ import annotations

from typing import Any

from simcore.errors import UserError
from simcore.gpus import GpuSpec
from simcore.models.spec import ModelSpec, normalize_precision
from simcore.perf.base import BatchShape, LatencyModel, LinearLatencyModel, StepTime
from simcore.perf.costs import RooflineCosts, TableCosts
from simcore.perf.moe_parallel import FP8_MOE_PREFILL_MIN_SM, ParallelCosts, ParallelLayout, op_dtypes
from simcore.perf.profile import CalibrationProfile, default_profile
from simcore.perf.step import StepLatencyModel, serving_precision
from simcore.perf.tables import load_tables, tables_dir_names

BACKENDS = ("auto", "table", "roofline", "linear")

__all__ = [
    "BACKENDS", "BatchShape", "CalibrationProfile", "LatencyModel", "LinearLatencyModel", "ParallelLayout",
    "StepLatencyModel",
    "StepTime", "build_latency_model", "default_profile", "tables_dir_names",
]


def build_latency_model(model: ModelSpec, gpu: GpuSpec, tp: int, precision: str, *, backend: str = "auto",
                        profile: CalibrationProfile | None = None, kv_dtype_bytes: int = 2,
                        kv_cache_dtype: str | None = None,
                        parallel: ParallelLayout | None = None) -> LatencyModel:
    """The step-latency model for ``model`` served at ``precision`` on ``tp`` GPUs of type ``gpu``.

    ``profile`` defaults to the shipped calibration (simcore/perf/data/default_profile.json).
    ``kv_cache_dtype`` (the server's ``--kv-cache-dtype``; ``auto`` = the model dtype), when given, sets the KV
    element size the attention kernels read (fp8 KV: the fp8 attention tables, half the bytes) instead of
    ``kv_dtype_bytes``. ``parallel`` (`ParallelLayout.from_settings`) adds expert parallelism, DeepEP and
    multi-node TP; without it a TP group larger than the GPU's NVLink domain still pays the inter-node all-reduce.
    Raises UserError for an unknown backend or precision, or ``table`` on a GPU without tables.
    """
    if backend not in BACKENDS:
        raise UserError("--latency-backend", f"unknown backend {backend!r}", f"use one of {', '.join(BACKENDS)}")
    if tp < 1:
        raise UserError("--tp", f"tensor parallelism must be ≥ 1, got {tp}")
    prec = normalize_precision(precision)
    if backend == "linear":
        return LinearLatencyModel()
    if kv_cache_dtype is not None:
        from simcore.memory import kv_dtype_bytes as _kv_bytes

        kv_dtype_bytes = 1 if _kv_bytes(kv_cache_dtype, model.dtype) < 1.5 else 2
    prof = profile if profile is not None else default_profile()
    roof = RooflineCosts(gpu, dict(prof.roofline))
    tables = load_tables(gpu.name) if backend in ("auto", "table") else None
    if backend == "table" and tables is None:
        raise UserError("--latency-backend", f"no measured tables for GPU {gpu.name}",
                        f"tables exist for {', '.join(tables_dir_names())}; use --latency-backend roofline")
    costs: Any = TableCosts(tables, roof) if tables is not None else roof
    layout = parallel if parallel is not None else ParallelLayout(tp_size=tp, gpus_per_node=gpu.gpus_per_node)
    if layout.tp_size != tp:
        raise UserError("--tp", f"the parallel layout has tp_size {layout.tp_size}, the model was asked for {tp}")
    # an nvfp4 server whose decode MoE runs autotuned tactics, and a block-fp8 MoE on SM90+ with the profile's
    # prefill factor, need the layout's costs even at plain TP
    fp8_scale = prof.fp8_moe_prefill_scale or 1.0
    fp8_block_moe = (fp8_scale != 1.0 and gpu.sm_version >= FP8_MOE_PREFILL_MIN_SM and model.num_experts
                     and op_dtypes(serving_precision(model, prec), model).moe == "fp8_block")
    if not layout.is_trivial or (layout.fp4_moe_autotuned_tokens and prec == "nvfp4") or fp8_block_moe:
        if layout.is_trivial and not (layout.fp4_moe_autotuned_tokens and prec == "nvfp4"):
            # plain TP wrapped for the fp8 factor only: the tables' default (power-law) routing, as TableCosts
            layout = ParallelLayout(tp_size=layout.tp_size, gpus_per_node=layout.gpus_per_node)
        costs = ParallelCosts(costs, layout, gpu, model, fp4_moe_autotuned_scale=prof.fp4_moe_autotuned_scale or 1.0,
                              fp8_moe_prefill_scale=fp8_scale)
    return StepLatencyModel(model, costs, tp, prec, prof, kv_dtype_bytes=kv_dtype_bytes,
                            backend="table" if tables is not None else "roofline")
