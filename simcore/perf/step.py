"""`StepLatencyModel`: one SGLang forward pass composed from its operators, plus the host-side work.

Per layer and rank: QKV (or MLA projections), attention (context part over extend tokens with their cached
prefix; generation part over decode KV lengths), O projection, all-reduce, MLP (dense gate/up + down, or
fused MoE + shared expert), all-reduce, and the elementwise kernels (fused add+RMSNorm ×2, RoPE, qk-norm,
activation, KV store). Per step: embedding (+ all-reduce), LM head on the rows that need logits, logits
gather, sampling, and a fixed overhead. Decode steps run at the CUDA-graph padded batch size; eager steps
cannot go faster than their kernel launches.

Memoization: a step's cost splits into a part that depends only on the token counts (GEMMs, MoE,
communication, elementwise) — cached by (tokens, logit rows, graph?) — and the attention part, which is a
handful of curve lookups. So a decode step whose Σkv has never been seen before still costs a few µs, and a
repeated shape costs one dict lookup.
"""
from __future__ import annotations

import math

from simcore._sha256 import sha256
from simcore.frozen_new import frozen_new
from simcore.models.spec import ModelSpec
from simcore.perf.base import BatchShape, StepTime
from simcore.perf.costs import RooflineCosts, TableCosts
from simcore.perf.moe_parallel import op_dtypes
from simcore.perf.profile import CalibrationProfile
from simcore.perf.shapes import RankShapes, rank_shapes
from simcore.perf.sliding_window import window_decode_kv, window_extend_sq

# Kernels per layer that are not GEMMs or attention (norms, RoPE, activation, KV store, qk-norm).
_EW_KERNELS = 5
STEP_TIME_FIELDS: tuple[str, ...] = StepTime.__match_args__  # (simcore.frozen_new)
MEMO_LIMIT = 200_000  # entries kept at most by each memo here and in DpAttentionLatency (then cleared)

# SGLang's attention dispatch for MLA models in an extend (prefill or mixed) batch, sglang 0.5.9
# models/deepseek_common/attention_backend_handler.py: on Blackwell (trtllm_mla, the DeepSeek default on SM100,
# server_args._handle_model_specific_adjustments) every extend batch runs MHA_CHUNKED_KV
# (handle_attention_trtllm_mla); on Hopper (fa3) and with flashinfer/flashmla/cutlass_mla the MHA path runs when
# the batch has no cached prefix or at least SGLANG_CHUNKED_PREFIX_CACHE_THRESHOLD = 8192 prefix tokens
# (_handle_attention_backend), the weight-absorbed MLA kernel otherwise. The MHA path reads the prefix's latent
# KV in chunks of get_max_chunk_capacity() = 128k tokens (forward_batch_deepseek_mha_mixin.py) and, per chunk,
# up-projects it with kv_b_proj, assembles k = [k_nope, k_pe], runs attention and merges the partial states
# (forward_mha.py: _chunked_prefix_attn_mha). Decode rows of a mixed batch are extend rows of one token whose
# prefix is their whole KV, so every mixed step decompresses the running batch's entire KV.
MLA_MHA_PREFIX_THRESHOLD_TOKENS = 8192
MLA_PREFIX_CHUNK_TOKENS = 128 * 1024
_MLA_CHUNK_KERNELS = 4  # per prefix chunk: latent gather, k concat, attention, merge_state


def mla_extend_runs_mha(sm_version: int, sum_prefix_tokens: int) -> bool:
    """Whether SGLang runs an MLA extend batch with ``sum_prefix_tokens`` cached prefix tokens on the MHA path."""
    if sm_version >= 100:
        return True
    return sum_prefix_tokens == 0 or sum_prefix_tokens >= MLA_MHA_PREFIX_THRESHOLD_TOKENS


def serving_precision(model: ModelSpec, precision: str) -> str:
    """The weight format SGLang actually runs for a requested ``precision`` on ``model``'s checkpoint.

    A checkpoint quantized to block-scaled fp8 (``quantization_config.weight_block_size``, e.g. DeepSeek-V3/R1,
    Qwen3-*-FP8) is served with its block scales whatever the label says: SGLang builds its fp8 config from the
    checkpoint's ``quantization_config`` (sglang 0.5.9 ``layers/quantization/fp8.py``: ``Fp8Config.from_config``
    reads ``weight_block_size``; ``Fp8LinearMethod.__init__`` / ``Fp8MoEMethod.__init__`` set
    ``block_quant = weight_block_size is not None``). So a measurement labelled ``fp8`` on it runs fp8-block GEMMs
    and the fp8-block fused-MoE kernel, not per-tensor fp8.
    """
    if precision == "fp8" and model.quantization == "fp8_block":
        return "fp8_block"
    return precision


class StepLatencyModel:
    """Implements `simcore.perf.base.LatencyModel` for one (model, GPU, TP, precision)."""

    pure_step_time = True  # a function of the shape alone (simcore.perf.base.has_pure_step_time)

    def __init__(self, model: ModelSpec, costs: TableCosts | RooflineCosts, tp: int, precision: str,
                 profile: CalibrationProfile, *, kv_dtype_bytes: int = 2, backend: str = "table") -> None:
        self.model = model
        self.costs = costs
        self.tp = tp
        precision = serving_precision(model, precision)
        self.precision = precision
        self.profile = profile
        self.frontend_s = profile.frontend_s  # host latency per request outside the loop (CalibrationProfile)
        self.kv_bytes = kv_dtype_bytes
        self.shapes: RankShapes = rank_shapes(model, tp)
        self.backend = backend
        gpu_name = costs.roof.gpu.name if isinstance(costs, TableCosts) else costs.gpu.name
        layout = getattr(costs, "layout", None)  # simcore.perf.moe_parallel.ParallelCosts: EP, multi-node
        ep = f":ep{layout.ep_size}" if layout is not None and layout.ep_size > 1 else ""
        self.name = f"{backend}:{gpu_name}:tp{tp}{ep}:{precision}"
        # The exported hash covers everything behind a prediction: the profile's factors and, for the table
        # backend, the measured tables' bytes.
        digest = getattr(getattr(costs, "tables", None), "digest", "")
        self.profile_hash = (profile.profile_hash if not digest else
                             sha256(f"{profile.profile_hash}:{digest}".encode()).hexdigest()[:12])
        s = profile.op_scale
        self._k_gemm = s.get("gemm", 1.0)
        self._k_ctx = s.get("context_attention", 1.0)
        self._k_gen = s.get("generation_attention", 1.0)
        self._k_comm = s.get("communication", 1.0)
        self._k_moe = s.get("moe", 1.0)
        self._k_ew = s.get("elementwise", 1.0)
        sh = self.shapes
        dts = op_dtypes(precision, model)  # per op class: nvfp4 keeps attention in bf16, fp8 → a checkpoint's fp8_block
        self._gemm_dtype = dts.moe
        self._attn_curves = [costs.gemm_curve(g.n, g.k, dts.attention) for g in sh.attn_gemms]
        self._dense_curves = [costs.gemm_curve(g.n, g.k, dts.mlp) for g in sh.dense_mlp_gemms]
        self._shared_curves = [costs.gemm_curve(g.n, g.k, dts.mlp) for g in sh.shared_expert_gemms]
        # The LM head stays in 16 bits in quantized checkpoints.
        self._lm_curve = costs.gemm_curve(sh.lm_head.n, sh.lm_head.k, "bf16")
        self._kv_b_curve = (costs.gemm_curve(sh.mla_kv_b.n, sh.mla_kv_b.k, dts.attention)
                            if sh.mla_kv_b is not None else None)
        self._sm_version = (costs.roof.gpu if isinstance(costs, TableCosts) else costs.gpu).sm_version
        mla_floor = profile.launch_s_per_mla_layer if self.shapes.is_mla else 0.0
        self._launch_per_layer = mla_floor or profile.launch_s_per_layer  # eager floor per layer
        # The shortest eager step: the host launches of every layer. The CPU launches ~15 kernels per layer, so a
        # short step cannot beat its launches; an MLA + MoE layer dispatches far more host-side ops
        # (profile.launch_s_per_mla_layer, docs/accuracy.md §3.12).
        self.eager_floor_s = self.shapes.num_layers * self._launch_per_layer
        # sliding-window layers (simcore/perf/sliding_window.py): attention over at most `window` tokens
        self._window = model.sliding_window if model.num_swa_layers and not model.is_mla else 0
        self._swa_layers = model.num_swa_layers if self._window else 0
        self._full_layers = self.shapes.num_layers - self._swa_layers
        self._dense_memo: dict[tuple[int, int, bool], float] = {}
        # the two halves of a DP-attention step (attention_side_s, mlp_side_s), token-count parts
        self._attention_dense_memo: dict[tuple[int, bool], float] = {}
        self._mlp_memo: dict[tuple[int, int], float] = {}
        self._memo: dict[tuple, StepTime] = {}  # by the shape's fields (step_time)

    # ---- the token-count-only part ------------------------------------------------------------------------
    def _dense_part(self, m: int, logits: int, graph: bool) -> float:
        """GPU seconds of everything but attention, for ``m`` tokens and ``logits`` LM-head rows."""
        key = (m, logits, graph)
        hit = self._dense_memo.get(key)
        if hit is not None:
            return hit
        sh, c, L = self.shapes, self.costs, self.shapes.num_layers
        gemm_ms = sum([cv(m) for cv in self._attn_curves]) * L
        gemm_ms += sum([cv(m) for cv in self._dense_curves]) * sh.num_dense_layers
        gemm_ms += sum([cv(m) for cv in self._shared_curves]) * sh.num_moe_layers
        gemm_s = gemm_ms * 1e-3
        hidden_bytes = m * sh.hidden * 2.0
        # Two all-reduces per layer (after O and after the MLP) plus one after the vocab-parallel embedding.
        comm_s = (2 * L + 1) * c.allreduce_s(hidden_bytes, self.tp, graph)
        if self.tp > 1 and logits:  # gather the vocab-sharded logits (bf16) onto every rank
            comm_s += c.allreduce_s(logits * self.model.vocab_size * 2.0 / self.tp, self.tp, graph)
        ew_s = self._layer_elementwise_s(m) + self._head_elementwise_s(m, logits)
        moe_s = self._moe_graph_layers_s(m) if graph else self._moe_layers_s(m)
        total = (self._k_gemm * (gemm_s + self._head_s(logits)) + self._k_moe * moe_s
                 + self._k_comm * comm_s + self._k_ew * ew_s)
        if len(self._dense_memo) >= MEMO_LIMIT:  # bounded in a long live run, as the whole-step memo
            self._dense_memo.clear()
        self._dense_memo[key] = total
        return total

    def _layer_elementwise_s(self, m: int) -> float:
        """The per-layer elementwise kernels (norms, RoPE, activation, KV store, qk-norm) over ``m`` tokens, all
        layers, uncalibrated."""
        sh = self.shapes
        return sh.num_layers * self.costs.elementwise_s(m * sh.elementwise_bytes_per_token,
                                                        _EW_KERNELS + (1 if sh.qk_norm else 0))

    def _head_elementwise_s(self, m: int, logits: int) -> float:
        """Sampling (reads the fp32 logits of ``logits`` rows) and the embedding (``m`` rows of the table)."""
        return self.costs.elementwise_s(logits * self.shapes.lm_head.n * 4.0 + m * self.shapes.hidden * 2.0, 3)

    def _head_s(self, logits: int) -> float:
        """The LM head GEMM over ``logits`` rows (seconds, uncalibrated)."""
        return self._lm_curve(max(logits, 1)) * 1e-3 if logits else 0.0

    def _moe_layers_s(self, m: int) -> float:
        """The fused MoE of every MoE layer over ``m`` tokens (the costs' layout), uncalibrated; 0 for a dense model."""
        sh = self.shapes
        if not sh.num_moe_layers:
            return 0.0
        return sh.num_moe_layers * self.costs.moe_s(m, sh.hidden, sh.moe_inter, sh.top_k, sh.num_experts,
                                                    self._gemm_dtype, tp=self.tp)

    def _moe_graph_layers_s(self, m: int) -> float:
        """`_moe_layers_s` for a step replayed from a CUDA graph (decode, speculative verify and draft): costs that
        price graph-replayed MoE calls apart (`simcore.perf.moe_parallel.ParallelCosts.moe_graph_s`: the table's
        time, without the profile's fp8 prefill factor, docs/accuracy.md §3.16) answer it; others as eager."""
        sh = self.shapes
        graph_s = getattr(self.costs, "moe_graph_s", None)
        if not sh.num_moe_layers or graph_s is None:
            return self._moe_layers_s(m)
        return sh.num_moe_layers * graph_s(m, sh.hidden, sh.moe_inter, sh.top_k, sh.num_experts, self._gemm_dtype,
                                           tp=self.tp)

    # ---- attention ------------------------------------------------------------------------------------------
    def _context_attention(self, extend: tuple[int, ...], prefix: tuple[int, ...]) -> float:
        """Extend attention: each request attends over its cached prefix and causally over its new tokens.

        The table measured full causal prefills (no prefix). A request with e new tokens over a prefix p
        computes e·p + e²/2 query-key pairs, the same as a causal prefill of length √(e·(e+2p)); a batch is
        looked up at its request count and the root-mean-square of these equivalent lengths (attention work
        is quadratic in length, so RMS preserves the batch's total work)."""
        sh = self.shapes
        n = len(extend)
        if prefix and any(prefix):
            sq = sum([e * (e + 2.0 * p) for e, p in zip(extend, prefix)])
        else:
            sq = sum([e * e for e in extend])
        s_rms = math.sqrt(sq / n)
        if sh.is_mla:
            kv = sum(extend) + sum(prefix)
            return self.costs.mla_context_s(n, s_rms, sh.q_heads, sh.mla_kv_dim, sh.mla_v_dim, self.kv_bytes,
                                            sum(extend), sq / 2.0, kv)
        return self.costs.context_attention_s(n, s_rms, sh.q_heads, sh.kv_heads, sh.head_dim, self.kv_bytes)

    def _context_attention_layers(self, extend: tuple[int, ...], prefix: tuple[int, ...]) -> float:
        """Extend attention summed over the layers: the full layers as `_context_attention`, the sliding-window
        layers over their windowed query-key pairs (`simcore.perf.sliding_window.window_extend_sq`)."""
        full = self._context_attention(extend, prefix)
        if not self._swa_layers:
            return self.shapes.num_layers * full
        sh = self.shapes
        n = len(extend)
        s_rms = math.sqrt(window_extend_sq(extend, prefix, self._window) / n)
        swa = self.costs.context_attention_s(n, s_rms, sh.q_heads, sh.kv_heads, sh.head_dim, self.kv_bytes)
        return self._full_layers * full + self._swa_layers * swa

    def _generation_attention_layers(self, batch: int, shape: BatchShape) -> float:
        """Decode attention summed over the layers; sliding-window layers read at most `window` KV per row."""
        full = self._generation_attention(batch, shape.decode_sum_kv)
        if not self._swa_layers:
            return self.shapes.num_layers * full
        kv = window_decode_kv(shape.num_decode, shape.decode_sum_kv, shape.decode_kv_lens, self._window)
        return self._full_layers * full + self._swa_layers * self._generation_attention(batch, kv)

    def mla_prefix_s(self, prefix_tokens: int) -> float:
        """Seconds per layer the MLA MHA path spends on ``prefix_tokens`` cached tokens (see the module constants).

        kv_b_proj over every prefix token (GEMM table at m = prefix tokens) plus the HBM traffic of the chunk
        loop: read the latent (kv_lora_rank + rope dims, at the KV dtype), write the bf16 k (qk_nope + qk_rope per
        head) and v (v_head per head), read both back in the attention kernel; 4 kernels per 128k-token chunk.
        The attention FLOPs over the prefix are counted in the context-attention lookup (prefill rows) or are
        negligible (a decode row is one query)."""
        if prefix_tokens <= 0 or self._kv_b_curve is None:
            return 0.0
        sh = self.shapes
        gemm_s = self._k_gemm * self._kv_b_curve(prefix_tokens) * 1e-3
        kv_heads_bytes = sh.q_heads * (sh.mla_qk_head_dim + sh.mla_v_dim) * 2.0
        byts = prefix_tokens * (sh.mla_kv_dim * self.kv_bytes + 2.0 * kv_heads_bytes)
        chunks = -(-prefix_tokens // MLA_PREFIX_CHUNK_TOKENS)
        return gemm_s + self._k_ew * self.costs.elementwise_s(byts, _MLA_CHUNK_KERNELS * chunks)

    def mla_new_tokens_mha_s(self, new_tokens: int) -> float:
        """Seconds per layer the MLA MHA path spends turning ``new_tokens`` freshly computed latents into k and v.

        sglang 0.5.9 ``attention_forward_methods/forward_mha.py`` (``forward_normal_prepare`` /
        ``forward_normal_chunked_kv_prepare``): ``kv = self.kv_b_proj(kv_a)`` over every new token of the batch, then
        ``_concat_and_cast_mha_k`` assembles k = [k_nope, k_pe]. Neither is in the context-MLA table, which times
        the attention kernel alone (aiconfigurator ``collector/sglang/collect_mla.py``: a bare ``RadixAttention``).
        Priced as the kv_b_proj GEMM table at m = new tokens plus one elementwise kernel that reads k_nope (heads ×
        qk_nope) and k_pe (rope dims, shared by the heads) and writes k (heads × qk head dim), all bf16."""
        if new_tokens <= 0 or self._kv_b_curve is None:
            return 0.0
        sh = self.shapes
        rope = sh.mla_kv_dim - sh.mla_kv_b.k
        qk_nope = sh.mla_qk_head_dim - rope
        byts = new_tokens * 2.0 * (sh.q_heads * (qk_nope + sh.mla_qk_head_dim) + rope)
        return (self._k_gemm * self._kv_b_curve(new_tokens) * 1e-3
                + self._k_ew * self.costs.elementwise_s(byts, 1))

    def _generation_attention(self, batch: int, sum_kv: int) -> float:
        sh = self.shapes
        if sh.is_mla:
            return self.costs.mla_generation_s(batch, max(1.0, sum_kv / batch), sh.q_heads, sh.mla_kv_dim,
                                               sh.mla_v_dim, self.kv_bytes)
        # Padded CUDA-graph rows attend over (almost) nothing: the kernel sees `batch` rows and Σkv tokens.
        return self.costs.generation_attention_s(batch, max(1.0, sum_kv / batch), sh.q_heads, sh.kv_heads,
                                                 sh.head_dim, self.kv_bytes)

    # ---- the LatencyModel protocol ----------------------------------------------------------------------------
    def step_time(self, shape: BatchShape) -> StepTime:
        # keyed by the shape's fields, which is what BatchShape's own __eq__/__hash__ compare (a tuple hashes in C;
        # the frozen dataclass's generated __hash__ and __eq__ are interpreted methods)
        key = (shape.extend_lens, shape.prefix_lens, shape.num_decode, shape.decode_sum_kv, shape.decode_kv_lens,
               shape.cuda_graph_bs)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        out = self._compute(shape)
        if len(self._memo) >= MEMO_LIMIT:
            self._memo.clear()
        self._memo[key] = out
        return out

    def _compute(self, shape: BatchShape) -> StepTime:
        n_ext = len(shape.extend_lens)
        n_req = n_ext + shape.num_decode
        ext_tokens = sum(shape.extend_lens)  # BatchShape.num_extend_tokens (an interpreted property)
        prof = self.profile
        # host_s and _dense_part's memo look-up, inlined: this is the hot path of every new step shape
        cpu = prof.cpu_base_s + prof.cpu_per_req_s * n_req + prof.cpu_per_token_s * ext_tokens
        if n_req == 0:
            return frozen_new(StepTime, STEP_TIME_FIELDS, (0.0, cpu))
        graph = shape.cuda_graph_bs is not None and n_ext == 0
        bs = shape.cuda_graph_bs if graph else shape.num_decode
        m = ext_tokens + bs
        logits = n_ext + bs
        dense = self._dense_memo.get((m, logits, graph))
        if dense is None:
            dense = self._dense_part(m, logits, graph)
        gpu = self._add_attention(dense, shape, bs, m)
        return self.finish_step(gpu, cpu, graph, n_ext > 0, n_req)

    def host_s(self, n_req: int, extend_tokens: int) -> float:
        """The scheduler's CPU pass for a batch of ``n_req`` requests with ``extend_tokens`` extend tokens (profile:
        base + per request + per extend token)."""
        prof = self.profile
        return prof.cpu_base_s + prof.cpu_per_req_s * n_req + prof.cpu_per_token_s * extend_tokens

    def _add_attention(self, acc: float, shape: BatchShape, bs: int, m: int) -> float:
        """``acc`` plus the attention kernels of ``shape``'s rows (its extend rows and ``bs`` decode rows, ``m``
        tokens in all), calibrated, added in this order: context attention, the MLA MHA path, decode attention."""
        decode_attention = bs > 0
        if shape.extend_lens:
            acc += self._k_ctx * self._context_attention_layers(shape.extend_lens, shape.prefix_lens)
            if self.shapes.is_mla:
                # decode rows of a mixed batch are extend rows of 1 token over their KV (the new token excluded)
                prefix = sum(shape.prefix_lens) + max(0, shape.decode_sum_kv - shape.num_decode)
                if mla_extend_runs_mha(self._sm_version, prefix):
                    acc += self.shapes.num_layers * (self.mla_prefix_s(prefix) + self.mla_new_tokens_mha_s(m))
                    decode_attention = False  # the decode rows' queries ride the MHA extend kernel
        if decode_attention:
            acc += self._k_gen * self._generation_attention_layers(bs, shape)
        return acc

    def finish_step(self, gpu: float, cpu: float, graph: bool, extend: bool, n_req: int) -> StepTime:
        """A forward's step time from its kernels' ``gpu`` seconds and its host pass ``cpu``: the eager floor (not
        ``graph``), the extend cost (``extend``: the batch has extend rows) and the per-step and per-request
        overheads (``n_req`` requests) added to the GPU time."""
        prof = self.profile
        if not graph and gpu < self.eager_floor_s:
            gpu = self.eager_floor_s
        if extend:  # per-version cost of an extend (eager) forward beyond the tables (profile.extend_s_per_layer)
            gpu += self.shapes.num_layers * prof.extend_s_per_layer
        return frozen_new(StepTime, STEP_TIME_FIELDS, (gpu + (prof.step_overhead_s + prof.gpu_per_req_s * n_req), cpu))

    # ---- the two halves of a step under DP attention (simcore/dp_attention.py) ------------------------------------
    def attention_side_s(self, shape: BatchShape, bs: int, graph: bool) -> float:
        """GPU seconds of one attention-DP rank's own half of a step, at this model's TP (the attention TP group,
        tp / dp): the attention projections, the attention kernels and the elementwise kernels over its own rows
        (``shape``'s extend tokens plus ``bs`` decode rows, padded when ``graph``), and the all-reduce after the
        attention inside the attention TP group. Profile scales applied; no per-step overhead."""
        m = shape.num_extend_tokens + bs
        if m == 0:
            return 0.0
        return self._attention_dense_s(m, graph) + self._add_attention(0.0, shape, bs, m)

    def _attention_dense_s(self, m: int, graph: bool) -> float:
        """The token-count-only part of `attention_side_s` (projections, all-reduce, elementwise), memoized as
        `_dense_part`."""
        key = (m, graph)
        hit = self._attention_dense_memo.get(key)
        if hit is not None:
            return hit
        sh, c, L = self.shapes, self.costs, self.shapes.num_layers
        gemm_s = sum([cv(m) for cv in self._attn_curves]) * L * 1e-3
        comm_s = L * c.allreduce_s(m * sh.hidden * 2.0, self.tp, graph) if self.tp > 1 else 0.0
        total = self._k_gemm * gemm_s + self._k_comm * comm_s + self._k_ew * self._layer_elementwise_s(m)
        if len(self._attention_dense_memo) >= MEMO_LIMIT:  # bounded in a long live run, as the whole-step memo
            self._attention_dense_memo.clear()
        self._attention_dense_memo[key] = total
        return total

    def mlp_side_s(self, tokens: int, logits: int, graph: bool = False) -> float:
        """GPU seconds of the MLP half of a step over ``tokens`` tokens gathered from every attention-DP rank, at
        this model's TP (the whole TP group): dense-MLP and shared-expert GEMMs, the fused MoE (with the costs'
        expert-parallel layout; ``graph``: a step replayed from a CUDA graph prices it as `_moe_graph_layers_s`
        does, without the fp8 prefill factor), the LM head over ``logits`` rows and sampling. Collectives are the
        caller's (simcore/dp_attention.py prices the DP gather/scatter and the logits gather). Profile scales
        applied."""
        if tokens <= 0:
            return 0.0
        key = (tokens, logits, graph)
        hit = self._mlp_memo.get(key)
        if hit is not None:
            return hit
        sh = self.shapes
        gemm_ms = sum([cv(tokens) for cv in self._dense_curves]) * sh.num_dense_layers
        gemm_ms += sum([cv(tokens) for cv in self._shared_curves]) * sh.num_moe_layers
        moe_s = self._moe_graph_layers_s(tokens) if graph else self._moe_layers_s(tokens)
        total = (self._k_gemm * (gemm_ms * 1e-3 + self._head_s(logits)) + self._k_moe * moe_s
                 + self._k_ew * self._head_elementwise_s(tokens, logits))
        if len(self._mlp_memo) >= MEMO_LIMIT:  # bounded in a long live run, as the whole-step memo
            self._mlp_memo.clear()
        self._mlp_memo[key] = total
        return total

    # ---- introspection (benchmarks, docs, the calibrate command) ------------------------------------------------
    def breakdown(self, shape: BatchShape) -> dict[str, float]:
        """Seconds per op class for one step (uncalibrated costs, before profile scales), for reports."""
        sh, c, L = self.shapes, self.costs, self.shapes.num_layers
        graph = shape.cuda_graph_bs is not None and not shape.extend_lens
        bs = shape.cuda_graph_bs if graph else shape.num_decode
        m = shape.num_extend_tokens + bs
        gemm = (sum([cv(m) for cv in self._attn_curves]) * L + sum([cv(m) for cv in self._dense_curves])
                * sh.num_dense_layers) * 1e-3
        out = {
            "gemm": gemm,
            "lm_head": self._lm_curve(max(1, len(shape.extend_lens) + bs)) * 1e-3,
            "communication": (2 * L + 1) * c.allreduce_s(m * sh.hidden * 2.0, self.tp, graph),
            "context_attention": self._context_attention_layers(shape.extend_lens, shape.prefix_lens)
            if shape.extend_lens else 0.0,
            "generation_attention": self._generation_attention_layers(bs, shape) if bs else 0.0,
            "elementwise": L * c.elementwise_s(m * sh.elementwise_bytes_per_token, _EW_KERNELS),
        }
        if sh.num_moe_layers:
            out["moe"] = self._moe_graph_layers_s(m) if graph else self._moe_layers_s(m)
        return out
