"""The draft model's input projection (NextN ``eh_proj`` / EAGLE ``fc``) in every draft forward.

SGLang 0.5.9 ``models/deepseek_nextn.py`` ``DeepseekModelNextN``: ``self.eh_proj = nn.Linear(2 * hidden_size,
hidden_size, bias=False)`` (a plain, unquantized, replicated linear), applied in ``forward`` to
``cat(enorm(embeds), hnorm(spec_info.hidden_states))`` whenever the batch has tokens; ``models/llama_eagle.py``
``self.fc = torch.nn.Linear(config.hidden_size * 2, config.hidden_size)``. ``speculative/eagle_worker.py`` runs the
draft over the prompt tokens after the target's prefill (``forward_draft_extend``), over ``bs × topk`` rows per
draft step (``draft_forward``) and over ``bs × (num_steps + 1)`` rows in ``forward_draft_extend_after_decode``.
"""
from __future__ import annotations

import pytest

from simcore.gpus import load_gpu
from simcore.models import load_model
from simcore.perf import build_latency_model
from simcore.perf.base import BatchShape
from simcore.settings import ServerSettings
from simcore.speculative import (DraftInputProjection, SpeculativeConfig, SpeculativeDecoding, AcceptanceModel,
                                 draft_model_spec, with_input_projection)

R1 = load_model("deepseek-ai/DeepSeek-R1")
B200 = load_gpu("b200_sxm")


def _draft(tp: int = 8, algorithm: str = "EAGLE"):
    inner = build_latency_model(draft_model_spec(R1, algorithm), B200, tp, "fp8", kv_cache_dtype="fp8_e4m3")
    return inner, with_input_projection(inner, R1, algorithm)


def test_eh_proj_is_a_bf16_2h_by_h_gemm_over_every_prompt_token() -> None:
    inner, draft = _draft()
    assert isinstance(draft, DraftInputProjection)
    assert (draft.hidden, draft.in_features) == (7168, 2 * 7168)
    prefill = BatchShape(extend_lens=(8192,), prefix_lens=(0,))
    extra = draft.step_time(prefill).gpu_s - inner.step_time(prefill).gpu_s
    # 2 · 8192 · 14336 · 7168 = 1.684 TFLOP; B200's dense bf16 peak 2.25 PFLOP/s → at least 0.748 ms; the B200
    # GEMM table (bf16, n 7168, k 14336) reaches ~63 % of it: 1.19 ms
    flops = 2.0 * 8192 * 14336 * 7168
    assert flops / 2.25e15 == pytest.approx(0.748e-3, rel=1e-3)
    assert flops / 2.25e15 < extra < 2 * flops / 2.25e15
    assert extra == pytest.approx(draft.projection_s(8192))
    assert extra == pytest.approx(1.19e-3, rel=0.05)
    # linear in the tokens at this size: a 16384-token prefill costs about twice as much
    assert draft.projection_s(16384) == pytest.approx(2 * draft.projection_s(8192), rel=0.1)


def test_replicated_on_every_rank_so_tp_does_not_shrink_it() -> None:
    _, tp8 = _draft(8)
    _, tp4 = _draft(4)
    # nn.Linear, not a ColumnParallelLinear: every rank computes all 7168 output columns
    assert tp8.projection_s(4096) == pytest.approx(tp4.projection_s(4096))


def test_a_cuda_graph_pass_projects_its_padded_rows_and_an_idle_pass_nothing() -> None:
    inner, draft = _draft()
    # 5 requests × 3 tokens replayed in the graph captured for 6 requests: 18 rows
    graph = BatchShape(num_decode=15, decode_sum_kv=10_000, cuda_graph_bs=18)
    assert draft.step_time(graph).gpu_s - inner.step_time(graph).gpu_s == pytest.approx(draft.projection_s(18))
    eager = BatchShape(num_decode=15, decode_sum_kv=10_000)
    assert draft.step_time(eager).gpu_s - inner.step_time(eager).gpu_s == pytest.approx(draft.projection_s(15))
    assert draft.step_time(BatchShape()).gpu_s == inner.step_time(BatchShape()).gpu_s
    assert draft.projection_s(0) == 0.0
    assert draft.shapes is inner.shapes  # every other attribute is the inner model's


def test_eagle3_is_left_unchanged() -> None:
    inner, draft = _draft(algorithm="EAGLE3")
    assert draft is inner


def test_the_speculative_server_pays_it_in_each_draft_forward() -> None:
    target = build_latency_model(R1, B200, 8, "fp8", kv_cache_dtype="fp8_e4m3")
    inner, draft = _draft()
    cfg = SpeculativeConfig.from_settings(ServerSettings(speculative_algorithm="EAGLE", speculative_num_steps=2,
                                                         speculative_num_draft_tokens=3,
                                                         speculative_eagle_topk=1), R1.architecture)
    acc = AcceptanceModel(3, 0.7)
    with_proj = SpeculativeDecoding(cfg, target, draft, acc)
    without = SpeculativeDecoding(cfg, target, inner, acc)
    prefill = BatchShape(extend_lens=(1024, 1024), prefix_lens=(0, 0))
    # eagle_worker.py forward_batch_generation, extend branch: target extend, then forward_draft_extend over
    # the same 2048 tokens
    assert with_proj.step_time(prefill).gpu_s - without.step_time(prefill).gpu_s == pytest.approx(
        draft.projection_s(2048))
    # a decode iteration of 8 requests (graph for 8): num_steps − 1 = 1 draft step over 8 rows and the draft
    # extend over 8 × 3 = 24 rows
    decode = BatchShape(num_decode=8, decode_sum_kv=16_000, cuda_graph_bs=8)
    assert with_proj.step_time(decode).gpu_s - without.step_time(decode).gpu_s == pytest.approx(
        draft.projection_s(8) + draft.projection_s(24))


def test_it_copies_like_any_latency_model() -> None:
    # copy looks up __setstate__ on an instance whose __init__ has not run: the delegating __getattr__ must not
    # recurse through self.inner
    import copy

    _, draft = _draft()
    shape = BatchShape(extend_lens=(1024,), prefix_lens=(0,))
    for twin in (copy.copy(draft), copy.deepcopy(draft)):
        assert twin.step_time(shape) == draft.step_time(shape)
    with pytest.raises(AttributeError):
        draft.__no_such_dunder__  # noqa: B018
