"""--scheduler-recv-interval: the scheduler polls for new requests only every N decode passes.

SGLang 0.5.9 ``managers/scheduler.py`` ``Scheduler.recv_requests``: with ``--scheduler-recv-interval`` > 1
(``SchedulerRecvSkipper.maybe_create``) a pass first calls ``recv_skipper.handle(last_batch.forward_mode)``
(``managers/scheduler_recv_skipper.py``): the counter grows by the weight of the previous pass's batch
(``SGLANG_SCHEDULER_RECV_SKIPPER_WEIGHT_DECODE`` = 1, ``..._NONE`` = 1 for no batch, ``..._DEFAULT`` = 1000 for
any other mode, ``environ.py``) and the pass polls the socket, resetting the counter to 0, once it reaches the
interval; otherwise ``recv_requests`` returns ``[]``. InferenceX launches DeepSeek-R1 on B200 with 10 (C < 16) or
30 (``benchmarks/single_node/dsr1_fp8_b200.sh``).

Latency model of ``serverkit.LAT`` (GPU step 10 ms + 0.1 ms per prefilled token, no CPU time) and no overlap,
so every number below follows by hand.
"""
from __future__ import annotations

import math

import pytest

from simcore.benchmark_clients import BenchServingOpenLoop
from simcore.engine import simulate
from simcore.perf.base import LinearLatencyModel
from simcore.server_flags import parse_server_args
from simcore.settings import ServerSettings, resolve

from serverkit import mixed_workload, req, run, snapshot_and_resume

GiB = 1024**3


def test_an_arrival_waits_for_the_next_poll() -> None:
    # a (100 tokens) is prefilled 0 → 20 ms, then decodes 10 ms a step. b arrives at 25 ms.
    # Passes: t=20 ms follows a prefill (weight 1000): polls, counter 0, nothing there yet; decode 20 → 30.
    # t=30: counter 1, 40: 2, 50: 3, 60: 4 (no poll); t=70: 5 → poll, b is ingested and prefilled 70 → 90 ms.
    reqs = [req("a", 0.0, 100, 20), req("b", 0.025, 100, 3)]
    every = run(reqs, disable_overlap_schedule=True).records["b"]
    skip = run(reqs, disable_overlap_schedule=True, scheduler_recv_interval=5).records["b"]
    assert every.ttft_s == pytest.approx(0.030 + 0.020 - 0.025)  # polled at the 30 ms pass
    assert skip.queue_time_s == pytest.approx(0.070 - 0.025)
    assert skip.ttft_s == pytest.approx(0.090 - 0.025)


def test_an_idle_server_polls_at_once() -> None:
    # idle passes add 1 each and take microseconds: a request reaching an idle server is received immediately
    r = run([req("a", 1.0, 100, 3)], disable_overlap_schedule=True, scheduler_recv_interval=30).records["a"]
    assert r.ttft_s == pytest.approx(0.020)


def test_requests_pile_up_between_polls_and_prefill_together() -> None:
    # a decodes from 20 ms; b, c, d arrive at 31, 42, 53 ms; the interval-5 poll at 70 ms takes all three at once
    reqs = [req("a", 0.0, 100, 30)] + [req(x, t, 100, 3) for x, t in (("b", 0.031), ("c", 0.042), ("d", 0.053))]
    res = run(reqs, disable_overlap_schedule=True, scheduler_recv_interval=5)
    prefills = [s for s in res.steps if s.shape.extend_lens]
    assert prefills[1].start_s == pytest.approx(0.070) and prefills[1].shape.extend_lens == (100, 100, 100)
    # 70 ms + 10 ms + 300 tokens × 0.1 ms = 110 ms for all three first tokens
    assert [res.records[x].first_token_s for x in "bcd"] == pytest.approx([0.110] * 3)


@pytest.mark.parametrize("overlap", [True, False])
def test_fast_path_is_off_and_results_equal_the_step_by_step_loop(overlap: bool) -> None:
    kw = dict(scheduler_recv_interval=7, disable_overlap_schedule=not overlap)
    fast = run(mixed_workload(), fast=True, check=False, **kw)
    slow = run(mixed_workload(), fast=False, check=False, **kw)
    assert fast.server.decode_runs is False and fast.server.run_steps == 0
    assert [(r.rid, r.first_token_s, r.finish_s) for r in fast.server.records] == \
        [(r.rid, r.first_token_s, r.finish_s) for r in slow.server.records]
    base = run(mixed_workload(), fast=False, check=False, disable_overlap_schedule=not overlap)
    mean = lambda rs: sum(r.ttft_s for r in rs) / len(rs)  # noqa: E731
    # skipped polls only ever delay arrivals (with a prefill every ~10 ms nearly every pass polls anyway)
    assert mean(fast.server.records) >= mean(base.server.records)


def test_the_flag_parses_and_defaults_to_every_pass() -> None:
    assert parse_server_args("--scheduler-recv-interval 30", "test")["scheduler_recv_interval"] == 30
    assert ServerSettings().scheduler_recv_interval == 1


def test_bench_serving_warm_up_is_a_barrier_of_copies_of_the_first_request() -> None:
    # InferenceX's benchmark_serving: --num-warmups W copies of input_requests[0] under the --max-concurrency
    # semaphore, awaited with asyncio.gather before the run. Every step 10 ms; a request of 3 output tokens takes
    # 3 steps = 30 ms. W = 3, C = 2: warm-up 0, 1 at 0 → 30 ms; 2 at 30 → 60 ms; the run's 2 requests leave at 60 ms.
    flat = LinearLatencyModel(base_s=0.01, per_extend_token_s=0.0, per_decode_req_s=0.0, per_kv_token_s=0.0)
    wl = BenchServingOpenLoop(math.inf, 2, 10, 3, range_ratio=1.0, max_concurrency=2, warmup_requests=3)
    res = simulate(resolve(ServerSettings(disable_overlap_schedule=True), 80 * GiB), flat, wl,
                   kv_capacity_tokens=10_000)
    recs = sorted(res.records, key=lambda r: int(r.rid.split("-")[1]))
    assert [r.arrival_s for r in recs] == pytest.approx([0.0, 0.0, 0.03, 0.06, 0.06])
    assert wl.phase_start_s == pytest.approx(0.06)
    assert {(r.input_len, r.output_len) for r in recs[:3]} == {(wl.input_lens[0], wl.output_lens[0])}


@pytest.mark.parametrize("cut_s", [0.105, 0.173, 0.251])
def test_snapshot_keeps_the_poll_counter(cut_s: float) -> None:
    # long decodes, sparse arrivals: the cut falls between polls, so a resumed server that forgot the counter would
    # poll at other passes; with the counter and the last batch's kind in the snapshot it polls at the same ones
    s = resolve(ServerSettings(scheduler_recv_interval=6), 80 * GiB)
    reqs = [req("a", 0.0, 100, 60)] + [req(f"b{i}", 0.047 + 0.061 * i, 50, 20) for i in range(5)]
    r = snapshot_and_resume(s, reqs, cut_s)
    assert "recv_counter" in r.snapshot and r.resumed_records == r.whole_records
