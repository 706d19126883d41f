"""The overlap loop's first-token wait for the next eager launch (simcore.perf.launch_queue, docs/accuracy.md §3.4).

SGLang 0.5.1.post1 reads batch N's results only after batch N + 1's ``launch_done`` (``managers/scheduler.py``
``event_loop_overlap`` 795-829 → ``tp_worker_overlap_thread.py`` ``resolve_last_batch_result`` 207-217, set in
``tp_worker.py`` 239-243 after ``model_runner.forward``); a CUDA stream holds ~1,024 pending commands (NVIDIA forums
t/68937), so an eager forward of more commands returns only once the GPU has run its first ones.
"""
from __future__ import annotations

from typing import Any

import pytest

from simcore.models import load_model
from simcore.perf.base import LinearLatencyModel
from simcore.perf.launch_queue import (PENDING_LAUNCH_LIMIT, forward_commands, launch_wait_fraction, layer_commands,
                                       step_model)
from tests.simcore.serverkit import req, run

QWEN3_32B = load_model("Qwen/Qwen3-32B")


def test_qwen3_32b_commands_by_hand() -> None:
    # 11 (norms, 4 GEMMs, RoPE, K/V stores, attention, SiLU-and-mul) + 4 (q/k copies and norms, qwen3.py
    # _apply_qk_norm) + 2 all-reduces × 2 forward-stream commands (TP > 1)
    assert QWEN3_32B.num_layers == 64
    assert layer_commands(QWEN3_32B, 2) == 19
    assert layer_commands(QWEN3_32B, 8) == 19
    assert forward_commands(QWEN3_32B, 4) == 64 * 19 + 35 == 1251
    # 64 × 19 − 1,024 = 192 of the 1,216 layer commands have run when the launch returns
    assert launch_wait_fraction(QWEN3_32B, 2) == pytest.approx(192 / 1216)
    assert launch_wait_fraction(QWEN3_32B, 2) == pytest.approx(0.1579, abs=1e-4)
    # TP 1: no all-reduce, 64 × 15 + 25 = 985 commands fit in the queue: the launch returns before the GPU starts
    assert layer_commands(QWEN3_32B, 1) == 15
    assert forward_commands(QWEN3_32B, 1) == 985 < PENDING_LAUNCH_LIMIT
    assert launch_wait_fraction(QWEN3_32B, 1) == 0.0


def test_llama_layer_has_no_qk_norm() -> None:
    m70 = load_model("meta-llama/Meta-Llama-3.1-70B")
    m405 = load_model("meta-llama/Meta-Llama-3.1-405B")
    assert layer_commands(m70, 4) == 15
    assert launch_wait_fraction(m70, 4) == pytest.approx((80 * 15 - 1024) / (80 * 15))   # 0.147
    assert launch_wait_fraction(m405, 8) == pytest.approx((126 * 15 - 1024) / (126 * 15))  # 0.458
    # a smaller queue would make the wait longer, a larger one shorter
    assert launch_wait_fraction(m70, 4, limit=2048) == 0.0


def test_moe_and_mla_layers_are_not_counted() -> None:
    for name in ("Qwen/Qwen3-235B-A22B", "deepseek-ai/DeepSeek-V3"):
        m = load_model(name)
        assert layer_commands(m, 8) is None and forward_commands(m, 8) is None
        assert launch_wait_fraction(m, 8) == 0.0


class _Priced(LinearLatencyModel):
    """The serverkit's linear step times, declared as a Qwen3-32B forward at ``tp`` (what step_model looks for)."""

    def __init__(self, tp: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.model = QWEN3_32B
        self.tp = tp


def _lat(tp: int) -> _Priced:
    # every GPU step 10 ms + 0.1 ms per extend token, no CPU time
    return _Priced(tp, base_s=0.01, per_extend_token_s=1e-4, per_prefix_token_s=0.0, per_decode_req_s=0.0,
                   per_kv_token_s=0.0, cpu_s=0.0)


def test_step_model_unwraps_only_step_models() -> None:
    lat = _lat(2)
    assert step_model(lat) is lat
    assert step_model(LinearLatencyModel(0.01, 0.0, 0.0, 0.0, 0.0)) is None


def test_first_token_waits_for_the_next_chunks_launch() -> None:
    # a (5,000 tokens) and b (10,000) arrive together; chunk 1 = a + 3,192 tokens of b, chunk 2 = b's other 6,808.
    # Chunk 1 runs 0.01 + 0.8192 = 0.8292 s; chunk 2 starts at 0.8292 and runs 0.01 + 0.6808 = 0.6908 s.
    reqs = [req("a", 0.0, 5000, 2), req("b", 0.0, 10000, 2)]
    kw = dict(chunked_prefill_size=8192)
    tp1 = run(reqs, lat=_lat(1), **kw).records  # φ = 0: a's first token at chunk 1's GPU end
    assert tp1["a"].first_token_s == pytest.approx(0.8292)
    tp2 = run(reqs, lat=_lat(2), **kw).records  # φ = 192/1216: after chunk 2's launch has returned
    assert tp2["a"].first_token_s == pytest.approx(0.8292 + 192 / 1216 * 0.6908)
    # b's first token: chunk 2 is followed by a CUDA-graph decode, whose launch returns at once
    assert tp2["b"].first_token_s == pytest.approx(tp1["b"].first_token_s) == pytest.approx(0.8292 + 0.6908)
    # without overlap scheduling results are applied before the next launch: no wait
    off = run(reqs, lat=_lat(2), disable_overlap_schedule=True, **kw).records
    assert off["a"].first_token_s == pytest.approx(0.8292)


def test_fast_path_equals_step_by_step_with_the_wait() -> None:
    reqs = [req(f"r{i}", 0.002 * i, 3000 + 500 * i, 20) for i in range(12)]
    fast = run(reqs, lat=_lat(4), chunked_prefill_size=4096).records
    slow = run(reqs, lat=_lat(4), chunked_prefill_size=4096, fast=False).records
    assert {k: (v.first_token_s, v.finish_s) for k, v in fast.items()} == \
        {k: (v.first_token_s, v.finish_s) for k, v in slow.items()}
    assert any(fast[k].first_token_s != run(reqs, lat=_lat(1), chunked_prefill_size=4096).records[k].first_token_s
               for k in fast)
