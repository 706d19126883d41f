"""The step-latency model: one forward pass composed from measured ops, as SGLang runs it.

Numbers are for Qwen3-32B on H100 SXM (the measured tables). Properties checked: physics directions (more
tokens, more KV, more prefix cost more; more GPUs cost less), CUDA-graph padding, the eager-launch floor,
calibration factors, memoization, and the choice of backend.
"""
from __future__ import annotations

import pytest

from simcore.errors import UserError
from simcore.gpus import load_gpu
from simcore.models import load_model
from simcore.perf import BatchShape, CalibrationProfile, LinearLatencyModel, StepLatencyModel, build_latency_model
from simcore.perf.base import LatencyModel

QWEN = load_model("Qwen/Qwen3-32B")
H100 = load_gpu("h100_sxm")
NEUTRAL = CalibrationProfile()


def decode(bs: int, kv: int, graph: int | None = None) -> BatchShape:
    return BatchShape(num_decode=bs, decode_sum_kv=bs * kv, cuda_graph_bs=graph)


@pytest.fixture(scope="module")
def tp2() -> StepLatencyModel:
    lm = build_latency_model(QWEN, H100, 2, "bf16", profile=NEUTRAL)
    assert isinstance(lm, StepLatencyModel)
    return lm


def test_factory_implements_the_protocol_and_names_itself(tp2: StepLatencyModel) -> None:
    assert isinstance(tp2, LatencyModel)
    assert tp2.name == "table:h100_sxm:tp2:bf16"
    # Table backend: the hash covers the profile and the measured tables; roofline: the profile alone.
    assert tp2.profile_hash != NEUTRAL.profile_hash and len(tp2.profile_hash) == 12
    assert build_latency_model(QWEN, H100, 4, "bf16", profile=NEUTRAL).profile_hash == tp2.profile_hash
    assert build_latency_model(QWEN, load_gpu("h200"), 2, "bf16", profile=NEUTRAL).profile_hash != tp2.profile_hash
    roof = build_latency_model(QWEN, load_gpu("h20"), 2, "bf16", profile=NEUTRAL)
    assert roof.name.startswith("roofline:h20") and roof.profile_hash == NEUTRAL.profile_hash
    assert isinstance(build_latency_model(QWEN, H100, 2, "bf16", backend="linear"), LinearLatencyModel)


def test_decode_step_is_in_the_measured_range(tp2: StepLatencyModel) -> None:
    # Qwen3-32B TP2 on H100: ~61 GB of bf16 weights, 30.5 GB per GPU streamed at ~2.5 TB/s ≈ 12 ms + rest.
    t = tp2.step_time(decode(16, 1500, 16)).gpu_s
    assert 0.012 < t < 0.020


def test_prefill_is_compute_bound(tp2: StepLatencyModel) -> None:
    # 8192 tokens × 2 × 32.8 GFLOP / 2 GPUs ≈ 268 TFLOP per GPU; at ~700 TFLOP/s ≈ 0.38 s.
    t = tp2.step_time(BatchShape(extend_lens=(1024,) * 8, prefix_lens=(0,) * 8)).gpu_s
    assert 0.35 < t < 0.55


def test_costs_grow_with_work(tp2: StepLatencyModel) -> None:
    st = tp2.step_time
    assert st(decode(64, 1000, 64)).gpu_s < st(decode(64, 4000, 64)).gpu_s  # longer KV
    assert st(decode(16, 1000, 16)).gpu_s < st(decode(128, 1000, 128)).gpu_s  # bigger batch
    no_prefix = st(BatchShape(extend_lens=(512,), prefix_lens=(0,))).gpu_s
    with_prefix = st(BatchShape(extend_lens=(512,), prefix_lens=(8192,))).gpu_s
    assert no_prefix < with_prefix < st(BatchShape(extend_lens=(8704,), prefix_lens=(0,))).gpu_s


def test_more_gpus_are_faster() -> None:
    shape = BatchShape(extend_lens=(4096,), prefix_lens=(0,))
    times = [build_latency_model(QWEN, H100, tp, "bf16", profile=NEUTRAL).step_time(shape).gpu_s for tp in (1, 2, 4, 8)]
    assert times == sorted(times, reverse=True)


def test_cuda_graph_padding_costs_the_padded_rows(tp2: StepLatencyModel) -> None:
    # 17 requests replayed in the 24-row graph cost what 24 rows with the same KV cost: GEMMs run at m = 24.
    padded = tp2.step_time(BatchShape(num_decode=17, decode_sum_kv=34000, cuda_graph_bs=24)).gpu_s
    full = tp2.step_time(BatchShape(num_decode=24, decode_sum_kv=34000, cuda_graph_bs=24)).gpu_s
    assert padded == pytest.approx(full, rel=1e-12)
    assert tp2.step_time(BatchShape(num_decode=17, decode_sum_kv=34000, cuda_graph_bs=17)).gpu_s != padded


def test_eager_steps_cannot_beat_their_kernel_launches() -> None:
    prof = CalibrationProfile(launch_s_per_layer=1e-3)  # exaggerated: 64 layers → 64 ms floor
    lm = build_latency_model(QWEN, H100, 8, "bf16", profile=prof)
    assert lm.step_time(decode(8, 100)).gpu_s == pytest.approx(0.064, rel=1e-9)  # eager: floor
    assert lm.step_time(decode(8, 100, 8)).gpu_s < 0.02  # same batch replayed as a CUDA graph


def test_profile_factors_scale_and_add(tp2: StepLatencyModel) -> None:
    shape = decode(32, 2000, 32)
    base = tp2.step_time(shape)
    per_req = build_latency_model(QWEN, H100, 2, "bf16", profile=CalibrationProfile(gpu_per_req_s=1e-5))
    assert per_req.step_time(shape).gpu_s == pytest.approx(base.gpu_s + 32e-5, rel=1e-9)
    slow = CalibrationProfile(op_scale={"gemm": 2.0}, cpu_base_s=1e-3, cpu_per_req_s=1e-5)
    lm = build_latency_model(QWEN, H100, 2, "bf16", profile=slow)
    b = tp2.breakdown(shape)
    assert lm.step_time(shape).gpu_s == pytest.approx(base.gpu_s + b["gemm"] + b["lm_head"], rel=1e-6)
    assert lm.step_time(shape).cpu_s == pytest.approx(1e-3 + 32e-5)
    assert lm.profile_hash != tp2.profile_hash


def test_idle_step_costs_only_host_time(tp2: StepLatencyModel) -> None:
    assert tp2.step_time(BatchShape()).gpu_s == 0.0


def test_memoized_by_shape_and_by_token_count(tp2: StepLatencyModel) -> None:
    # Speed is measured by benchmarks/bench_perf.py; here: what is cached, and that caching changes nothing.
    s = decode(64, 1234, 64)
    assert tp2.step_time(s) is tp2.step_time(s)
    fresh = build_latency_model(QWEN, H100, 2, "bf16", profile=NEUTRAL)
    times = [fresh.step_time(decode(64, kv, 64)).gpu_s for kv in range(2000, 2050)]
    assert len(fresh._dense_memo) == 1  # the non-attention part is shared by every Σkv at batch 64
    assert times == sorted(times) and times[0] < times[-1]  # attention still follows the KV length
    assert [tp2.step_time(decode(64, kv, 64)).gpu_s for kv in range(2000, 2050)] == times


@pytest.mark.parametrize("name, tp, prec", [
    ("Qwen/Qwen3-30B-A3B", 2, "bf16"), ("deepseek-ai/DeepSeek-V3", 8, "fp8_block"),
    ("mistralai/Mixtral-8x7B-v0.1", 2, "bf16"), ("meta-llama/Llama-3.1-8B-Instruct", 1, "fp8"),
    ("Qwen/Qwen2.5-7B-Instruct", 1, "int4"),
])
def test_other_architectures_give_finite_positive_times(name: str, tp: int, prec: str) -> None:
    for gpu in ("h100_sxm", "h200_sxm", "a100_sxm", "b200_sxm", "l40s", "h20", "mi300x"):
        lm = build_latency_model(load_model(name), load_gpu(gpu), tp, prec)
        d = lm.step_time(decode(32, 2048, 32)).gpu_s
        p = lm.step_time(BatchShape(extend_lens=(2048, 1000), prefix_lens=(0, 500))).gpu_s
        assert 0 < d < p < 60


def test_moe_decode_reads_only_active_experts() -> None:
    moe = build_latency_model(load_model("Qwen/Qwen3-30B-A3B"), H100, 1, "bf16", profile=NEUTRAL)
    dense = build_latency_model(load_model("Qwen/Qwen3-32B"), H100, 1, "bf16", profile=NEUTRAL)
    assert moe.step_time(decode(1, 1000, 1)).gpu_s < 0.5 * dense.step_time(decode(1, 1000, 1)).gpu_s


def test_bad_arguments_are_user_errors() -> None:
    with pytest.raises(UserError, match="--latency-backend"):
        build_latency_model(QWEN, H100, 2, "bf16", backend="magic")
    with pytest.raises(UserError, match="no measured tables"):
        build_latency_model(QWEN, load_gpu("h20"), 2, "bf16", backend="table")
    with pytest.raises(UserError, match="--precision"):
        build_latency_model(QWEN, H100, 2, "fp2")
    with pytest.raises(UserError, match="--tp"):
        build_latency_model(QWEN, H100, 0, "bf16")


def test_mla_attention_uses_measured_tables_where_they_exist() -> None:
    from simcore.perf.tables import load_tables

    dsv3 = load_model("deepseek-ai/DeepSeek-V3")
    t = load_tables("h200_sxm")
    lm = build_latency_model(dsv3, load_gpu("h200"), 8, "fp8_block", profile=NEUTRAL)
    c = lm.costs
    measured = t.generation_mla["bf16"].latency_ms(64, 2000.0, 16, 1) * 1e-3  # 128 heads / TP8 = 16 per rank
    assert c.mla_generation_s(64, 2000.0, 16, 576, 128, 2) == pytest.approx(measured + c.roof.mla_absorb_s(64, 16, 576))
    # A100 has no MLA tables: the roofline answers, and still grows with the KV length.
    a100 = build_latency_model(dsv3, load_gpu("a100"), 8, "fp8_block", profile=NEUTRAL).costs
    assert 0 < a100.mla_generation_s(64, 1000.0, 16, 576, 128, 2) < a100.mla_generation_s(64, 8000.0, 16, 576, 128, 2)
