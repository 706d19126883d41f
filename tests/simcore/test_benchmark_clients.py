"""simcore.benchmark_clients: aiperf's warm-up barrier, bench_serving's random dataset, the lockstep index.

Sources: ai-dynamo/aiperf src/aiperf/timing/phase_orchestrator.py (PhaseOrchestrator._execute_phases: a
non-seamless phase returns only after all its responses) and src/aiperf/timing/config.py
(CreditPhaseConfig.seamless = False; _build_credit_phase_config: excluded warm-up phases get an infinite grace
period); sglang python/sglang/bench_serving.py (sample_random_requests / compute_random_lens, get_request).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from simcore.benchmark_clients import AiperfClosedLoop, BenchServingOpenLoop, bench_serving_lengths, lockstep_index
from simcore.engine import simulate
from simcore.perf.base import LinearLatencyModel
from simcore.settings import ServerSettings, resolve
from simcore.workload import ClosedLoop

GiB = 1024**3
# every step 10 ms whatever it holds, host time 0, results applied before the next step
FLAT = LinearLatencyModel(base_s=0.01, per_extend_token_s=0.0, per_decode_req_s=0.0, per_kv_token_s=0.0)
SERIAL = resolve(ServerSettings(disable_overlap_schedule=True), 80 * GiB)


def _arrivals(workload) -> list[float]:
    res = simulate(SERIAL, FLAT, workload, kv_capacity_tokens=10_000)
    return [r.arrival_s for r in sorted(res.records, key=lambda r: int(r.rid.split("-")[1]))]


def test_profiling_starts_when_every_warm_up_response_is_back() -> None:
    # 2 clients, 3 warm-up + 2 profiled requests of 10 prompt / 3 output tokens; a request takes 3 steps (prefill,
    # 2 decodes) = 30 ms. Warm-up: req0, req1 at 0 → done 0.03; req2 at 0.03 → done 0.06 (the other client idles:
    # nothing left in its phase). Barrier at 0.06: req3 and req4 leave together.
    wl = AiperfClosedLoop(2, 3, 2, 10, 3)
    assert _arrivals(wl) == pytest.approx([0.0, 0.0, 0.03, 0.06, 0.06])
    assert wl.phase_start_s == pytest.approx(0.06)
    # one continuous loop instead: the idle client sends req3 at 0.03 beside req2, req4 follows at 0.06
    assert _arrivals(ClosedLoop(2, 5, 10, 3)) == pytest.approx([0.0, 0.0, 0.03, 0.03, 0.06])


def test_no_warm_up_is_a_plain_closed_loop() -> None:
    a = AiperfClosedLoop(3, 0, 9, 10, 4)
    assert _arrivals(a) == pytest.approx(_arrivals(ClosedLoop(3, 9, 10, 4)))
    assert a.phase_start_s == 0.0


def test_bench_serving_length_bounds_per_version() -> None:
    # inputs: randint(max(int(I·r), 1), I + 1) → [25, 100] for I = 100, r = 0.25 in every version
    ins, _ = bench_serving_lengths(100, 10, 4000, 0.25, np.random.RandomState(1), "0.5.9")
    assert min(ins) == 25 and max(ins) == 100
    # outputs with O = 10, r = 0.05: int(0.5) = 0. Up to 0.5.6 randint(0, 11): 0 and 1 both end as 1 token
    # (P = 2/11 = 0.182); from 0.5.8 randint(1, 11): P(1) = 1/10
    _, old = bench_serving_lengths(100, 10, 20000, 0.05, np.random.RandomState(2), "0.5.3")
    _, new = bench_serving_lengths(100, 10, 20000, 0.05, np.random.RandomState(2), "0.5.8")
    assert min(old) == min(new) == 1 and max(old) == max(new) == 10
    assert np.mean(np.asarray(old) == 1) == pytest.approx(2 / 11, abs=0.01)
    assert np.mean(np.asarray(new) == 1) == pytest.approx(1 / 10, abs=0.01)
    # range ratio 1.0: exactly the given lengths
    ins, outs = bench_serving_lengths(100, 10, 50, 1.0, np.random.RandomState(3), "0.5.9")
    assert set(ins) == {100} and set(outs) == {10}


def test_bench_serving_seed_poisson_and_overhead() -> None:
    a = BenchServingOpenLoop(4.0, 4000, 100, 10, range_ratio=0.5, seed=1, prompt_overhead_tokens=3)
    b = BenchServingOpenLoop(4.0, 4000, 100, 10, range_ratio=0.5, seed=1, prompt_overhead_tokens=3)
    c = BenchServingOpenLoop(4.0, 4000, 100, 10, range_ratio=0.5, seed=2, prompt_overhead_tokens=3)
    assert (a.input_lens, a.offsets_s) == (b.input_lens, b.offsets_s) and a.input_lens != c.input_lens
    assert min(a.input_lens) == 53 and max(a.input_lens) == 103  # [50, 100] + 3 template tokens
    gaps = np.diff(a.offsets_s)
    assert a.offsets_s[0] == 0.0 and gaps.mean() == pytest.approx(0.25, rel=0.05)  # 1 / rate
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.08)  # exponential: CV 1
    assert BenchServingOpenLoop(math.inf, 5, 10, 3).offsets_s == [0.0] * 5


def test_a_client_tokenizer_mismatch_scales_what_the_server_receives() -> None:
    # InferenceX's B300 client counted prompts with transformers 5's broken DeepSeek tokenizer; the server saw 5.18
    # tokens per counted token (validation/client_tokenizer_inflation.py). Same draws, each length × 5.18, rounded,
    # then the template tokens; the output lengths and the arrival times are the client's own and do not change.
    plain = BenchServingOpenLoop(4.0, 50, 8192, 1024, range_ratio=0.8, seed=0)
    wide = BenchServingOpenLoop(4.0, 50, 8192, 1024, range_ratio=0.8, seed=0, server_tokens_per_prompt_token=5.18,
                                prompt_overhead_tokens=2)
    assert wide.input_lens == [round(n * 5.18) + 2 for n in plain.input_lens]
    assert min(plain.input_lens) >= 6553 and min(wide.input_lens) >= round(6553 * 5.18) + 2
    assert (wide.output_lens, wide.offsets_s) == (plain.output_lens, plain.offsets_s)
    assert BenchServingOpenLoop(math.inf, 3, 1, 1, range_ratio=1.0, server_tokens_per_prompt_token=0.2).input_lens == [1] * 3
    with pytest.raises(ValueError, match="server_tokens_per_prompt_token"):
        BenchServingOpenLoop(math.inf, 3, 10, 1, server_tokens_per_prompt_token=0.0)


def test_bench_serving_max_concurrency_holds_requests_until_a_slot_frees() -> None:
    # rate inf, 4 requests of 10 / 3 tokens (ratio 1.0), --max-concurrency 2: two at 0, two when they finish
    wl = BenchServingOpenLoop(math.inf, 4, 10, 3, range_ratio=1.0, max_concurrency=2)
    assert _arrivals(wl) == pytest.approx([0.0, 0.0, 0.03, 0.03])


def test_lockstep_index_hand_computed() -> None:
    # two rounds of one 4-request wave: bursts [4, 4] → (16 + 16) / 8 / 4 = 1.0
    assert lockstep_index([0, 0, 0, 0, 1, 1, 1, 1], 4, 0.1) == 1.0
    # nobody arrives together: four bursts of 1 → 4 / 4 / 4 = 1/C
    assert lockstep_index([0.0, 0.5, 1.0, 1.5], 4, 0.1) == 0.25
    # bursts [2, 1, 1] with C = 2: (4 + 1 + 1) / 4 / 2 = 0.75; arrivals 0.05 apart chain inside a 0.1 window
    assert lockstep_index([0.0, 0.0, 1.0, 2.0], 2, 0.1) == 0.75
    assert lockstep_index([0.0, 0.05, 0.1], 3, 0.1) == 1.0
    assert lockstep_index([], 4, 0.1) == 0.0


def test_lockstep_of_a_simulated_closed_loop() -> None:
    # identical requests from clients that start together finish together and resend together: index 1.0
    res = simulate(SERIAL, FLAT, AiperfClosedLoop(4, 0, 12, 10, 3), kv_capacity_tokens=10_000)
    assert lockstep_index([r.arrival_s for r in res.records], 4, 0.005) == 1.0
