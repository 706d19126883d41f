"""KV pool sizing: ``mem_fraction_static``, ``max_total_num_tokens`` and ``max_running_requests`` (spec §4).

For shadowing a live server, take ``max_total_num_tokens`` from its startup log, ``/server_info`` or the gauge
``sglang:max_total_num_tokens`` instead (§4.4): small errors here move eviction and retraction noticeably. These
functions are for what-if runs where no server exists.

Assumptions (SGLang measures these at startup; we cannot):

- ``P`` (free memory before weights load) = total GPU memory − ``context_bytes``, the CUDA context, NCCL buffers
  and allocator overhead present at that moment. Default 0.95 GiB, which reproduces §4.4's P ≈ 78.7 GiB on an
  H100-80GB (81,559 MiB reported).
- ``A`` (free memory after weights load) = P − weights per rank − ``load_overhead_bytes`` (cuBLAS workspace,
  allocator slack; default 0.2 GiB, §4.4's A ≈ 63.5 GiB for 15.0 GiB of weights).

Units: bytes for memory, tokens for the pool. ``GiB = 2**30``; ``MiB = 2**20``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from simcore.errors import UserError
from simcore.settings import ServerSettings, VersionFamily, _version_tuple, resolve, version_family
from simcore.values import FrozenValue

if TYPE_CHECKING:  # the catalogues are only needed by size_kv_pool
    from simcore.gpus import GpuSpec
    from simcore.models.spec import ModelSpec

GiB = 1024**3
MiB = 1024**2
DEFAULT_CONTEXT_BYTES = int(0.95 * GiB)
DEFAULT_LOAD_OVERHEAD_BYTES = int(0.2 * GiB)
# SGLang PR #10975 (merged 2025-09-27, first released in 0.5.3) replaced the by-GPU-size table of
# mem_fraction_static with the reserved-memory formula; 0.4.7 (PR #7054) … 0.5.2 still use the table.
FIRST_FORMULA_VERSION = (0, 5, 3)
# Up to 0.4.0.post1 (read: sglang-0.4.0.post1 wheel, srt/server_args.py ServerArgs.__post_init__, "Set mem fraction
# static, which depends on the tensor parallelism size") the default depends on TP alone: 0.79 at TP >= 16, 0.81 at
# >= 8, 0.85 at >= 4, 0.87 at >= 2, else 0.88, whatever the GPU. 0.4.6.post5 already sizes by GPU memory.
LAST_TP_TABLE_VERSION = (0, 4, 0)
# 0.5.23 captures prefill CUDA graphs; §4.1's H100 example has 58 buckets at 8 MiB each.
DEFAULT_PREFILL_GRAPH_BUCKETS = 58
KV_DTYPE_BYTES: dict[str, float] = {"auto": 2, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2,
                                    "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8": 1, "mxfp8": 1 + 1 / 32}


def default_mem_fraction_static(gpu_memory_bytes: int, family: VersionFamily, tp_size: int = 1,
                                chunked_prefill_size: int | None = 8192, cuda_graph_max_bs: int = 256,
                                pp_size: int = 1, max_prefill_tokens: int = 16384,
                                prefill_graph_buckets: int = DEFAULT_PREFILL_GRAPH_BUCKETS, is_mla: bool = False,
                                speculative: bool = False, dp_attention: bool = False,
                                disable_cuda_graph: bool = False, dp_size: int = 1) -> float:
    """SGLang's default ``mem_fraction_static`` (§4.1), rounded to 3 decimals as SGLang does.

    0.5.x: reserved MiB = 512 + 1.5 × activation tokens + TP·PP/8 GiB + the graph reserve, at least 10 GiB on GPUs
    over 60 GiB. The graph reserve is 2 × decode max_bs, plus in 0.5.23 the prefill graphs: 8 MiB per bucket, or
    1.5 GiB *instead* for MLA models; with ``--disable-cuda-graph`` 0.5.23 reserves no graph memory at all
    (0.5.23 arg_groups/memory_hook.py::reserve_for_graph_mb, lines 360-397, called at line 313).
    0.4.x (and 0.5.0–0.5.2, see `mem_fraction_family`): a table by GPU size.
    ``chunked_prefill_size`` None or ≤ 0 means chunking is off (activations sized by ``max_prefill_tokens``).
    """
    mem_mb = gpu_memory_bytes / MiB
    par = tp_size * pp_size
    if family == "0.4":
        if mem_mb < 35 * 1024:
            reserved = (2.8 + par / 10) * 1024
        elif mem_mb < 90 * 1024:
            reserved = (9.5 + par / 2) * 1024
        elif mem_mb < 160 * 1024:
            reserved = (12 + par / 2) * 1024
        else:
            reserved = 32 * 1024
        reserved += (2 * 1024 if speculative else 0) + (4 * 1024 if dp_attention else 0)
    else:
        chunking = chunked_prefill_size is not None and chunked_prefill_size > 0
        act_tokens = max(chunked_prefill_size if chunking else max_prefill_tokens, 2048)  # type: ignore[arg-type]
        reserved = 512 + act_tokens * 1.5 + par / 8 * 1024
        if family != "0.5.23":
            reserved += cuda_graph_max_bs * 2
        elif not disable_cuda_graph:
            reserved += cuda_graph_max_bs * 2 + (1.5 * 1024 if is_mla else prefill_graph_buckets * 8)
        if dp_attention and not (family == "0.5.23" and disable_cuda_graph):
            # "DP attention needs more padding for some operations" (0.5.3/0.5.6/0.5.9 server_args.py
            # _handle_gpu_memory_settings; 0.5.23 memory_hook.py reserve_for_graph_mb), before the 10 GiB floor
            reserved += cuda_graph_max_bs * dp_size * 3 + (cuda_graph_max_bs * dp_size * 1.5
                                                           if cuda_graph_max_bs > 300 else 0)
        if mem_mb > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        if speculative:  # 0.5.9 server_args.py _handle_gpu_memory_settings: "eagle draft models and cuda graphs"
            reserved += 2 * 1024
    return round((mem_mb - reserved) / mem_mb, 3)


def tp_table_mem_fraction(tp_size: int, pp_size: int = 1) -> float:
    """The default ``mem_fraction_static`` of SGLang ≤ 0.4.0.post1: by TP size only (`LAST_TP_TABLE_VERSION`)."""
    for at_least, frac in ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87)):
        if tp_size >= at_least:
            return frac
    return 0.88


def mem_fraction_family(sglang_version: str) -> VersionFamily:
    """The rule set of the default ``mem_fraction_static`` for a version: the 0.4 table up to 0.5.2 (the
    formula arrived in 0.5.3, see ``FIRST_FORMULA_VERSION``), else the version's own family."""
    if _version_tuple(sglang_version) < FIRST_FORMULA_VERSION:
        return "0.4"
    return version_family(sglang_version)


def kv_tokens_from_measured(available_before_load_bytes: float, available_after_load_bytes: float,
                            cell_bytes_per_token: float, mem_fraction_static: float, page_size: int = 1,
                            max_total_tokens: int | None = None) -> int:
    """KV pool size from SGLang's own measurements (§4.2): ``floor((A − P·(1 − f)) / cell)``, floored to pages,
    capped by ``--max-total-tokens``. ``P``/``A`` are the ``avail mem`` of the startup log's "Load weight begin" /
    "Load weight end" lines (SGLang prints GiB). Raises UserError when nothing is left for KV.
    """
    if cell_bytes_per_token <= 0:
        raise UserError("cell_bytes_per_token", f"must be > 0, got {cell_bytes_per_token}")
    rest = available_after_load_bytes - available_before_load_bytes * (1 - mem_fraction_static)
    tokens = int(rest // cell_bytes_per_token) if rest > 0 else 0
    tokens -= tokens % page_size
    if max_total_tokens is not None:
        tokens = min(tokens, max_total_tokens - max_total_tokens % page_size)
    if tokens <= 0:
        raise UserError("mem_fraction_static",
                        f"no memory left for the KV cache ({rest / GiB:.2f} GiB after weights)",
                        "raise --mem-fraction-static, use more TP ranks, a smaller model or a larger GPU")
    return tokens


def max_total_num_tokens(gpu_memory_bytes: int, weight_bytes_per_rank: int, cell_bytes_per_token: float,
                         mem_fraction_static: float, page_size: int = 1, max_total_tokens: int | None = None,
                         context_bytes: int = DEFAULT_CONTEXT_BYTES,
                         load_overhead_bytes: int = DEFAULT_LOAD_OVERHEAD_BYTES) -> int:
    """KV pool size in tokens from the GPU size and the weights, with the P/A assumptions of the module docstring.

    An explicit ``max_total_tokens`` (``--max-total-tokens``) is a cap on the profiled value, as in SGLang.
    """
    p = gpu_memory_bytes - context_bytes
    a = p - weight_bytes_per_rank - load_overhead_bytes
    return kv_tokens_from_measured(p, a, cell_bytes_per_token, mem_fraction_static, page_size, max_total_tokens)


def max_running_requests(max_total_num_tokens: int, context_len: int, given: int | None = None,
                         dp: int = 1, family: VersionFamily = "0.5.23") -> int:
    """Request slots per DP worker (§4.5): the flag (÷ dp) or ``clamp(tokens/context·512, 2048, 4096)``,
    never more than half the pool's tokens.

    0.4.x sized the req→token pool one row larger (``max_num_reqs + 1``) and reported that bound, so a default
    0.4 server logs ``max_running_requests=2049`` (seen in real 0.4.3 startup logs).
    """
    if given is not None:
        return min(max(1, given // dp), max_total_num_tokens // 2)
    estimated = min(max(int(max_total_num_tokens / context_len * 512), 2048), 4096)
    if family == "0.4":
        estimated += 1
    return min(estimated, max_total_num_tokens // 2)


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype: str = "bf16") -> float:
    """Bytes per KV element for ``--kv-cache-dtype`` (``auto`` = the model dtype)."""
    name = model_dtype if kv_cache_dtype == "auto" else kv_cache_dtype
    try:
        return KV_DTYPE_BYTES[name.lower()]
    except KeyError:
        raise UserError("kv_cache_dtype", f"unknown KV cache dtype {kv_cache_dtype!r}",
                        f"use one of {', '.join(sorted(KV_DTYPE_BYTES))}") from None


# Architectures whose KV pool SGLang splits into a full-attention pool and a sliding-window pool (SGLang 0.5.9
# configs/model_config.py:is_hybrid_swa_model). Gemma 3 is not among them: server_args.py
# _handle_model_specific_adjustments sets disable_hybrid_swa_memory for Gemma2/3 ("not yet supported"), so its
# sliding-window layers keep every token in one pool like the global layers.
SGLANG_HYBRID_SWA_ARCHS = frozenset({"Llama4ForConditionalGeneration", "GptOssForCausalLM",
                                     "MiMoV2FlashForCausalLM", "Step3p5ForCausalLM"})


def uses_hybrid_swa_pool(model: "ModelSpec", settings: ServerSettings, sm_version: int) -> bool:
    """Whether SGLang gives ``model``'s sliding-window layers their own, smaller KV pool.

    Off with ``--disable-hybrid-swa-memory``, and for gpt-oss on Blackwell: SGLang picks the ``trtllm_mha``
    attention backend there (server_args.py, GptOssForCausalLM: ``is_sm100_supported()``) and then disables the
    hybrid pool ("TODO: support swa kv indices translation for trtllm_mha attention backend")."""
    if not model.num_swa_layers or model.architecture not in SGLANG_HYBRID_SWA_ARCHS:
        return False
    if settings.disable_hybrid_swa_memory:
        return False
    return not (model.architecture == "GptOssForCausalLM" and sm_version >= 100)


def hybrid_swa_pool_tokens(max_total_num_tokens: int, full_layers: int, swa_layers: int,
                           full_bytes_per_token_layer: float, swa_bytes_per_token_layer: float,
                           swa_full_tokens_ratio: float, page_size: int = 1) -> tuple[int, int]:
    """(full-layer tokens, SWA-layer tokens) of a hybrid pool: SGLang 0.5.9
    ``model_runner_kv_cache_mixin.set_num_tokens_hybrid_swa``.

    The profiled pool (``max_total_num_tokens`` tokens of the whole cell ``F·n_full + S·n_swa``) is re-split so
    that ``swa_tokens = r · full_tokens``: ``full = ⌊max_total·(F·n_full + S·n_swa) / (F·n_full + r·S·n_swa)⌋``,
    ``swa = ⌊full · r⌋``, both page-aligned; the scheduler's ``max_total_num_tokens`` becomes ``full``. With no
    full layer every layer is SWA and the whole pool is SWA tokens."""
    def align(x: int) -> int:
        return x // page_size * page_size

    if full_layers == 0:
        return 0, align(max_total_num_tokens)
    f = full_bytes_per_token_layer * full_layers
    w = swa_bytes_per_token_layer * swa_layers
    full = int(max_total_num_tokens * (f + w) / (f + swa_full_tokens_ratio * w))
    swa = int(full * swa_full_tokens_ratio)
    return align(full), align(swa)


class KVPoolSizing(FrozenValue):
    """The outcome of sizing one server's KV pool (per TP rank; all ranks hold the same token count)."""

    __slots__ = ("mem_fraction_static", "max_total_num_tokens", "max_running_requests", "cell_bytes_per_token",
                 "weight_bytes_per_rank", "context_len", "swa_max_total_num_tokens", "full_cell_bytes",
                 "swa_cell_bytes")
    _defaults = {"swa_max_total_num_tokens": None, "full_cell_bytes": 0.0, "swa_cell_bytes": 0.0}
    mem_fraction_static: float
    max_total_num_tokens: int
    max_running_requests: int
    cell_bytes_per_token: float
    weight_bytes_per_rank: int
    context_len: int
    # hybrid sliding-window pool (uses_hybrid_swa_pool): tokens of the SWA layers' own pool; None without one
    swa_max_total_num_tokens: int | None

    full_cell_bytes: float  # hybrid pool only: bytes per token of the full-attention layers together
    swa_cell_bytes: float  # hybrid pool only: bytes per token of the sliding-window layers together

    @property
    def kv_pool_bytes(self) -> float:
        """Bytes of the KV pool on one rank (a hybrid pool: full-layer and SWA-layer parts at their sizes)."""
        if self.swa_max_total_num_tokens is None:
            return self.max_total_num_tokens * self.cell_bytes_per_token
        return self.max_total_num_tokens * self.full_cell_bytes + self.swa_max_total_num_tokens * self.swa_cell_bytes


def dp_attention_weight_bytes_per_rank(model: "ModelSpec", precision: str, tp: int, attn_tp: int) -> int:
    """Weight bytes on one GPU of a DP-attention server: the attention layers and the token embedding are split
    over the attention TP group (tp / dp) only, so each DP group holds its own copy; everything else (dense MLP,
    experts, shared experts, LM head) is split over the whole TP group.

    SGLang 0.5.9 models/deepseek_v2.py: the attention projections are built with ``attn_tp_size`` /
    ``attn_tp_rank`` (``get_attention_tp_size()``), ``embed_tokens = VocabParallelEmbedding(...,
    use_attn_tp_group=is_dp_attention_enabled())``, ``lm_head = ParallelLMHead(..., use_attn_tp_group=
    enable_dp_lm_head)`` (off by default: the whole TP group)."""
    from simcore.models.spec import ATTENTION_16BIT_PRECISIONS, WEIGHT_BYTES_PER_ELEM, normalize_precision

    p = normalize_precision(precision)
    per = 2.0 if p in ATTENTION_16BIT_PRECISIONS else WEIGHT_BYTES_PER_ELEM[p]
    attention = model.num_layers * model.attention_params_per_layer() * per
    embedding = model.vocab_size * model.hidden_size * 2.0
    rest = model.weight_bytes(precision) - attention - embedding
    return int(rest / tp + (attention + embedding) / attn_tp)


def mem_fraction_static_of(model: "ModelSpec", gpu: "GpuSpec", settings: ServerSettings) -> float:
    """The ``mem_fraction_static`` a server runs with: the flag when given, else SGLang's default for the version
    (the TP table up to `LAST_TP_TABLE_VERSION`, `default_mem_fraction_static` after)."""
    s = resolve(settings, gpu.memory_bytes)
    if s.mem_fraction_static is not None:
        return s.mem_fraction_static
    if _version_tuple(s.sglang_version) <= LAST_TP_TABLE_VERSION:
        return tp_table_mem_fraction(s.tp_size)
    return default_mem_fraction_static(
        gpu.memory_bytes, mem_fraction_family(s.sglang_version), s.tp_size, s.chunked_prefill_size,
        s.cuda_graph_max_bs or 160, pp_size=s.pp_size, max_prefill_tokens=s.max_prefill_tokens, is_mla=model.is_mla,
        disable_cuda_graph=s.disable_cuda_graph, speculative=s.speculative_algorithm is not None,
        dp_attention=s.enable_dp_attention, dp_size=s.dp_size)


def size_kv_pool(model: "ModelSpec", gpu: "GpuSpec", settings: ServerSettings,
                 precision: str | None = None) -> KVPoolSizing:
    """Size the KV pool of ``model`` served on ``gpu`` with ``settings`` (resolved for the GPU first)."""
    s = resolve(settings, gpu.memory_bytes)
    prec = precision or model.default_precision
    dp_att = s.enable_dp_attention  # each of the dp attention ranks holds its own pool (simcore/dp_attention.py)
    attn_tp = s.tp_size // s.dp_attention_ranks
    weights = (dp_attention_weight_bytes_per_rank(model, prec, s.tp_size, attn_tp) if dp_att
               else model.weight_bytes(prec) // s.tp_size) // s.pp_size
    kv_bytes = kv_dtype_bytes(s.kv_cache_dtype, "bf16" if model.dtype in ("auto",) else model.dtype)
    # per-rank cell: the attention-TP split of KV heads; PP splits layers evenly. DeepSeek-V3.2 adds its indexer keys.
    cell = (model.kv_cell_bytes(attn_tp, 1) * kv_bytes + model.indexer_cell_bytes()) / s.pp_size
    frac = mem_fraction_static_of(model, gpu, s)
    tokens = max_total_num_tokens(gpu.memory_bytes, weights, cell, frac, s.page_size, s.max_total_tokens)
    ctx = s.context_length or model.context_length
    reqs = max_running_requests(tokens, ctx, s.max_running_requests, s.dp_attention_ranks, s.family)
    if uses_hybrid_swa_pool(model, s, gpu.sm_version):
        per_layer = cell / (model.num_layers / s.pp_size)  # same KV heads and head dims on both kinds of layer
        full_layers, swa_layers = model.num_full_attention_layers / s.pp_size, model.num_swa_layers / s.pp_size
        full, swa = hybrid_swa_pool_tokens(tokens, full_layers, swa_layers, per_layer, per_layer,
                                           s.swa_full_tokens_ratio, s.page_size)
        return KVPoolSizing(frac, full, reqs, cell, weights, ctx, swa, per_layer * full_layers,
                            per_layer * swa_layers)
    return KVPoolSizing(frac, tokens, reqs, cell, weights, ctx)
