"""SGLang 0.4.0's extra cost of an extend (prefill) forward (CalibrationProfile.extend_s_per_layer_by_version).

DataCrunch's open-loop runs of SGLang 0.4.0.post1 (docs/accuracy.md §3.11) put every unsaturated median TTFT
13-37% below the simulation by 0.23 ms per layer of the model (Llama-3.3-70B, 80 layers: 18 ms; Llama-3.1-405B,
126 layers: 29 ms at 1 req/s), and the mean e2e of the same runs below it by about as much per prefill a request's
decode is interrupted by: the time is spent on the GPU stream of every step that computes prompt tokens. 0.4.0 runs
those steps eagerly (no CUDA graph: sglang-0.4.0.post1 srt/model_executor/model_runner.py ModelRunner.forward ->
forward_extend), after a host-side FlashInfer plan (srt/layers/attention/flashinfer_backend.py
FlashInferAttnBackend.init_forward_metadata -> indices_updater_prefill.update -> begin_forward) and, below 4096
new tokens, through FlashInfer's paged-KV prefill over the page-size-1 token pool (forward_extend, `use_ragged`
False); the op tables were measured on SGLang 0.5.x. The per-layer value is fitted on the 70B rows only
(validation/fit_per_row_by_version.py) and checked on the 405B rows.
"""
from __future__ import annotations

import pytest

from simcore.gpus import load_gpu
from simcore.models import load_model
from simcore.perf import BatchShape, CalibrationProfile, build_latency_model, default_profile

H200 = load_gpu("h200_sxm")
LLAMA70 = load_model("meta-llama/Llama-3.3-70B-Instruct")


def _lm(version: str):
    return build_latency_model(LLAMA70, H200, 4, "bf16", profile=default_profile().for_version(version))


def test_the_shipped_value_applies_to_040_only() -> None:
    prof = default_profile()
    assert prof.extend_s_per_layer == 0.0
    assert prof.for_version("0.4.0.post1").extend_s_per_layer == pytest.approx(230e-6)
    assert prof.for_version("0.4.0.post1").gpu_per_req_s == pytest.approx(60e-6)
    assert prof.for_version("0.3.6").extend_s_per_layer == pytest.approx(230e-6)  # smallest key >= version
    for later in ("0.4.1", "0.4.10", "0.5.1.post1", "0.5.8.post1", "0.5.9"):
        assert prof.for_version(later).extend_s_per_layer == 0.0


def test_a_prefill_step_of_040_costs_80_layers_more_and_decode_only_the_per_row_difference() -> None:
    old, new = _lm("0.4.0.post1"), _lm("0.5.9")
    prefill = BatchShape(extend_lens=(512,), prefix_lens=(0,))
    # one request row: 60 µs (0.4.0) instead of 15 µs; 80 layers x 230 µs = 18.4 ms
    assert old.step_time(prefill).gpu_s - new.step_time(prefill).gpu_s == pytest.approx(80 * 230e-6 + 45e-6,
                                                                                        rel=1e-9)
    decode = BatchShape(num_decode=16, decode_sum_kv=16 * 768, cuda_graph_bs=16)
    assert old.step_time(decode).gpu_s - new.step_time(decode).gpu_s == pytest.approx(16 * 45e-6, rel=1e-9)
    # a mixed step (prompt tokens plus decode rows) computes prompt tokens: it pays the per-layer cost too
    mixed = BatchShape(extend_lens=(256,), prefix_lens=(0,), num_decode=8, decode_sum_kv=8 * 500)
    assert old.step_time(mixed).gpu_s - new.step_time(mixed).gpu_s == pytest.approx(80 * 230e-6 + 9 * 45e-6,
                                                                                    rel=1e-9)


def test_tables_resolve_independently_and_empty_ones_keep_old_hashes() -> None:
    prof = CalibrationProfile(gpu_per_req_s=1.5e-5, extend_s_per_layer_by_version={"0.4.0": 2e-4, "0.4.6": 1e-4})
    assert prof.for_version("0.4.3").extend_s_per_layer == 1e-4
    assert prof.for_version("0.4.3").gpu_per_req_s == 1.5e-5  # no per-row table: unchanged
    assert prof.for_version("0.5.0") is prof
    assert CalibrationProfile().profile_hash == CalibrationProfile(extend_s_per_layer_by_version={},
                                                                   extend_s_per_layer=0.0).profile_hash
    assert prof.profile_hash != CalibrationProfile(gpu_per_req_s=1.5e-5).profile_hash


def test_dp_attention_steps_of_040_pay_it_on_extend_batches_only() -> None:
    from simcore.dp_attention import build_dp_attention_latency
    from simcore.settings import ServerSettings, resolve

    model = load_model("deepseek-ai/DeepSeek-V3")
    s = resolve(ServerSettings(sglang_version="0.4.0.post1", tp_size=8, dp_size=8, enable_dp_attention=True),
                H200.memory_bytes)
    old = build_dp_attention_latency(model, H200, s, "fp8", profile=default_profile().for_version("0.4.0.post1"))
    new = build_dp_attention_latency(model, H200, s, "fp8",
                                     profile=default_profile().for_version("0.4.0.post1").model_copy(
                                         update={"extend_s_per_layer": 0.0}))
    L = old.mlp.shapes.num_layers
    prefill = [BatchShape((1000,), (0,), 0, 0)] + [None] * 7
    decode = [BatchShape((), (), 20, 20 * 500)] + [None] * 7
    assert old.step_time_ranks(prefill).gpu_s - new.step_time_ranks(prefill).gpu_s == pytest.approx(L * 230e-6)
    assert old.step_time_ranks(decode).gpu_s == new.step_time_ranks(decode).gpu_s
