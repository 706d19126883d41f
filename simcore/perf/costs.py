"""Per-op costs in seconds, from measured tables where they exist and from a roofline elsewhere.

`OpCosts` answers the five questions the step model asks (GEMM by token count, context attention,
generation attention, all-reduce, fused MoE). `TableCosts` interpolates SGLang-measured tables and falls back
to the roofline for any op its GPU did not measure (an fp8 GEMM on A100, MLA attention, an unmeasured MoE
shape). `RooflineCosts` is max(compute time, memory time) plus a per-kernel floor, with efficiencies that
`simcore.perf.calibrate.fit_roofline` measured on the tabulated GPUs.

All results are seconds per call for one rank; curves are memoized per shape so the hot path is a bisect.
"""
from __future__ import annotations

from simcore.gpus import GpuSpec
from simcore.perf.interp import Curve
from simcore.perf.tables import GpuTables

# Roofline efficiencies used before any fit: typical of Hopper-class GPUs running SGLang kernels.
# They are replaced by the values `shadowsim calibrate --from-tables` measures (data/default_profile.json).
DEFAULT_ROOFLINE: dict[str, float] = {
    "gemm_compute_eff": 0.70,  # fraction of dense tensor-core peak reached by large GEMMs
    "mem_eff": 0.80,  # fraction of HBM bandwidth reached by streaming kernels
    "gemm_floor_s": 6e-6,  # smallest GEMM call (launch + tail)
    "attn_compute_eff": 0.45,  # flash-attention prefill, fraction of peak
    "attn_floor_s": 1.1e-5,
    "moe_compute_eff": 0.35,  # fused-MoE grouped GEMMs at large token counts, fraction of peak
    "comm_eff": 0.60,  # fraction of NVLink bandwidth reached by all-reduce
    "comm_floor_s": 8e-6,
    "kernel_floor_s": 2.5e-6,  # one small elementwise kernel
}

M_GRID = tuple(sorted({2**i for i in range(0, 18)} | {3 * 2**i for i in range(0, 16)}))
LEN_GRID = tuple(sorted({2**i for i in range(0, 19)} | {3 * 2**i for i in range(0, 17)}))

_DT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "int8": 1.0, "int4": 0.53, "nvfp4": 0.5625,
             "mxfp4": 0.53125}


class RooflineCosts:
    """Analytic per-op cost: max(FLOPs / (peak·eff), bytes / (bandwidth·eff)) + floor."""

    def __init__(self, gpu: GpuSpec, eff: dict[str, float]) -> None:
        self.gpu = gpu
        self.eff = eff
        self._gemm: dict[tuple[int, int, str], Curve] = {}

    def p(self, key: str) -> float:
        return self.eff.get(key, DEFAULT_ROOFLINE[key])

    def gemm_s(self, m: float, n: int, k: int, dtype: str) -> float:
        peak = self.gpu.flops("fp8" if dtype in ("fp8", "fp8_block") else "nvfp4" if dtype == "nvfp4" else "bf16")
        flops = 2.0 * m * n * k
        byts = _DT_BYTES.get(dtype, 2.0) * n * k + 2.0 * m * (n + k)
        t = max(flops / (peak * self.p("gemm_compute_eff")), byts / (self.gpu.hbm_bytes_per_s * self.p("mem_eff")))
        return t + self.p("gemm_floor_s")

    def gemm_curve(self, n: int, k: int, dtype: str) -> Curve:
        key = (n, k, dtype)
        c = self._gemm.get(key)
        if c is None:
            c = self._gemm[key] = Curve(M_GRID, [self.gemm_s(m, n, k, dtype) * 1e3 for m in M_GRID])
        return c

    def context_attention_s(self, batch: int, length: float, q_heads: int, kv_heads: int, head_dim: int,
                            kv_bytes: float) -> float:
        flops = 4.0 * batch * q_heads * head_dim * length * length / 2.0  # causal: half the score matrix
        byts = batch * length * head_dim * (2 * q_heads + 2 * kv_heads) * 2.0
        t = max(flops / (self.gpu.flops("bf16") * self.p("attn_compute_eff")),
                byts / (self.gpu.hbm_bytes_per_s * self.p("mem_eff")))
        return t + self.p("attn_floor_s")

    def generation_attention_s(self, batch: int, kv_len: float, q_heads: int, kv_heads: int, head_dim: int,
                               kv_bytes: float) -> float:
        flops = 4.0 * batch * q_heads * head_dim * kv_len
        byts = batch * kv_len * 2 * kv_heads * head_dim * kv_bytes
        t = max(flops / (self.gpu.flops("bf16") * self.p("attn_compute_eff")),
                byts / (self.gpu.hbm_bytes_per_s * self.p("mem_eff")))
        return t + self.p("attn_floor_s")

    def mla_attention_s(self, q_tokens: float, pairs: float, kv_tokens: float, q_heads: int, kv_dim: int,
                        v_dim: int, kv_bytes: float) -> float:
        """Weight-absorbed MLA: scores and values over the latent (kv_dim) for ``pairs`` query-key pairs."""
        flops = 2.0 * q_heads * pairs * (kv_dim + (kv_dim - 64)) + 2.0 * q_tokens * q_heads * 128 * kv_dim * 2
        byts = kv_tokens * kv_dim * kv_bytes + q_tokens * q_heads * (kv_dim + v_dim) * 2.0
        t = max(flops / (self.gpu.flops("bf16") * self.p("attn_compute_eff")),
                byts / (self.gpu.hbm_bytes_per_s * self.p("mem_eff")))
        return t + self.p("attn_floor_s")

    def mla_context_s(self, batch: int, length: float, q_heads: int, kv_dim: int, v_dim: int, kv_bytes: float,
                      q_tokens: float, pairs: float, kv_tokens: float) -> float:
        return self.mla_attention_s(q_tokens, pairs, kv_tokens, q_heads, kv_dim, v_dim, kv_bytes)

    def mla_generation_s(self, batch: int, kv_len: float, q_heads: int, kv_dim: int, v_dim: int,
                         kv_bytes: float) -> float:
        return self.mla_attention_s(batch, batch * kv_len, batch * kv_len, q_heads, kv_dim, v_dim, kv_bytes)

    def mla_absorb_s(self, tokens: float, q_heads: int, kv_dim: int) -> float:
        """Weight-absorbed decode: per-head bmm of q_nope with W_UK and of the output with W_UV (bf16)."""
        flops = 2.0 * 2.0 * tokens * q_heads * 128 * kv_dim
        byts = 2.0 * q_heads * 128 * kv_dim * 2.0
        t = max(flops / (self.gpu.flops("bf16") * self.p("gemm_compute_eff")),
                byts / (self.gpu.hbm_bytes_per_s * self.p("mem_eff")))
        return t + 2 * self.p("gemm_floor_s")

    def allreduce_s(self, message_bytes: float, num_gpus: int, graph: bool) -> float:
        if num_gpus <= 1:
            return 0.0
        wire = 2.0 * (num_gpus - 1) / num_gpus * message_bytes
        return wire / (self.gpu.nvlink_bytes_per_s * self.p("comm_eff")) + self.p("comm_floor_s")

    def moe_s(self, tokens: float, hidden: int, inter: int, top_k: int, experts: int, dtype: str,
              tp: int = 1) -> float:
        """Fused MoE on one rank (experts TP-sharded): expert weights touched + routed FLOPs.

        Experts touched: the expected number of distinct experts hit by ``tokens`` tokens choosing ``top_k``
        each uniformly, E·(1 − (1 − k/E)^tokens)."""
        active = experts * (1.0 - (1.0 - top_k / experts) ** tokens) if experts else 0.0
        byts = active * 3.0 * hidden * inter * _DT_BYTES.get(dtype, 2.0) + tokens * top_k * (hidden * 4.0)
        flops = 2.0 * 3.0 * tokens * top_k * hidden * inter
        peak = self.gpu.flops("fp8" if dtype in ("fp8", "fp8_block") else "nvfp4" if dtype == "nvfp4" else "bf16")
        t = max(flops / (peak * self.p("moe_compute_eff")), byts / (self.gpu.hbm_bytes_per_s * self.p("mem_eff")))
        return t + 4 * self.p("kernel_floor_s")  # routing, two grouped GEMMs, combine

    def elementwise_s(self, byts: float, kernels: int) -> float:
        return byts / (self.gpu.hbm_bytes_per_s * self.p("mem_eff")) + kernels * self.p("kernel_floor_s")


class TableCosts:
    """Measured-table costs with roofline fallback. ``tables`` is one GPU's `GpuTables`."""

    def __init__(self, tables: GpuTables, roof: RooflineCosts) -> None:
        self.tables = tables
        self.roof = roof
        self._gemm: dict[tuple[int, int, str], Curve] = {}
        self._ctx: dict[tuple[int, int, int, str], Curve | None] = {}
        self._gen: dict[tuple[int, int, int, str], Curve | None] = {}
        self._mctx: dict[tuple[int, int, int, str], Curve | None] = {}
        self._mgen: dict[tuple[int, int, int, str], Curve | None] = {}

    def gemm_curve(self, n: int, k: int, dtype: str) -> Curve:
        key = (n, k, dtype)
        c = self._gemm.get(key)
        if c is None:
            t = self.tables.gemm.get(dtype)
            c = t.curve(n, k) if t is not None else self.roof.gemm_curve(n, k, dtype)
            self._gemm[key] = c
        return c

    def _attn_curve(self, cache: dict, tables: dict, batch: int, q_heads: int, kv_heads: int,
                    kv_dtype: str, head_dim: int) -> Curve | None:
        key = (batch, q_heads, kv_heads, kv_dtype)
        if key in cache:
            return cache[key]
        t = tables.get(kv_dtype) or tables.get("bf16")
        c = None
        if t is not None and head_dim == 128:  # tables were measured at head_dim 128 only
            c = t.curve_over_length(batch, q_heads, kv_heads)
        cache[key] = c
        return c

    def context_attention_s(self, batch: int, length: float, q_heads: int, kv_heads: int, head_dim: int,
                            kv_bytes: float) -> float:
        kv_dtype = "fp8" if kv_bytes == 1 else "bf16"
        c = self._attn_curve(self._ctx, self.tables.context_attention, batch, q_heads, kv_heads, kv_dtype, head_dim)
        if c is None:
            return self.roof.context_attention_s(batch, length, q_heads, kv_heads, head_dim, kv_bytes)
        return c(length) * 1e-3

    def generation_attention_s(self, batch: int, kv_len: float, q_heads: int, kv_heads: int, head_dim: int,
                               kv_bytes: float) -> float:
        kv_dtype = "fp8" if kv_bytes == 1 else "bf16"
        c = self._attn_curve(self._gen, self.tables.generation_attention, batch, q_heads, kv_heads, kv_dtype, head_dim)
        if c is None:
            return self.roof.generation_attention_s(batch, kv_len, q_heads, kv_heads, head_dim, kv_bytes)
        return c(kv_len) * 1e-3

    def mla_context_s(self, batch: int, length: float, q_heads: int, kv_dim: int, v_dim: int, kv_bytes: float,
                      q_tokens: float, pairs: float, kv_tokens: float) -> float:
        kv_dtype = "fp8" if kv_bytes == 1 else "bf16"
        c = self._attn_curve(self._mctx, self.tables.context_mla, batch, q_heads, 1, kv_dtype, 128)
        if c is None:
            return self.roof.mla_context_s(batch, length, q_heads, kv_dim, v_dim, kv_bytes, q_tokens, pairs, kv_tokens)
        return c(length) * 1e-3

    def mla_generation_s(self, batch: int, kv_len: float, q_heads: int, kv_dim: int, v_dim: int,
                         kv_bytes: float) -> float:
        kv_dtype = "fp8" if kv_bytes == 1 else "bf16"
        c = self._attn_curve(self._mgen, self.tables.generation_mla, batch, q_heads, 1, kv_dtype, 128)
        if c is None:
            return self.roof.mla_generation_s(batch, kv_len, q_heads, kv_dim, v_dim, kv_bytes)
        return c(kv_len) * 1e-3 + self.roof.mla_absorb_s(batch, q_heads, kv_dim)

    def allreduce_s(self, message_bytes: float, num_gpus: int, graph: bool) -> float:
        if num_gpus <= 1:
            return 0.0
        ar = self.tables.allreduce
        ms = ar.latency_ms(message_bytes, num_gpus, graph) if ar is not None else None
        return self.roof.allreduce_s(message_bytes, num_gpus, graph) if ms is None else ms * 1e-3

    def moe_s(self, tokens: float, hidden: int, inter: int, top_k: int, experts: int, dtype: str,
              tp: int = 1) -> float:
        mt = self.tables.moe
        c = None
        if mt is not None:
            c = mt.curve(dtype=dtype, hidden=hidden, inter=inter * tp, topk=top_k, experts=experts, tp=tp, ep=1)
        if c is None:
            return self.roof.moe_s(tokens, hidden, inter, top_k, experts, dtype)
        return c(tokens) * 1e-3

    def elementwise_s(self, byts: float, kernels: int) -> float:
        return self.roof.elementwise_s(byts, kernels)
