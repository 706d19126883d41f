"""`ModelSpec`: the architecture facts the performance and memory models need, in one frozen record.

Built from a Hugging Face ``config.json`` by ``simcore.models.loader``. Sizes are counts (layers, heads,
elements); byte sizes come from the methods, which take the precision explicitly.
"""
from __future__ import annotations

from simcore.frozen_model import ConfigDict, FrozenModel

from simcore.errors import UserError

# Bytes per weight element for each serving precision. Block/group-quantized formats carry scales:
# fp8_block has one fp32 scale per 128×128 block; int4 weight-only (AWQ/GPTQ style) one bf16 scale and one
# zero point per 128-element group, hence 0.5 + 4/128 bytes.
WEIGHT_BYTES_PER_ELEM: dict[str, float] = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp8_block": 1.0 + 4.0 / (128 * 128),
    "int8": 1.0,
    "int4": 0.5 + 4.0 / 128,
    "int4_wo": 0.5 + 4.0 / 128,
    # NVFP4 (ModelOpt FP4): 4-bit values with one fp8 (e4m3) scale per 16 elements (+ one fp32 per tensor)
    "nvfp4": 0.5 + 1.0 / 16,
    # MXFP4 (OCP microscaling, gpt-oss's checkpoint format): 4-bit e2m1 values with one e8m0 (1-byte) scale per
    # 32 elements; gpt-oss quantizes only the MoE experts (its quantization_config.modules_to_not_convert keeps
    # self_attn, the router, embed_tokens and lm_head in bf16)
    "mxfp4": 0.5 + 1.0 / 32,
}
# Precisions whose checkpoints keep the attention projections in 16 bits: NVIDIA's ModelOpt FP4 DeepSeek/Kimi
# checkpoints quantize the MLP and expert linears and exclude ``self_attn`` (their hf_quant_config.json).
ATTENTION_16BIT_PRECISIONS = frozenset({"nvfp4", "mxfp4"})

PRECISION_ALIASES: dict[str, str] = {
    "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "auto": "bf16",
    "fp8_e4m3": "fp8", "fp8-e4m3": "fp8", "fp8_per_tensor": "fp8", "fp8-block": "fp8_block",
    "fp8_blockwise": "fp8_block", "w8a8": "int8", "awq": "int4", "gptq": "int4", "w4a16": "int4",
    "int4-wo": "int4", "int4_weight_only": "int4",
    "fp4": "nvfp4", "modelopt_fp4": "nvfp4", "nv_fp4": "nvfp4", "mx_fp4": "mxfp4",
}


def normalize_precision(precision: str) -> str:
    """Canonical precision name (``bf16``, ``fp16``, ``fp8``, ``fp8_block``, ``int8``, ``int4``)."""
    p = precision.strip().lower()
    p = PRECISION_ALIASES.get(p, p)
    if p == "int4_wo":
        p = "int4"
    if p not in WEIGHT_BYTES_PER_ELEM:
        raise UserError(
            "--precision", f"unknown precision {precision!r}",
            f"use one of {', '.join(k for k in WEIGHT_BYTES_PER_ELEM if k != 'int4_wo')}",
        )
    return p


class ModelSpec(FrozenModel):
    """Architecture of one decoder-only LLM.

    Attention: ``num_heads`` query heads of ``head_dim``; ``num_kv_heads`` KV heads; ``v_head_dim`` (differs
    from head_dim only for MLA). MLA models (DeepSeek-V2/V3, Kimi-K2) set ``is_mla`` and the LoRA ranks.
    MLP: dense layers use ``intermediate_size``; MoE layers route each token to ``top_k`` of ``num_experts``
    experts of ``moe_intermediate_size`` plus ``num_shared_experts`` always-on experts. The first
    ``num_dense_layers`` layers of an MoE model are dense (DeepSeek's first_k_dense_replace).
    Sliding-window attention (gpt-oss, Gemma 3): ``num_swa_layers`` of the layers attend to at most the last
    ``sliding_window`` tokens (SGLang passes ``sliding_window_size`` to the attention kernel for them); the rest
    attend to the whole context. DeepSeek Sparse Attention (DeepSeek-V3.2): ``index_head_dim`` is the lightning
    indexer's key width, whose keys SGLang keeps in the KV pool beside the MLA latent (``index_topk`` is the
    number of tokens each query attends to; the attention itself is priced as dense MLA, docs/accuracy.md §4).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    architecture: str = ""
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    intermediate_size: int
    vocab_size: int
    num_experts: int = 0
    top_k: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0
    num_dense_layers: int = 0
    is_mla: bool = False
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    context_length: int = 4096
    dtype: str = "bf16"
    quantization: str | None = None  # precision the checkpoint ships in, when quantized (fp8, fp8_block, …)
    tie_word_embeddings: bool = False
    sliding_window: int = 0  # tokens a sliding-window layer attends to (0: no sliding-window layers)
    num_swa_layers: int = 0  # layers with sliding-window attention; the other layers attend to everything
    index_head_dim: int = 0  # DeepSeek-V3.2 (DSA): the indexer key width per token and layer (0: none)
    index_topk: int = 0  # DeepSeek-V3.2 (DSA): tokens each query attends to after the indexer's selection

    # ---- derived structure -------------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def num_full_attention_layers(self) -> int:
        """Layers that attend to the whole context (all of them unless the model has sliding-window layers)."""
        return self.num_layers - self.num_swa_layers

    @property
    def default_precision(self) -> str:
        """What SGLang serves without ``--quantization``: the checkpoint's quantization or its dtype."""
        return self.quantization or self.dtype

    # ---- parameter counts (elements) ---------------------------------------------------------------------
    def attention_params_per_layer(self) -> int:
        h = self.hidden_size
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank * self.num_heads * qk) if self.q_lora_rank else h * self.num_heads * qk
            kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim)
            kv_b = self.kv_lora_rank * self.num_heads * (self.qk_nope_head_dim + self.v_head_dim)
            o = self.num_heads * self.v_head_dim * h
            return q + kv_a + kv_b + o
        qkv = h * (self.num_heads * self.head_dim + self.num_kv_heads * (self.head_dim + self.v_head_dim))
        o = self.num_heads * self.v_head_dim * h
        return qkv + o

    def dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size  # gate, up, down

    def moe_params_per_layer(self) -> int:
        h = self.hidden_size
        experts = self.num_experts * 3 * h * self.moe_intermediate_size
        shared = 3 * h * self.shared_expert_intermediate_size * self.num_shared_experts
        router = h * self.num_experts
        return experts + shared + router

    def num_params(self) -> int:
        """Total parameter count (elements), all layers, embeddings and LM head included."""
        layers_attn = self.num_layers * (self.attention_params_per_layer() + 2 * self.hidden_size)
        if self.is_moe:
            mlp = self.num_dense_layers * self.dense_mlp_params() + self.num_moe_layers * self.moe_params_per_layer()
        else:
            mlp = self.num_layers * self.dense_mlp_params()
        embed = self.vocab_size * self.hidden_size
        head = 0 if self.tie_word_embeddings else embed
        return layers_attn + mlp + embed + head + self.hidden_size

    def num_active_params(self) -> int:
        """Parameters touched per token (MoE: top_k routed + shared experts)."""
        if not self.is_moe:
            return self.num_params()
        inactive = (self.num_experts - self.top_k) * 3 * self.hidden_size * self.moe_intermediate_size
        return self.num_params() - self.num_moe_layers * inactive

    def weight_bytes(self, precision: str) -> int:
        """Bytes of all weights on all ranks together at ``precision``.

        Quantized formats quantize the linear layers only; embeddings, LM head, norms and the MoE router
        stay in 16 bits, as SGLang's fp8/AWQ loaders do.
        """
        p = normalize_precision(precision)
        per = WEIGHT_BYTES_PER_ELEM[p]
        embed = self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)
        norms = self.num_layers * 2 * self.hidden_size + self.hidden_size
        router = self.num_moe_layers * self.hidden_size * self.num_experts
        attn16 = self.num_layers * self.attention_params_per_layer() if p in ATTENTION_16BIT_PRECISIONS else 0
        linear = self.num_params() - embed - norms - router - attn16
        return int(round(linear * per + (embed + norms + router + attn16) * 2.0))

    # ---- KV cache -----------------------------------------------------------------------------------------
    def kv_heads_per_rank(self, tp: int) -> int:
        """KV heads each attention-TP rank holds; replicated (one per GPU) when tp exceeds the head count."""
        return max(1, self.num_kv_heads // max(1, tp))

    def kv_cell_bytes(self, tp: int, kv_dtype_bytes: int = 2) -> int:
        """KV-cache bytes per token on one rank (SGLang's ``cell_size``, spec §4.3).

        MHA/GQA: kv_heads_per_rank × (head_dim + v_head_dim) × layers × bytes. MLA: the compressed latent
        (kv_lora_rank + qk_rope_head_dim) × layers × bytes, identical on every rank.
        """
        if self.is_mla:
            return (self.kv_lora_rank + self.qk_rope_head_dim) * self.num_layers * kv_dtype_bytes
        return self.kv_heads_per_rank(tp) * (self.head_dim + self.v_head_dim) * self.num_layers * kv_dtype_bytes

    def indexer_cell_bytes(self) -> int:
        """Bytes per token of DeepSeek-V3.2's indexer keys over all layers (0 for other models), beside the KV cell.

        SGLang 0.5.9 ``model_runner_kv_cache_mixin.get_cell_size_per_token``: for an NSA model the cell grows by
        ``index_head_dim + index_head_dim // NSATokenToKVPool.quant_block_size(128) * 4`` elements of
        ``index_k_with_scale_buffer_dtype`` (uint8, 1 byte) per layer: fp8 keys plus one fp32 scale per 128.
        """
        if not self.index_head_dim:
            return 0
        return (self.index_head_dim + self.index_head_dim // 128 * 4) * self.num_layers
