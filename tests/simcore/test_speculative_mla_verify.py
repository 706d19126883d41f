"""TARGET_VERIFY and DRAFT_EXTEND on the MLA decode kernel: each request's draft tokens are query heads over its KV.

SGLang 0.5.9 ``layers/attention/trtllm_mla_backend.py`` ``TRTLLMMLABackend.forward_extend``: for
``forward_mode.is_target_verify()`` the query is reshaped ``q.view(bs, -1, layer.tp_q_head_num, layer.head_dim)`` and
passed with one block table and one ``seq_lens_k`` per request to ``flashinfer.decode.
trtllm_batch_decode_with_kv_cache_mla`` (``max_seq_len = max_seq_len_k + draft_token_num``); draft extend the same
with ``tokens_per_seq``. ``layers/attention/flashmla_backend.py`` says it outright: the verify's metadata is
``get_mla_metadata(seq_lens, self.num_draft_tokens * self.num_q_heads, 1)``. So the kernel reads each request's
latent KV once and scores ``q_len × heads`` query rows against all of it, not ``bs × q_len`` one-token rows of a
third of the KV each (`simcore.speculative.multi_token_mla_attention_s`).
"""
from __future__ import annotations

import pytest

from simcore.gpus import load_gpu
from simcore.models import load_model
from simcore.perf import build_latency_model
from simcore.perf.base import BatchShape
from simcore.settings import ServerSettings
from simcore.speculative import (AcceptanceModel, SpeculativeConfig, SpeculativeDecoding, build_speculative,
                                 multi_token_mla_attention_s)

R1 = load_model("deepseek-ai/DeepSeek-R1")
B200 = load_gpu("b200_sxm")
H100 = load_gpu("h100_sxm")


def _target(gpu=B200, backend: str = "auto"):
    return build_latency_model(R1, gpu, 8, "fp8", backend=backend, kv_cache_dtype="fp8_e4m3")


def test_the_table_path_reads_the_mla_decode_table_at_q_len_times_the_heads() -> None:
    lat = _target()
    table = lat.costs.base.tables.generation_mla["fp8"] if hasattr(lat.costs, "base") \
        else lat.costs.tables.generation_mla["fp8"]
    assert lat.shapes.q_heads == 16 and lat.shapes.num_layers == 61  # 128 heads / TP8
    # 2 draft tokens on 16 heads = 32 heads, a measured head count: 64 requests of 4096 KV tokens each against
    # the priced 128 one-token rows of 2048 KV tokens at 16 heads (the absorb bmm is the same 128 × 16 rows)
    folded = table.latency_ms(64, 4096.0, 32, 1)
    split = table.latency_ms(128, 2048.0, 16, 1)
    assert folded > split  # twice the score rows over each KV token, the same KV bytes
    expected = lat._k_gen * 61 * (folded - split) * 1e-3
    assert multi_token_mla_attention_s(lat, 64, 64 * 4096, 2) == pytest.approx(expected, rel=1e-9)


def test_the_roofline_path_adds_the_score_flops_and_no_kv_bytes() -> None:
    lat = _target(H100, backend="roofline")
    roof = lat.costs.base if hasattr(lat.costs, "base") else lat.costs
    h, kvd = 16, 576
    # 32 requests × 8 draft tokens (topk > 1 trees) over 10,000 KV tokens each: the KV is read once either way
    # (32 × 10,000 × 576 bytes a layer, plus the queries), the score FLOPs are 2 · heads · pairs · (576 + 512) with
    # 8× the pairs when folded; the absorb bmm is over the same 256 query rows of 16 heads
    pairs = 32 * 10_000
    absorb = 2.0 * 256 * h * 128 * kvd * 2
    flops_split = 2.0 * h * pairs * (kvd + kvd - 64) + absorb
    flops_folded = 2.0 * 8 * h * pairs * (kvd + kvd - 64) + absorb
    peak = H100.flops("bf16") * roof.p("attn_compute_eff")
    byts = pairs * kvd * 1.0 + 256 * h * (kvd + 128) * 2.0
    bw = H100.hbm_bytes_per_s * roof.p("mem_eff")
    assert flops_split / peak < byts / bw < flops_folded / peak  # memory-bound split, compute-bound folded
    per_layer = flops_folded / peak - byts / bw
    assert multi_token_mla_attention_s(lat, 32, pairs, 8) == pytest.approx(lat._k_gen * 61 * per_layer, rel=1e-9)
    # 3 draft tokens at this size: still memory-bound, nothing added
    assert multi_token_mla_attention_s(lat, 32, pairs, 3) == pytest.approx(0.0, abs=1e-12)
    # one request with a short KV: memory-bound both ways, nothing added
    assert multi_token_mla_attention_s(lat, 1, 100, 3) == pytest.approx(0.0, abs=1e-12)


def test_nothing_for_one_token_rows_or_a_model_without_mla() -> None:
    lat = _target()
    assert multi_token_mla_attention_s(lat, 64, 64 * 4096, 1) == 0.0
    assert multi_token_mla_attention_s(lat, 0, 0, 3) == 0.0
    qwen = build_latency_model(load_model("Qwen/Qwen3-32B"), H100, 2, "bf16")
    assert multi_token_mla_attention_s(qwen, 64, 64 * 4096, 3) == 0.0


def test_an_eagle_iteration_pays_it_in_verify_and_draft_extend() -> None:
    settings = ServerSettings(speculative_algorithm="EAGLE", speculative_num_steps=2,
                              speculative_num_draft_tokens=3, speculative_eagle_topk=1)
    target = _target()
    spec = build_speculative(settings, R1, target, lambda m: build_latency_model(
        m, B200, 8, "fp8", kv_cache_dtype="fp8_e4m3"))
    assert isinstance(spec, SpeculativeDecoding)
    cfg, draft = spec.config, spec.draft
    # 120 requests in the graph captured for 128 (0.5.9's spec capture list: ... 120, 128), 8,700 KV tokens each
    bs, graph, kv = 120, 128, 120 * 8700
    got = cfg.iteration_time(target, draft, bs, kv, cuda_graph_bs=graph).gpu_s
    draft_step = draft.step_time(BatchShape(num_decode=bs, decode_sum_kv=kv, cuda_graph_bs=graph)).gpu_s
    verify = target.step_time(BatchShape(num_decode=3 * bs, decode_sum_kv=kv, cuda_graph_bs=3 * graph)).gpu_s
    extend = draft.step_time(BatchShape(num_decode=3 * bs, decode_sum_kv=kv, cuda_graph_bs=3 * graph)).gpu_s
    fold_verify = multi_token_mla_attention_s(target, graph, kv, 3)
    fold_extend = multi_token_mla_attention_s(draft, graph, kv, 3)
    assert got == pytest.approx(draft_step + verify + fold_verify + extend + fold_extend, rel=1e-12)
    # the target's 61 layers against the NextN draft's one
    assert fold_verify == pytest.approx(61 * fold_extend, rel=1e-9)
    # about 2 ms on ~45 ms of verify at this size (B200 fp8 TP8): 61 layers × (the 48-head entry at 128 requests of
    # 8,163 tokens − the 16-head entry at 384 rows of 2,721)
    assert 1.5e-3 < fold_verify < 2.5e-3
    assert fold_verify / verify < 0.06


def test_the_speculative_server_decode_step_carries_it() -> None:
    cfg = SpeculativeConfig("EAGLE", 2, 1, 3)
    target = _target()
    draft = build_latency_model(R1.model_copy(update={"num_layers": 1, "num_dense_layers": 0}), B200, 8, "fp8",
                                kv_cache_dtype="fp8_e4m3")
    spec = SpeculativeDecoding(cfg, target, draft, AcceptanceModel(3, 0.7))
    shape = BatchShape(num_decode=16, decode_sum_kv=16 * 1500, cuda_graph_bs=16)
    plain = cfg.iteration_time(target, draft, 16, 16 * 1500, cuda_graph_bs=16).gpu_s
    assert spec.step_time(shape).gpu_s == plain
    assert plain > (target.step_time(BatchShape(num_decode=48, decode_sum_kv=16 * 1500, cuda_graph_bs=48)).gpu_s
                    + multi_token_mla_attention_s(target, 16, 16 * 1500, 3))
