"""Per-rank operator shapes of one forward pass: what each GPU of a TP group multiplies and attends.

SGLang shards a decoder layer Megatron-style over ``tp`` ranks: QKV and gate/up are column-parallel (output
features / tp), O and down are row-parallel (input features / tp) followed by an all-reduce of the hidden
state. KV heads are split across ranks and replicated when tp exceeds their count. MoE experts are
tensor-parallel (each expert's intermediate size / tp) unless expert parallelism is requested.
"""
from __future__ import annotations

from simcore.models.spec import ModelSpec
from simcore.values import FrozenValue


class GemmShape(FrozenValue):
    """One linear layer on one rank: ``n`` output features, ``k`` input features (m = tokens, at call time)."""

    __slots__ = ("name", "n", "k")
    name: str
    n: int
    k: int


class RankShapes(FrozenValue):
    """Everything the step model needs about one rank's share of the model (a `FrozenValue`: built once per
    latency model)."""

    __slots__ = ("num_layers", "num_dense_layers", "num_moe_layers", "hidden", "q_heads", "kv_heads", "head_dim",
                 "attn_gemms", "dense_mlp_gemms", "shared_expert_gemms", "lm_head", "moe_inter", "num_experts",
                 "top_k", "is_mla", "mla_kv_dim", "mla_v_dim", "mla_kv_b", "mla_qk_head_dim", "qk_norm", "tp",
                 "elementwise_bytes_per_token")

    num_layers: int
    num_dense_layers: int  # layers with a dense MLP (all of them for dense models)
    num_moe_layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    attn_gemms: tuple[GemmShape, ...]  # per layer, every layer
    dense_mlp_gemms: tuple[GemmShape, ...]  # per dense layer
    shared_expert_gemms: tuple[GemmShape, ...]  # per MoE layer (DeepSeek shared expert)
    lm_head: GemmShape
    moe_inter: int  # expert intermediate size per rank
    num_experts: int
    top_k: int
    is_mla: bool
    mla_kv_dim: int  # kv_lora_rank + qk_rope_head_dim (MLA only)
    mla_v_dim: int
    # MLA only: kv_b_proj, the latent → per-head (k_nope, v) up-projection the MHA prefill path applies to every
    # cached prefix token it reads (n = q_heads · (qk_nope + v_head), k = kv_lora_rank); None for other models
    mla_kv_b: GemmShape | None
    mla_qk_head_dim: int  # qk_nope + qk_rope (192 for DeepSeek-V3), 0 for other models
    qk_norm: bool
    tp: int
    # elementwise traffic per token per layer (bytes, bf16 activations): norms, residual adds, RoPE,
    # activation function, KV-cache store.
    elementwise_bytes_per_token: int


def rank_shapes(model: ModelSpec, tp: int) -> RankShapes:
    """Split ``model`` over ``tp`` tensor-parallel ranks."""
    h = model.hidden_size
    q_heads = max(1, model.num_heads // tp)
    kv_heads = model.kv_heads_per_rank(tp)
    if model.is_mla:
        qk = model.qk_nope_head_dim + model.qk_rope_head_dim
        attn: list[GemmShape] = []
        if model.q_lora_rank:
            attn += [GemmShape("q_a", model.q_lora_rank, h), GemmShape("q_b", q_heads * qk, model.q_lora_rank)]
        else:
            attn += [GemmShape("q", q_heads * qk, h)]
        # kv_a is replicated on every rank; kv_b is absorbed into attention (weight-absorbed MLA decode),
        # its cost is counted inside the MLA attention estimate.
        attn += [GemmShape("kv_a", model.kv_lora_rank + model.qk_rope_head_dim, h),
                 GemmShape("o", h, q_heads * model.v_head_dim)]
        head_dim, v_dim = qk, model.v_head_dim
        kv_b: GemmShape | None = GemmShape("kv_b", q_heads * (model.qk_nope_head_dim + model.v_head_dim),
                                           model.kv_lora_rank)
    else:
        attn = [GemmShape("qkv", (q_heads + 2 * kv_heads) * model.head_dim, h),
                GemmShape("o", h, q_heads * model.head_dim)]
        head_dim, v_dim = model.head_dim, model.v_head_dim
        kv_b = None
    i_rank = max(1, model.intermediate_size // tp)
    dense = (GemmShape("gate_up", 2 * i_rank, h), GemmShape("down", h, i_rank))
    shared: tuple[GemmShape, ...] = ()
    if model.num_shared_experts and model.shared_expert_intermediate_size:
        si = max(1, model.shared_expert_intermediate_size * model.num_shared_experts // tp)
        shared = (GemmShape("shared_gate_up", 2 * si, h), GemmShape("shared_down", h, si))
    moe_inter = max(1, model.moe_intermediate_size // tp) if model.is_moe else 0
    mlp_width = i_rank if not model.is_moe else max(moe_inter * model.top_k, 1)
    qkv_width = (q_heads + 2 * kv_heads) * head_dim
    # 2 fused add+RMSNorm (read x and residual, write both), activation (read 2·I, write I), RoPE on q/k,
    # KV store, qk-norm where present. ×2 bytes (bf16).
    ew = 2 * (2 * 4 * h + 3 * mlp_width + 2 * qkv_width + 2 * kv_heads * head_dim)
    return RankShapes(
        num_layers=model.num_layers,
        num_dense_layers=model.num_dense_layers if model.is_moe else model.num_layers,
        num_moe_layers=model.num_moe_layers,
        hidden=h, q_heads=q_heads, kv_heads=kv_heads, head_dim=head_dim,
        attn_gemms=tuple(attn), dense_mlp_gemms=dense, shared_expert_gemms=shared,
        lm_head=GemmShape("lm_head", max(1, model.vocab_size // tp), h),
        moe_inter=moe_inter, num_experts=model.num_experts, top_k=model.top_k,
        is_mla=model.is_mla, mla_kv_dim=model.kv_lora_rank + model.qk_rope_head_dim, mla_v_dim=v_dim,
        mla_kv_b=kv_b, mla_qk_head_dim=head_dim if model.is_mla else 0,
        qk_norm=model.architecture.startswith("Qwen3"), tp=tp, elementwise_bytes_per_token=ew,
    )
