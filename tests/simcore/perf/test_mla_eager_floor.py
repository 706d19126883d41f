"""The eager floor of an MLA + MoE forward (CalibrationProfile.launch_s_per_mla_layer).

A step that runs without a CUDA graph (every prefill or mixed step; decode above the largest captured batch) cannot
finish before its host side has dispatched every op. For DeepSeek-V3 in SGLang an SGLang contributor measured an
eager prefill of 1 new token at 82.6 ms ("forward cost") against 23.1 ms once the same step ran in a CUDA graph,
and found the prefill latency flat below ~100 new tokens (sgl-project/sglang PR #12160, 2025-10-26): the eager
DeepSeek forward is host-bound at ~82.6 ms, 1.3541 ms for each of its 61 layers. A dense layer keeps the
profile's 60 µs (15 kernels × 4 µs).
"""
from __future__ import annotations

import pytest

from simcore.gpus import load_gpu
from simcore.models.loader import load_model
from simcore.perf import BatchShape, build_latency_model, default_profile


def test_default_profile_carries_the_published_deepseek_floor() -> None:
    prof = default_profile()
    assert prof.launch_s_per_mla_layer == pytest.approx(0.0826 / 61, rel=1e-4)
    assert prof.launch_s_per_layer == pytest.approx(60e-6)


def test_a_short_deepseek_prefill_costs_the_eager_floor() -> None:
    lm = build_latency_model(load_model("deepseek-ai/DeepSeek-R1"), load_gpu("b200_sxm"), 8, "fp8")
    prof = default_profile()
    one = lm.step_time(BatchShape(extend_lens=(1,), prefix_lens=(0,))).gpu_s
    # floor 61 × 1.3541 ms = 82.6 ms, plus what is added after it: the fixed step overhead and one request row
    assert one == pytest.approx(61 * prof.launch_s_per_mla_layer + prof.step_overhead_s + prof.gpu_per_req_s,
                                rel=1e-6)
    # an 8k-token prefill is GPU-bound (well above the floor) and a graph-replayed decode step has no floor
    assert lm.step_time(BatchShape(extend_lens=(8192,), prefix_lens=(0,))).gpu_s > 0.15
    assert lm.step_time(BatchShape(num_decode=4, decode_sum_kv=4000, cuda_graph_bs=4)).gpu_s < 0.02


def test_dense_models_keep_the_kernel_launch_floor() -> None:
    lm = build_latency_model(load_model("Qwen/Qwen3-32B"), load_gpu("h100_sxm"), 2, "bf16")
    prof = default_profile()
    one = lm.step_time(BatchShape(extend_lens=(1,), prefix_lens=(0,))).gpu_s
    # weight-bound (~16 GB per rank at ~3 TB/s ≈ 10 ms), far below what the MLA floor would give 64 layers (87 ms)
    assert 64 * prof.launch_s_per_layer <= one < 0.03 < 64 * prof.launch_s_per_mla_layer
