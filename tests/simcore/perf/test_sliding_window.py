"""Sliding-window attention (gpt-oss, Gemma 3): the layer split read from config.json, the windowed attention
work of the step model, and SGLang's hybrid SWA KV pool — every number below derived by hand from SGLang 0.5.9.
"""
from __future__ import annotations

import math

import pytest

from simcore.gpus import load_gpu
from simcore.memory import hybrid_swa_pool_tokens, size_kv_pool, uses_hybrid_swa_pool
from simcore.models import load_model
from simcore.perf import BatchShape, build_latency_model
from simcore.perf.sliding_window import window_decode_kv, window_extend_sq, window_pairs
from simcore.settings import ServerSettings


# ---- the layer split ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("hf_id,layers,swa,window", [
    # gpt-oss: layer_types alternates sliding_attention / full_attention (config.json; SGLang 0.5.9
    # configs/model_config.py get_hybrid_layer_ids reads layer_types for GptOssForCausalLM)
    ("openai/gpt-oss-20b", 24, 12, 128),
    ("openai/gpt-oss-120b", 36, 18, 128),
    # Gemma 3: layer i is global when (i + 1) % 6 == 0 (transformers Gemma3TextConfig, sliding_window_pattern 6):
    # 26 layers -> 4 global, 34 -> 5, 48 -> 8, 62 -> 10; the 1B model's window is 512, the others' 1024
    ("google/gemma-3-1b-it", 26, 22, 512),
    ("google/gemma-3-4b-it", 34, 29, 1024),
    ("google/gemma-3-12b-it", 48, 40, 1024),
    ("google/gemma-3-27b-it", 62, 52, 1024),
])
def test_sliding_window_layers_from_config(hf_id: str, layers: int, swa: int, window: int) -> None:
    m = load_model(hf_id)
    assert (m.num_layers, m.num_swa_layers, m.sliding_window) == (layers, swa, window)
    assert m.num_full_attention_layers == layers - swa


def test_models_without_sliding_layers_have_none() -> None:
    # Mistral-7B-Instruct-v0.3 has sliding_window null; Qwen3 sets use_sliding_window false and no layer_types
    for hf_id in ("mistralai/Mistral-7B-Instruct-v0.3", "Qwen/Qwen3-32B", "meta-llama/Llama-3.1-8B-Instruct"):
        m = load_model(hf_id)
        assert (m.num_swa_layers, m.sliding_window) == (0, 0), hf_id


def test_gemma3_text_config_defaults_fill_what_the_vlm_config_leaves_out() -> None:
    # gemma-3-4b-it's text_config names no head counts: Gemma3TextConfig's 8 query heads, 4 KV heads of 256,
    # vocabulary 262,208 and a tied LM head apply
    m = load_model("google/gemma-3-4b-it")
    assert (m.num_heads, m.num_kv_heads, m.head_dim, m.vocab_size, m.tie_word_embeddings) == (8, 4, 256, 262208, True)
    # the KV cell: 4 KV heads x (256 + 256) x 34 layers x 2 bytes
    assert m.kv_cell_bytes(1) == 4 * 512 * 34 * 2 == 139264


# ---- the windowed attention work ----------------------------------------------------------------------------
def test_window_pairs_by_hand() -> None:
    # a 4096-token prompt, window 128: the first 128 queries see 1..128 keys (128²/2 pairs in the continuous
    # form), the other 3968 see 128 each
    assert window_pairs(4096, 0, 128) == 128 * 128 / 2 + (4096 - 128) * 128 == 516096
    assert window_pairs(10, 1000, 128) == 10 * 128  # the whole chunk lies past the window
    assert window_pairs(100, 0, 128) == 100 * 100 / 2  # shorter than the window: a full causal prefill
    assert window_pairs(100, 20, 128) == 100 * 20 + 100 * 100 / 2  # still inside the window
    # a window larger than everything is full attention: e·p + e²/2
    assert window_pairs(3000, 5000, 1 << 20) == 3000 * 5000 + 3000 * 3000 / 2
    # Σ 2·pairs over requests (the step model's Σ e(e + 2p) for full layers)
    assert window_extend_sq((4096, 10), (0, 1000), 128) == 2 * (516096 + 1280)


def test_window_decode_kv_by_hand() -> None:
    assert window_decode_kv(2, 3050, (50, 3000), 128) == 50 + 128
    assert window_decode_kv(4, 4 * 2000, (), 128) == 4 * 128  # from the sum: every row is past the window
    assert window_decode_kv(4, 200, (), 128) == 200  # every row inside the window


def test_decode_step_prices_sliding_layers_over_the_window() -> None:
    """gpt-oss-120b on one H200 (roofline): 18 full layers read the whole KV, 18 sliding layers 128 tokens a row.

    Per rank 64 query heads, 8 KV heads of 64, bf16 KV: a decode row over kv tokens reads kv·2·8·64·2 bytes
    and does 4·64·64·kv FLOPs (simcore/perf/costs.py RooflineCosts.generation_attention_s)."""
    model = load_model("openai/gpt-oss-120b")
    gpu = load_gpu("h200_sxm")
    lm = build_latency_model(model, gpu, 1, "mxfp4", backend="roofline")
    roof = lm.costs
    batch, kv = 8, 32768

    def layer_s(kv_len: int) -> float:
        flops = 4.0 * batch * 64 * 64 * kv_len
        byts = batch * kv_len * 2 * 8 * 64 * 2
        return max(flops / (gpu.flops("bf16") * roof.p("attn_compute_eff")),
                   byts / (gpu.hbm_bytes_per_s * roof.p("mem_eff"))) + roof.p("attn_floor_s")

    shape = BatchShape(num_decode=batch, decode_sum_kv=batch * kv, decode_kv_lens=(kv,) * batch)
    got = lm.breakdown(shape)["generation_attention"]
    assert got == pytest.approx(18 * layer_s(kv) + 18 * layer_s(128), rel=1e-12)
    # about half the attention of pricing all 36 layers over the whole context (a little over: each windowed
    # layer still pays its kernel floor)
    assert 0.5 < got / (36 * layer_s(kv)) < 0.55


def test_prefill_step_prices_sliding_layers_over_their_pairs() -> None:
    """A 8192-token prompt: full layers at the causal length 8192, sliding layers at the equivalent length
    √(2·pairs) = √(128² + 2·8064·128) = √2080768 (Gemma 3 1B: window 512 → √(512² + 2·7680·512))."""
    for hf_id, window in (("openai/gpt-oss-20b", 128), ("google/gemma-3-1b-it", 512)):
        model = load_model(hf_id)
        gpu = load_gpu("h100_sxm")
        lm = build_latency_model(model, gpu, 1, model.default_precision, backend="roofline")
        sh = lm.shapes
        full = lm.costs.context_attention_s(1, 8192.0, sh.q_heads, sh.kv_heads, sh.head_dim, 2)
        eq = math.sqrt(window * window + 2 * (8192 - window) * window)
        swa = lm.costs.context_attention_s(1, eq, sh.q_heads, sh.kv_heads, sh.head_dim, 2)
        got = lm.breakdown(BatchShape(extend_lens=(8192,), prefix_lens=(0,)))["context_attention"]
        expect = model.num_full_attention_layers * full + model.num_swa_layers * swa
        assert got == pytest.approx(expect, rel=1e-12), hf_id
        # a windowed layer costs a fraction of a full one (its pairs: (1442/8192)² ≈ 3% for gpt-oss, (2850/8192)²
        # ≈ 12% for Gemma 3 1B; its bytes, linear in length, 18% and 35%)
        assert got < (model.num_full_attention_layers + 0.4 * model.num_swa_layers) * full


# ---- SGLang's hybrid SWA KV pool ----------------------------------------------------------------------------
def test_hybrid_swa_pool_tokens_by_hand() -> None:
    # SGLang 0.5.9 model_runner_kv_cache_mixin.set_num_tokens_hybrid_swa, gpt-oss-120b's 18 + 18 layers of
    # 8 KV heads x (64 + 64) x 2 bytes = 2048 bytes, ratio 0.8: full = ⌊10⁶ · 2 / 1.8⌋, swa = ⌊full · 0.8⌋
    assert hybrid_swa_pool_tokens(1_000_000, 18, 18, 2048, 2048, 0.8) == (1_111_111, 888_888)
    # page-aligned after the split (page 64): 1,111,111 → 1,111,104; 888,888 → 888,832
    assert hybrid_swa_pool_tokens(1_000_000, 18, 18, 2048, 2048, 0.8, 64) == (1_111_104, 888_832)
    # ratio 1.0: the SWA layers keep as many tokens as the full ones, the pool is unchanged
    assert hybrid_swa_pool_tokens(1_000_000, 18, 18, 2048, 2048, 1.0) == (1_000_000, 1_000_000)
    # no full layer: the whole pool is SWA tokens
    assert hybrid_swa_pool_tokens(1_000_000, 0, 24, 2048, 2048, 0.8) == (0, 1_000_000)


def test_gpt_oss_pool_on_hopper_is_split_and_larger() -> None:
    model = load_model("openai/gpt-oss-120b")
    h200 = load_gpu("h200_sxm")
    one_pool = size_kv_pool(model, h200, ServerSettings(disable_hybrid_swa_memory=True))
    hybrid = size_kv_pool(model, h200, ServerSettings())
    assert one_pool.swa_max_total_num_tokens is None
    t = one_pool.max_total_num_tokens
    assert hybrid.max_total_num_tokens == int(t * 36 / (18 + 0.8 * 18))
    assert hybrid.swa_max_total_num_tokens == int(hybrid.max_total_num_tokens * 0.8)
    # the same bytes, re-split: full tokens x 18 layers + swa tokens x 18 layers = t x 36 layers (to rounding)
    assert hybrid.kv_pool_bytes == pytest.approx(t * one_pool.cell_bytes_per_token, rel=1e-5)
    ratio = ServerSettings(swa_full_tokens_ratio=0.5)
    half = size_kv_pool(model, h200, ratio)
    assert half.max_total_num_tokens == int(t * 36 / (18 + 0.5 * 18))


def test_no_hybrid_pool_for_gemma3_or_gpt_oss_on_blackwell() -> None:
    # server_args.py _handle_model_specific_adjustments: Gemma 2/3 "Disable hybrid SWA memory ... not yet
    # supported"; GptOssForCausalLM on SM100 picks trtllm_mha, which disables it
    gemma = load_model("google/gemma-3-27b-it")
    gpt = load_model("openai/gpt-oss-120b")
    s = ServerSettings()
    assert not uses_hybrid_swa_pool(gemma, s, 90)
    assert uses_hybrid_swa_pool(gpt, s, 90)
    assert not uses_hybrid_swa_pool(gpt, s, 100)
    assert size_kv_pool(gpt, load_gpu("b200_sxm"), s).swa_max_total_num_tokens is None


def test_swa_flags_parse_like_sglang() -> None:
    from simcore.server_flags import parse_server_args

    got = parse_server_args("--swa-full-tokens-ratio 0.5 --disable-hybrid-swa-memory")
    assert got["swa_full_tokens_ratio"] == 0.5 and got["disable_hybrid_swa_memory"] is True


# ---- weights and cells of the other new architectures -------------------------------------------------------
def test_gpt_oss_mxfp4_weights_by_hand() -> None:
    # modules_to_not_convert keeps self_attn, router, embeddings and LM head in bf16; only the experts are MXFP4
    # (4-bit values, one e8m0 byte per 32): 36 layers x 128 experts x 3 x 2880 x 2880 elements x (0.5 + 1/32)
    m = load_model("openai/gpt-oss-120b")
    experts = 36 * 128 * 3 * 2880 * 2880
    rest = m.num_params() - experts
    assert m.weight_bytes("mxfp4") == round(experts * (0.5 + 1 / 32) + rest * 2.0)
    assert m.default_precision == "mxfp4"


def test_deepseek_v32_cell_adds_the_indexer_keys() -> None:
    # SGLang 0.5.9 get_cell_size_per_token for an NSA model: (512 + 64) x 61 layers x kv bytes, plus
    # (index_head_dim 128 + 128 // 128 x 4) x 61 bytes of fp8 indexer keys with their fp32 scales
    v32 = load_model("deepseek-ai/DeepSeek-V3.2")
    assert v32.index_topk == 2048
    assert v32.indexer_cell_bytes() == 132 * 61 == 8052
    sizing = size_kv_pool(v32, load_gpu("h200_sxm"), ServerSettings(tp_size=8, kv_cache_dtype="bf16"))
    assert sizing.cell_bytes_per_token == 576 * 61 * 2 + 8052 == 78324
    assert load_model("deepseek-ai/DeepSeek-V3.1").indexer_cell_bytes() == 0


def test_glm45_experts_and_dense_layers() -> None:
    # GLM-4.5: 3 dense layers then 89 MoE layers of 160 routed experts (top 8) + 1 shared, all 1536 wide
    m = load_model("zai-org/GLM-4.5")
    assert (m.num_dense_layers, m.num_moe_layers, m.num_experts, m.top_k) == (3, 89, 160, 8)
    assert (m.num_shared_experts, m.shared_expert_intermediate_size, m.moe_intermediate_size) == (1, 1536, 1536)
    air = load_model("zai-org/GLM-4.5-Air")
    assert (air.num_dense_layers, air.num_moe_layers, air.num_experts) == (1, 45, 128)
    # published totals: 355B and 106B parameters (the model cards; ours leave out the MTP layer)
    assert m.num_params() / 1e9 == pytest.approx(355, rel=0.02)
    assert air.num_params() / 1e9 == pytest.approx(106, rel=0.02)
