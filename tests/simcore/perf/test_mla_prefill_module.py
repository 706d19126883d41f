"""The MLA attention of a long DeepSeek prefill against a measurement of the whole attention module (issue 9).

docs/accuracy.md §3.14 ("The fp8 8192-token prefill: the MLA attention module measured"): the fp8 InferenceX rows'
8192-token prefills need ~1.75× (TP4) and ~1.9× (TP8) the priced step. This pins that the MLA attention half of
that step is not where the missing time is: the step model composes it from op tables (four projection GEMMs, the
context-MLA kernel, the MHA path's kv_b_proj and k assembly), and aiconfigurator measured the same module whole.

The measurement (copied here, not vendored): ai-dynamo/aiconfigurator @095f58a,
``aic-core/src/aiconfigurator_core/systems/data/b200_sxm/mla/sglang/0.5.10/wideep_context_mla_perf.parquet``, rows
with ``kernel_source`` trtllm_mla, ``mla_dtype`` / ``gemm_type`` fp8_block, ``kv_cache_dtype`` fp8, tp_size 1,
batch 1, step 0: latency (ms) of ``self_attn.forward`` of one DeepSeek-V3 layer (``collector/sglang/
collect_mla_module.py``: q_a/kv_a/q_b/kv_b/o projections, norms, RoPE, KV store, attention; eager, no all-reduce),
with 16 and 32 heads = the heads of a TP8 / TP4 rank. SGLang 0.5.10 on B200 is the build of the B200 rows' 0.5.9
(the same ``trtllm_mla`` dispatch: ``models/deepseek_common/attention_backend_handler.py``
``handle_attention_trtllm_mla`` returns MHA_CHUNKED_KV for an extend without prefix in both).
"""
from __future__ import annotations

import pytest

from simcore.gpus import load_gpu
from simcore.models import load_model
from simcore.perf import BatchShape, build_latency_model

DSV3 = load_model("deepseek-ai/DeepSeek-V3")

# (heads per rank, prompt tokens) → measured ms of one attention module (the parquet rows above)
MEASURED_MODULE_MS = {(16, 8192): 0.8157, (32, 8192): 1.1298, (16, 16384): 1.5790, (32, 16384): 2.6957}
TP_OF_HEADS = {16: 8, 32: 4}


def composed_module_ms(tp: int, tokens: int) -> tuple[float, float]:
    """The step model's attention module per layer, ms: (projections + context MLA + MHA path, the same plus the
    layer's whole elementwise share), for one prefill of ``tokens`` on B200 fp8 with fp8 KV (the InferenceX flags)."""
    lm = build_latency_model(DSV3, load_gpu("b200"), tp, "fp8", kv_cache_dtype="fp8_e4m3")
    sh, L = lm.shapes, lm.shapes.num_layers
    parts = lm.breakdown(BatchShape(extend_lens=(tokens,), prefix_lens=(0,)))
    projections = sum(lm.costs.gemm_curve(g.n, g.k, "fp8_block")(tokens) for g in sh.attn_gemms)
    core = projections + parts["context_attention"] / L * 1e3 + lm.mla_new_tokens_mha_s(tokens) * 1e3
    return core, core + parts["elementwise"] / L * 1e3


def test_the_module_floor_by_hand() -> None:
    # One 8192-token prefill, 16 heads (TP8): projection FLOPs 2·S·(q_a 7168·1536 + kv_a 7168·576 + q_b 1536·3072
    # + kv_b 512·4096 + o 2048·7168), causal attention S²/2 pairs × 16 heads × 2·(192 + 128)
    S = 8192
    proj = 2 * S * (7168 * 1536 + 7168 * 576 + 1536 * 3072 + 512 * 4096 + 2048 * 7168)
    attn = S * S / 2 * 16 * 2 * (192 + 128)
    assert (proj, attn) == (pytest.approx(600.2e9, rel=1e-3), pytest.approx(343.6e9, rel=1e-3))
    gpu = load_gpu("b200")
    floor_ms = (proj / gpu.peak_flops["fp8"] + attn / gpu.peak_flops["bf16"]) * 1e3
    assert floor_ms == pytest.approx(0.286, rel=0.02)
    # the measured module runs at ~2.9× that floor: a real kernel mix, not a peak-rate artefact
    assert 2.5 < MEASURED_MODULE_MS[(16, S)] / floor_ms < 3.2


@pytest.mark.parametrize(("heads", "tokens"), sorted(MEASURED_MODULE_MS))
def test_the_composed_mla_module_brackets_its_measurement(heads: int, tokens: int) -> None:
    core, with_elementwise = composed_module_ms(TP_OF_HEADS[heads], tokens)
    measured = MEASURED_MODULE_MS[(heads, tokens)]
    # The module holds the attention-side elementwise kernels (norms, RoPE, KV store), not the MLP's, so the
    # measurement lies between the core and the core plus the layer's whole elementwise share.
    assert 0.95 * core <= measured <= 1.05 * with_elementwise
    assert measured / core < 1.25  # priced within −20 … +5% of the module at 8k and 16k, both head counts


def test_the_attention_module_cannot_hold_the_fp8_prefill_gap() -> None:
    # §3.14: at C = 4 the TP8 8192 × 1024 row is ~153 ms short and the TP4 one ~174 ms (simulated step for one
    # 7,373-token prompt 174 / 236 ms). Put on the attention module of 61 layers that would be +2.5 / +2.9 ms a
    # layer: ~4× the measured module, against ≤ 25% between the composition and the measurement.
    for heads, gap_ms in ((16, 153.0), (32, 174.0)):
        core, _ = composed_module_ms(TP_OF_HEADS[heads], 8192)
        needed = core + gap_ms / DSV3.num_layers
        assert needed / MEASURED_MODULE_MS[(heads, 8192)] > 3.0
