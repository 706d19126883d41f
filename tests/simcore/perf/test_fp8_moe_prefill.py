"""The block-fp8 MoE above its memory floor (issues 9 and 14, docs/accuracy.md §3.16): the form of the profile's
``fp8_moe_prefill_scale``, by hand.

SGLang 0.5.9 / 0.5.10 on SM100 run DeepSeek-R1 fp8's routed experts in flashinfer's TRT-LLM fp8 block-scale MoE
(``server_args.py`` ``_handle_moe_kernel_config``: ``moe_runner_backend = "flashinfer_trtllm"`` for DeepSeek fp8
on Blackwell; ``layers/quantization/fp8.py`` ``Fp8MoEMethod.apply`` → ``FlashInferTrtllmFp8MoeQuantInfo``). Its
prefill-size calls cost more than the table's collector measured, its decode-size calls do not (fp8 TPOT fits).
The factor multiplies only a call's time above its memory floor: the one-token call's latency + the touched
experts' weights and routed activations over HBM bandwidth × the roofline's streaming efficiency.
"""
from __future__ import annotations

import pytest

from simcore.gpus import load_gpu
from simcore.models import load_model
from simcore.perf import BatchShape, build_latency_model
from simcore.perf.costs import TableCosts
from simcore.perf.moe_parallel import ParallelCosts, fp8_moe_prefill_s, moe_memory_s
from simcore.perf.profile import CalibrationProfile, default_profile

DSR1 = load_model("deepseek-ai/DeepSeek-R1")
H, I_TP8, K, E = 7168, 2048 // 8, 8, 256  # hidden, routed-expert width per TP8 rank, top-k, experts
S = 2.0  # a test value of the factor; the shipped one is checked separately


def _models(gpu_name: str = "b200", tp: int = 8, precision: str = "fp8", scale: float = S):
    base = default_profile().model_copy(update={"fp8_moe_prefill_scale": 0.0})
    gpu = load_gpu(gpu_name)
    plain = build_latency_model(DSR1, gpu, tp, precision, profile=base, kv_cache_dtype="fp8_e4m3")
    scaled = build_latency_model(DSR1, gpu, tp, precision, profile=base.model_copy(
        update={"fp8_moe_prefill_scale": scale}), kv_cache_dtype="fp8_e4m3")
    return gpu, base, plain, scaled


def _moe(lm, tokens: int, tp: int = 8, dtype: str = "fp8_block") -> float:
    sh = lm.shapes
    return lm.costs.moe_s(tokens, sh.hidden, sh.moe_inter, sh.top_k, sh.num_experts, dtype, tp=tp)


def _floor_by_hand(gpu, mem_eff: float, table_1: float, tokens: int) -> float:
    """The memory floor of a TP8 rank's call, written out: 256 experts × (1 − (1 − 8/256)^m) touched, 3 × 7168 × 256
    fp8 bytes each, + 8 routes × 7168 × 4 bytes a token, over 7.7 TB/s × mem_eff; + the kernel's latency, which on
    this table is the one-token call's excess over its HBM time (the largest of the decode sizes 1 … 256)."""
    bw = gpu.hbm_bytes_per_s * mem_eff

    def mem(m: int) -> float:
        return (E * (1 - (1 - K / E) ** m) * 3 * H * I_TP8 * 1.0 + m * K * H * 4.0) / bw

    return table_1 - mem(1) + mem(tokens)


def test_decode_calls_keep_the_table_and_prefill_calls_scale_above_the_floor_by_hand() -> None:
    gpu, base, plain, scaled = _models()
    assert gpu.hbm_bytes_per_s == 7.7e12 and gpu.sm_version >= 100
    mem_eff = base.roofline["mem_eff"]
    assert isinstance(plain.costs, TableCosts) and isinstance(scaled.costs, ParallelCosts)
    t1 = _moe(plain, 1)
    assert _floor_by_hand(gpu, mem_eff, t1, 1) == pytest.approx(t1, rel=1e-12)  # the floor at m = 1 is the call
    for m in (1, 4, 16, 64, 128, 256):  # decode sizes (CUDA-graph batches up to 256): on or under the floor
        t = _moe(plain, m)
        assert t <= _floor_by_hand(gpu, mem_eff, t1, m)
        assert _moe(scaled, m) == t  # unchanged, exactly
    for m in (512, 1024, 8192, 32768):  # prefill sizes: floor + S × (table − floor)
        t, floor = _moe(plain, m), _floor_by_hand(gpu, mem_eff, t1, m)
        assert t > floor
        assert _moe(scaled, m) == pytest.approx(floor + S * (t - floor), rel=1e-12)
    # 8192 tokens on a TP8 rank: the table's 1.31 ms a layer, its floor 0.61 ms (the weights of all 256 experts,
    # 1.41 GB, at 5.65 TB/s = 0.25 ms; 470 MB of routed activations = 0.083 ms … over 0.73 of 7.7 TB/s)
    t, floor = _moe(plain, 8192), _floor_by_hand(gpu, mem_eff, t1, 8192)
    assert t == pytest.approx(1.308e-3, rel=2e-3)
    assert floor == pytest.approx(0.6083e-3, rel=2e-3)
    assert fp8_moe_prefill_s(t, floor, S) == pytest.approx(floor + S * (t - floor), rel=1e-15)
    assert fp8_moe_prefill_s(0.5 * floor, floor, S) == 0.5 * floor  # below the floor: unchanged


def test_a_decode_step_is_unchanged_and_an_8k_prefill_grows_by_the_moe_layers_excess() -> None:
    _, _, plain, scaled = _models()
    decode = BatchShape(num_decode=64, decode_sum_kv=64 * 2048, cuda_graph_bs=64)
    assert scaled.step_time(decode).gpu_s == plain.step_time(decode).gpu_s
    prefill = BatchShape(extend_lens=(8192,), prefix_lens=(0,))
    grow = scaled.step_time(prefill).gpu_s - plain.step_time(prefill).gpu_s
    per_layer = _moe(scaled, 8192) - _moe(plain, 8192)
    assert grow == pytest.approx(DSR1.num_moe_layers * per_layer, rel=1e-9)  # 58 MoE layers
    assert DSR1.num_moe_layers == 58


def test_only_the_block_fp8_moe_from_sm90_on_is_scaled() -> None:
    # nvfp4 experts: another kernel, whose rows fit; A100 (SM80): no fp8 tensor cores
    _, _, plain4, scaled4 = _models(precision="nvfp4")
    assert _moe(scaled4, 8192, dtype="nvfp4") == _moe(plain4, 8192, dtype="nvfp4")
    _, _, plain_a, scaled_a = _models(gpu_name="a100")
    assert _moe(scaled_a, 8192) == _moe(plain_a, 8192)
    for gpu_name, tp in (("b300", 4), ("h200", 8)):
        _, _, plain, scaled = _models(gpu_name=gpu_name, tp=tp)
        assert _moe(scaled, 8192, tp=tp) > _moe(plain, 8192, tp=tp)
        for m in (1, 2, 4, 8, 16, 32, 64, 128, 256):  # every decode size keeps the table's time, by construction
            assert _moe(scaled, m, tp=tp) == _moe(plain, m, tp=tp)
    # a dense model has no MoE and keeps its plain table costs
    gpu = load_gpu("b200")
    dense = build_latency_model(load_model("Qwen/Qwen3-32B"), gpu, 2, "fp8", profile=default_profile().model_copy(
        update={"fp8_moe_prefill_scale": S}))
    assert isinstance(dense.costs, TableCosts)


def test_the_roofline_ridge_would_miss_the_8k_prefills() -> None:
    """Why the floor split and not 'scale above the ridge': by the GPU's own peak and bandwidth, a TP8 rank's
    block-fp8 MoE call reaches its ridge only at ~9.4k tokens counting the weights alone, and never counting the
    routed activations too, while the measured 8192-token prefills are the ones ~1.8× short."""
    gpu = load_gpu("b200")
    peak, bw = gpu.flops("fp8"), gpu.hbm_bytes_per_s
    assert (peak, bw) == (4.5e15, 7.7e12)
    # FLOPs 6·m·k·H·I; weights 3·E·H·I bytes (all experts touched): ridge m* = E·peak / (2·k·bw)
    ridge_tokens = E * peak / (2 * K * bw)
    assert ridge_tokens == pytest.approx(9350.6, abs=0.1)
    # with the routed activations (4·k·H bytes a token) the intensity tends to 6kHI / 4kH = 1.5·I = 384 FLOP/B
    assert 1.5 * I_TP8 == 384 < peak / bw  # 584 FLOP/B: never compute-bound
    assert moe_memory_s(8192, H, I_TP8, K, E, 1.0, bw) > 6 * 8192 * K * H * I_TP8 / peak


def test_the_profile_field_round_trips_and_enters_the_hash(tmp_path) -> None:
    p = CalibrationProfile(gpu_per_req_s=1.5e-5)
    with_factor = p.model_copy(update={"fp8_moe_prefill_scale": 2.25})
    assert with_factor.profile_hash != p.profile_hash
    path = tmp_path / "p.json"
    with_factor.save(path)
    back = CalibrationProfile.load(path)
    assert back.fp8_moe_prefill_scale == 2.25 and back.profile_hash == with_factor.profile_hash
    assert p.fp8_moe_prefill_scale == 0.0  # unset: no correction (test_frontend_latency: out of the hash)
    with pytest.raises(Exception):
        CalibrationProfile(fp8_moe_prefill_scale=-1.0)


def test_a_model_with_the_factor_copies_like_any_latency_model() -> None:
    # copy looks up __setstate__ on a ParallelCosts whose __init__ has not run: its delegating __getattr__ must not
    # recurse through self.base
    import copy

    _, _, _, scaled = _models()
    prefill = BatchShape(extend_lens=(8192,), prefix_lens=(0,))
    for twin in (copy.copy(scaled), copy.deepcopy(scaled)):
        assert twin.step_time(prefill) == scaled.step_time(prefill)


def test_graph_replayed_calls_keep_the_table_and_the_same_batch_eager_scales() -> None:
    # An EAGLE verify of 128 requests × 4 tokens runs as a 512-token CUDA-graph replay: its MoE calls keep the table
    # (docs/accuracy.md §3.13 measured such calls within ~10% of it); the same 512 rows run eagerly are scaled.
    _, _, plain, scaled = _models()
    replay = BatchShape(num_decode=512, decode_sum_kv=512 * 2048, cuda_graph_bs=512)
    eager = BatchShape(num_decode=512, decode_sum_kv=512 * 2048)
    assert scaled.step_time(replay).gpu_s == plain.step_time(replay).gpu_s
    per_layer = _moe(scaled, 512) - _moe(plain, 512)
    assert per_layer > 0
    # the eager step's time is the MLA model's eager floor (61 × 1.354 ms) either way: compare its GPU work
    assert scaled.step_time(eager).gpu_s == plain.step_time(eager).gpu_s
    assert scaled._dense_part(512, 512, False) - plain._dense_part(512, 512, False) == pytest.approx(
        DSR1.num_moe_layers * per_layer, rel=1e-9)
    assert scaled._dense_part(512, 512, True) == plain._dense_part(512, 512, True)
    sh = scaled.shapes
    assert scaled.costs.moe_graph_s(512, sh.hidden, sh.moe_inter, sh.top_k, sh.num_experts, "fp8_block",
                                    tp=8) == _moe(plain, 512)


def test_a_dp_attention_graph_step_keeps_the_table_and_its_extend_step_scales() -> None:
    # DP attention (TP8, DP8): the MLP half runs on the tokens gathered from every rank. A decode step replayed from
    # a CUDA graph (64 rows per rank → 512 gathered tokens, above the 256 decode sizes) keeps the table's MoE; an
    # extend step of the same gathered size runs eagerly and pays the factor (simcore/dp_attention.py
    # step_time_ranks → StepLatencyModel.mlp_side_s(tokens, logits, graph)).
    from simcore.dp_attention import build_dp_attention_latency
    from simcore.settings import ServerSettings, resolve

    gpu = load_gpu("b200")
    settings = resolve(ServerSettings(tp_size=8, dp_size=8, enable_dp_attention=True), gpu.memory_bytes)
    base = default_profile().model_copy(update={"fp8_moe_prefill_scale": 0.0})
    plain = build_dp_attention_latency(DSR1, gpu, settings, "fp8", profile=base)
    scaled = build_dp_attention_latency(DSR1, gpu, settings, "fp8",
                                        profile=base.model_copy(update={"fp8_moe_prefill_scale": S}))
    decode = [BatchShape((), (), 64, 64 * 1000)] * 8
    assert scaled.step_time_ranks(decode).gpu_s == plain.step_time_ranks(decode).gpu_s
    assert scaled.mlp.mlp_side_s(512, 64, True) == plain.mlp.mlp_side_s(512, 64, True)
    # the eager MLP half over the same 512 tokens: longer by exactly the MoE layers' excess × (S − 1)
    layers = scaled.mlp.shapes.num_moe_layers  # 58 of DeepSeek-R1's 61
    excess = (_moe(scaled.mlp, 512) - _moe(plain.mlp, 512)) * layers * scaled.mlp._k_moe
    assert excess > 0
    got = scaled.mlp.mlp_side_s(512, 64, False) - plain.mlp.mlp_side_s(512, 64, False)
    assert abs(got - excess) < 1e-12
    prefill = [BatchShape((4096,), (0,), 0, 0)] + [None] * 7
    assert scaled.step_time_ranks(prefill).gpu_s > plain.step_time_ranks(prefill).gpu_s
