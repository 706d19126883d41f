"""Pricing terms from SGLang's code paths: the checkpoint's fp8 format, and MLA attention inside extend batches.

Each expected number is derived by hand in the test from the formula the docstring states and SGLang's source
(sglang 0.5.9, cited per test); only GEMM latencies come from the measured tables.
"""
from __future__ import annotations

import math

import pytest

from simcore.gpus import load_gpu
from simcore.models import load_model
from simcore.perf import BatchShape, CalibrationProfile, StepLatencyModel, build_latency_model
from simcore.perf.step import (MLA_MHA_PREFIX_THRESHOLD_TOKENS, MLA_PREFIX_CHUNK_TOKENS, mla_extend_runs_mha,
                               serving_precision)

DSV3 = load_model("deepseek-ai/DeepSeek-V3")
NEUTRAL = CalibrationProfile()


def _model(gpu: str, precision: str = "fp8_block", tp: int = 8) -> StepLatencyModel:
    lm = build_latency_model(DSV3, load_gpu(gpu), tp, precision, profile=NEUTRAL)
    assert isinstance(lm, StepLatencyModel)
    return lm


def test_fp8_label_on_a_block_quantized_checkpoint_runs_block_fp8() -> None:
    # layers/quantization/fp8.py: Fp8Config.from_config reads weight_block_size from the checkpoint;
    # Fp8LinearMethod / Fp8MoEMethod: block_quant = weight_block_size is not None.
    assert DSV3.quantization == "fp8_block"
    assert serving_precision(DSV3, "fp8") == "fp8_block"
    qwen = load_model("Qwen/Qwen3-32B")  # bf16 checkpoint: --quantization fp8 quantizes per tensor online
    assert serving_precision(qwen, "fp8") == "fp8"
    assert serving_precision(DSV3, "bf16") == "bf16"
    labelled, block = _model("b200", "fp8"), _model("b200", "fp8_block")
    assert labelled.precision == "fp8_block"
    for shape in (BatchShape(extend_lens=(8200,), prefix_lens=(0,)),
                  BatchShape(num_decode=64, decode_sum_kv=64 * 2000, cuda_graph_bs=64)):
        assert labelled.step_time(shape) == block.step_time(shape)


def test_which_mla_path_an_extend_batch_takes() -> None:
    # attention_backend_handler.py: handle_attention_trtllm_mla (SM100 default for DeepSeek) always MHA in
    # extend; _handle_attention_backend (fa3 on Hopper): MHA when Σprefix == 0 or >= 8192, absorbed MLA otherwise
    assert MLA_MHA_PREFIX_THRESHOLD_TOKENS == 8192 and MLA_PREFIX_CHUNK_TOKENS == 131072
    assert mla_extend_runs_mha(100, 0) and mla_extend_runs_mha(100, 100) and mla_extend_runs_mha(100, 10**6)
    assert mla_extend_runs_mha(90, 0)
    assert not mla_extend_runs_mha(90, 1) and not mla_extend_runs_mha(90, 8191)
    assert mla_extend_runs_mha(90, 8192)


def test_prefix_decompression_cost_by_hand() -> None:
    lm = _model("h200")
    sh = lm.shapes
    # TP8: 128 heads / 8 = 16 per rank; kv_b_proj n = 16 · (128 + 128) = 4096, k = kv_lora_rank 512
    assert (sh.q_heads, sh.mla_kv_b.n, sh.mla_kv_b.k) == (16, 4096, 512)
    assert (sh.mla_kv_dim, sh.mla_qk_head_dim, sh.mla_v_dim) == (576, 192, 128)
    prefix = 200_000
    # bytes per prefix token: latent 576 × 2 B (bf16 KV) + write and read back bf16 k (16 × 192) and v (16 × 128)
    per_token = 576 * 2 + 2 * (16 * (192 + 128) * 2)
    assert per_token == 21_632
    gpu = load_gpu("h200")
    mem_eff, floor = 0.80, 2.5e-6  # neutral profile: DEFAULT_ROOFLINE
    chunks = 2  # ceil(200000 / 131072)
    traffic_s = prefix * per_token / (gpu.hbm_bytes_per_s * mem_eff) + 4 * chunks * floor
    assert traffic_s == pytest.approx(1.1467e-3, rel=1e-3)  # 4.3264 GB at 3.84 TB/s, + 20 µs
    gemm_s = lm._kv_b_curve(prefix) * 1e-3
    # the measured fp8-block GEMM at m = 200k: 2·m·n·k = 0.839 TFLOP, between 0.3 and 1.5 ms on an H200
    assert 0.3e-3 < gemm_s < 1.5e-3
    assert lm.mla_prefix_s(prefix) == pytest.approx(gemm_s + traffic_s, rel=1e-9)
    assert lm.mla_prefix_s(0) == 0.0


def test_new_tokens_on_the_mha_path_pay_kv_b_proj_by_hand() -> None:
    # forward_mha.py forward_normal_prepare: kv = self.kv_b_proj(kv_a) over the batch's new tokens, then
    # _concat_and_cast_mha_k builds k = [k_nope, k_pe]; the context-MLA table times the attention kernel alone.
    lm = _model("b200")
    sh = lm.shapes
    new = 8192
    # bytes per new token: read k_nope 16 heads × 128, read k_pe 64 (shared), write k 16 × 192; bf16
    per_token = 2 * (16 * (128 + 192) + 64)
    assert per_token == 10_368
    gpu = load_gpu("b200")
    traffic_s = new * per_token / (gpu.hbm_bytes_per_s * 0.80) + 2.5e-6  # neutral roofline, one kernel
    assert traffic_s == pytest.approx(16.29e-6, rel=1e-3)  # 84.9 MB at 6.16 TB/s + 2.5 µs
    gemm_s = lm._kv_b_curve(new) * 1e-3
    # measured fp8-block GEMM, m = 8192, n = 4096, k = 512: 2·m·n·k = 34.4 GFLOP, 7.6 µs at the 4.5 PFLOPS peak
    assert 7.6e-6 < gemm_s < 100e-6
    assert lm.mla_new_tokens_mha_s(new) == pytest.approx(gemm_s + traffic_s, rel=1e-9)
    assert lm.mla_new_tokens_mha_s(0) == 0.0
    # an 8192-token prefill on Blackwell (MHA path) pays it once per layer on top of everything else
    L = sh.num_layers
    shape = BatchShape(extend_lens=(new,), prefix_lens=(0,))
    expected = lm._dense_part(new, 1, False) + L * lm._context_attention((new,), (0,)) + L * lm.mla_new_tokens_mha_s(new)
    assert lm.step_time(shape).gpu_s == pytest.approx(max(expected, L * lm._launch_per_layer) + NEUTRAL.step_overhead_s
                                                      + NEUTRAL.gpu_per_req_s, rel=1e-9)
    # dense models have no kv_b_proj
    assert _qwen_b200().mla_new_tokens_mha_s(new) == 0.0


def _qwen_b200() -> StepLatencyModel:
    lm = build_latency_model(load_model("Qwen/Qwen3-32B"), load_gpu("b200"), 2, "bf16", profile=NEUTRAL)
    assert isinstance(lm, StepLatencyModel)
    return lm


def test_mixed_batch_on_blackwell_decompresses_the_running_batch_kv() -> None:
    lm = _model("b200")
    L = lm.shapes.num_layers
    prefill = BatchShape(extend_lens=(2064,), prefix_lens=(0,))
    decode_kv = 62 * 1500
    mixed = BatchShape(extend_lens=(2064,), prefix_lens=(0,), num_decode=62, decode_sum_kv=decode_kv)
    # same tokens in the GEMMs as the mixed batch, no decode rows: a 2126-token prefill
    same_tokens = lm._dense_part(2064 + 62, 1 + 62, False)
    ctx = L * lm._context_attention((2064,), (0,))
    # decode rows are 1-token extends whose prefix is their KV without the new token: 62 · 1500 − 62
    # plus kv_b_proj + k assembly over every new token of the batch: 2064 prefill + 62 decode rows
    expected = same_tokens + ctx + L * (lm.mla_prefix_s(decode_kv - 62) + lm.mla_new_tokens_mha_s(2064 + 62))
    assert lm.step_time(mixed).gpu_s == pytest.approx(expected, rel=1e-9)
    # and no generation-attention kernel for the decode rows
    with_gen = expected + L * lm._generation_attention(62, decode_kv)
    assert lm.step_time(mixed).gpu_s < with_gen
    # the term is what a mixed step adds over the prefill alone, beyond the 62 extra GEMM rows
    assert lm.step_time(mixed).gpu_s - lm.step_time(prefill).gpu_s > L * lm.mla_prefix_s(decode_kv - 62)


def test_mixed_batch_on_hopper_below_the_threshold_stays_absorbed() -> None:
    lm = _model("h200")
    L = lm.shapes.num_layers
    small = BatchShape(extend_lens=(1024,), prefix_lens=(0,), num_decode=3, decode_sum_kv=3 * 1500)  # Σprefix 4497
    expected = (lm._dense_part(1024 + 3, 1 + 3, False) + L * lm._context_attention((1024,), (0,))
                + L * lm._generation_attention(3, 3 * 1500))
    assert lm.step_time(small).gpu_s == pytest.approx(expected, rel=1e-9)
    big = BatchShape(extend_lens=(1024,), prefix_lens=(0,), num_decode=8, decode_sum_kv=8 * 1500)  # Σprefix 11992
    expected_big = (lm._dense_part(1024 + 8, 1 + 8, False) + L * lm._context_attention((1024,), (0,))
                    + L * (lm.mla_prefix_s(8 * 1500 - 8) + lm.mla_new_tokens_mha_s(1024 + 8)))
    assert lm.step_time(big).gpu_s == pytest.approx(expected_big, rel=1e-9)


def test_dense_models_are_unchanged_by_the_mla_term() -> None:
    qwen = build_latency_model(load_model("Qwen/Qwen3-32B"), load_gpu("h100"), 2, "bf16", profile=NEUTRAL)
    assert isinstance(qwen, StepLatencyModel) and qwen.shapes.mla_kv_b is None
    assert qwen.mla_prefix_s(10**5) == 0.0
    L = qwen.shapes.num_layers
    mixed = BatchShape(extend_lens=(2048,), prefix_lens=(0,), num_decode=16, decode_sum_kv=16 * 3000)
    expected = (qwen._dense_part(2048 + 16, 1 + 16, False) + L * qwen._context_attention((2048,), (0,))
                + L * qwen._generation_attention(16, 16 * 3000))
    assert qwen.step_time(mixed).gpu_s == pytest.approx(expected, rel=1e-9)
    assert math.isfinite(expected)


def test_the_server_kv_cache_dtype_reaches_the_attention_kernels() -> None:
    gpu = load_gpu("h200")
    auto = build_latency_model(DSV3, gpu, 8, "fp8", profile=NEUTRAL, kv_cache_dtype="auto")
    fp8 = build_latency_model(DSV3, gpu, 8, "fp8", profile=NEUTRAL, kv_cache_dtype="fp8_e4m3")
    assert isinstance(auto, StepLatencyModel) and isinstance(fp8, StepLatencyModel)
    assert (auto.kv_bytes, fp8.kv_bytes) == (2, 1)
    # the latent read of the MLA prefix path halves: 576 B per token less at 1 byte per element
    assert auto.mla_prefix_s(100_000) - fp8.mla_prefix_s(100_000) == pytest.approx(
        100_000 * 576 / (gpu.hbm_bytes_per_s * 0.80), rel=1e-9)
    # decode attention reads the fp8 generation-MLA table: on B200 it is measured faster than bf16 at long KV
    b200 = load_gpu("b200")
    auto_b, fp8_b = (build_latency_model(DSV3, b200, 8, "fp8", profile=NEUTRAL, kv_cache_dtype=kv)
                     for kv in ("auto", "fp8_e4m3"))
    long_decode = BatchShape(num_decode=128, decode_sum_kv=128 * 8000, cuda_graph_bs=128)
    assert fp8_b.step_time(long_decode).gpu_s < auto_b.step_time(long_decode).gpu_s


def test_an_8k_deepseek_prefill_on_8_b200_against_its_physics_floor() -> None:
    # One 8192-token prefill of DeepSeek-V3 at TP8 on B200 (block fp8, the InferenceX dsr1-fp8-b200-sglang
    # deployment, docs/accuracy.md §3.12). Hand-derived FLOPs per rank (TP8: 16 of 128 heads, MoE inter 2048/8):
    S, L, moe_layers = 8192, 61, 58
    linear = 2 * S * ((1536 * 7168 + 3072 * 1536 + 576 * 7168 + 7168 * 2048) * L  # q_a, q_b, kv_a, o_proj
                      + (4608 * 7168 + 7168 * 2304) * 3                          # dense MLP, first 3 layers
                      + (512 * 7168 + 7168 * 256) * moe_layers)                  # shared expert
    assert linear == pytest.approx(42.18e12, rel=1e-3)
    routed = 2 * S * 8 * (512 * 7168 + 7168 * 256) * moe_layers  # top-8 experts, gate_up + down
    kv_b = 2 * S * 4096 * 512 * L                               # forward_mha.py: kv_b_proj over the new tokens
    attention = S * S / 2 * 16 * 2 * (192 + 128) * L            # causal QK (192) and PV (128), bf16
    assert (routed, attention) == (pytest.approx(41.85e12, rel=1e-3), pytest.approx(20.96e12, rel=1e-3))
    gpu = load_gpu("b200")
    compute_floor = (linear + routed + kv_b) / gpu.peak_flops["fp8"] + attention / gpu.peak_flops["bf16"]
    assert compute_floor == pytest.approx(28.5e-3, rel=0.01)
    # 2 ring all-reduces per layer + 1 after the embedding of S × 7168 bf16: 2·7/8 of the message per rank on NVLink
    comm_floor = (2 * L + 1) * 2 * 7 / 8 * S * 7168 * 2 / gpu.nvlink_bytes_per_s
    assert comm_floor == pytest.approx(28.1e-3, rel=0.01)
    # the shipped profile without the fp8 MoE prefill factor (docs/accuracy.md §3.16): the tables as measured
    from simcore.perf.profile import default_profile

    tables_only = default_profile().model_copy(update={"fp8_moe_prefill_scale": 0.0})
    lm = build_latency_model(DSV3, gpu, 8, "fp8", kv_cache_dtype="fp8_e4m3", profile=tables_only)
    step = lm.step_time(BatchShape(extend_lens=(S,), prefix_lens=(0,))).gpu_s
    # the measured tables compose to ~3.3× the floor (MoE at inter 256 per rank runs at ~13% of fp8 peak)
    assert 2.5 * (compute_floor + comm_floor) < step < 4.0 * (compute_floor + comm_floor)
    # the shipped profile prices the 58 MoE layers' time above their memory floor 3.75× (1.31 → 3.23 ms a layer)
    shipped = build_latency_model(DSV3, gpu, 8, "fp8", kv_cache_dtype="fp8_e4m3")
    grown = shipped.step_time(BatchShape(extend_lens=(S,), prefix_lens=(0,))).gpu_s - step
    assert grown == pytest.approx(moe_layers * 2.75 * (1.308e-3 - 0.608e-3), rel=0.01)
    # Which block-fp8 GEMM kernel runs bounds little of it: every linear GEMM of the prefill costs 25.8 ms on the
    # DeepGEMM fp8_block table, 32.0 ms on the bf16 table (twice the FLOP time); InferenceX's
    # SGL_ENABLE_JIT_DEEPGEMM=false swaps DeepGEMM for flashinfer's TRT-LLM groupwise kernel
    # (fp8_utils.py _dispatch_auto_backend), for which no table exists.
    sh, costs = lm.shapes, lm.costs

    def all_linear_ms(dtype: str) -> float:
        return (sum(costs.gemm_curve(g.n, g.k, dtype)(S) for g in sh.attn_gemms) * L
                + sum(costs.gemm_curve(g.n, g.k, dtype)(S) for g in sh.dense_mlp_gemms) * 3
                + sum(costs.gemm_curve(g.n, g.k, dtype)(S) for g in sh.shared_expert_gemms) * moe_layers)
    block, bf16 = all_linear_ms("fp8_block"), all_linear_ms("bf16")
    assert 20 < block < bf16 < 40 and bf16 - block < 0.05 * step * 1e3
