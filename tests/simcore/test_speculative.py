"""Speculative decoding: acceptance distribution, online learning from ``accept len``, iteration pricing.

Sources: SGLang 0.5.23 ``arg_groups/speculative_hook.py`` (_auto_choose_speculative_params; draft tokens =
num_steps + 1 when topk is 1), ``managers/scheduler_components/metrics_reporter.py`` (``accept len`` =
accepted tokens / (requests × verify passes), bonus token included), SGLang 0.5.9 ``speculative/eagle_worker.py``
(draft steps, verify, draft extend).
"""
from __future__ import annotations

import random

import pytest

from simcore.models import load_model
from simcore.perf.base import LinearLatencyModel
from simcore.settings import ServerSettings
from simcore.speculative import (AcceptanceModel, OnlineAcceptance, SpeculativeConfig, draft_model_spec,
                                 speculative_decode_rate)


def test_acceptance_chain_by_hand() -> None:
    m = AcceptanceModel(max_len=4, accept_prob=0.5)  # 3 draft steps + bonus
    # P(L >= 1..4) = 1, .5, .25, .125 → pmf .5, .25, .125, .125; mean 1 + .5 + .25 + .125
    assert m.pmf() == pytest.approx((0.5, 0.25, 0.125, 0.125))
    assert m.mean() == pytest.approx(1.875)
    assert AcceptanceModel.from_mean(1.875, 4).accept_prob == pytest.approx(0.5, abs=1e-9)
    assert AcceptanceModel.from_mean(9.0, 4).accept_prob == pytest.approx(1.0)  # clamped to every draft accepted
    rng = random.Random(7)
    draws = [m.sample(rng) for _ in range(20000)]
    assert set(draws) == {1, 2, 3, 4}
    assert sum(draws) / len(draws) == pytest.approx(1.875, abs=0.03)


def test_online_acceptance_weights_lines_by_verify_passes() -> None:
    est = OnlineAcceptance(max_len=4, prior_mean=1.0, prior_weight=0.0, forgetting=1.0)
    est.observe(2.0, verify_passes=40)   # 1 request × 40 iterations
    est.observe(3.0, verify_passes=120)  # 3 requests × 40 iterations
    assert est.mean == pytest.approx((2.0 * 40 + 3.0 * 120) / 160)
    forgetful = OnlineAcceptance(max_len=4, prior_weight=0.0, forgetting=0.5)
    forgetful.observe(2.0, 40)
    forgetful.observe(3.0, 40)  # the first line decays by 0.5^40: gone
    assert forgetful.mean == pytest.approx(3.0, abs=1e-9)
    assert OnlineAcceptance(max_len=4, prior_mean=2.5).mean == 2.5  # before any line: the prior


def test_config_defaults_follow_sglang() -> None:
    assert SpeculativeConfig.from_settings(ServerSettings()) is None
    ds = SpeculativeConfig.from_settings(ServerSettings(speculative_algorithm="NEXTN"), "DeepseekV3ForCausalLM")
    assert (ds.num_steps, ds.eagle_topk, ds.num_draft_tokens) == (3, 1, 4)
    ll = SpeculativeConfig.from_settings(ServerSettings(speculative_algorithm="EAGLE"), "LlamaForCausalLM")
    assert (ll.num_steps, ll.eagle_topk, ll.num_draft_tokens, ll.max_accept_len) == (5, 4, 8, 6)
    adj = SpeculativeConfig("EAGLE", 3, 1, 16)  # topk 1 → num_steps + 1 draft tokens
    assert adj.num_draft_tokens == 4


def test_iteration_time_by_hand() -> None:
    target = LinearLatencyModel()  # 5 ms + 0.1 ms per extend token + 10 µs per decode row + 10 ns per KV token
    draft = LinearLatencyModel(base_s=0.001)
    cfg = SpeculativeConfig("EAGLE", 3, 1, 4)
    it = cfg.iteration_time(target, draft, batch=2, sum_kv=2000, accept_len=2.0)
    # 0.5.9 eagle_worker.py: draft_forward runs num_steps − 1 = 2 draft decodes (its loop breaks before the last
    # forward), verify = one target pass over 4 tokens per request, forward_draft_extend_after_decode = one
    # draft pass over num_steps + 1 = 4 tokens per request
    # verify and draft extend are decode-like passes (TARGET_VERIFY / DRAFT_EXTEND): 2 × 4 rows, each request's
    # 1000 KV tokens read once
    draft_step = 0.001 + 2 * 1e-5 + 2000 * 1e-8      # 2 rows over 1000 KV tokens each
    verify = 0.005 + 8 * 1e-5 + 2000 * 1e-8           # 2 requests × 4 draft tokens
    extend = 0.001 + 8 * 1e-5 + 2000 * 1e-8           # 2 requests × (3 + 1) tokens
    assert it.gpu_s == pytest.approx(2 * draft_step + verify + extend)
    assert speculative_decode_rate(cfg, target, draft, 2, 2000, 2.0, overlap=True) == pytest.approx(
        2.0 / (2 * draft_step + verify + extend))


def test_draft_model_is_one_layer_of_the_target() -> None:
    ds = load_model("deepseek-ai/DeepSeek-V3")
    mtp = draft_model_spec(ds, "NEXTN")
    assert (mtp.num_layers, mtp.num_moe_layers, mtp.hidden_size, mtp.vocab_size) == (1, 1, 7168, ds.vocab_size)
    dense = draft_model_spec(load_model("Qwen/Qwen3-32B"), "EAGLE")
    assert (dense.num_layers, dense.num_dense_layers) == (1, 1)
