"""Priority scheduling and preemption (sglang-internals.md §2.9, §2.4) and ``prefill_max_requests`` (§2.11).

Latency model of ``serverkit.LAT`` (GPU step 10 ms + 0.1 ms per prefilled token, no CPU time), overlap off,
so a 100-token prefill takes 20 ms and a decode step 10 ms. Prompts have no reusable content (key None).
"""
from __future__ import annotations

import json

import pytest
import simpy

from simcore.errors import UserError
from simcore.perf.base import LinearLatencyModel
from simcore.server import Server
from simcore.settings import ServerSettings, resolve

from serverkit import run, req, snapshot_and_resume

PRIO = dict(enable_priority_scheduling=True, schedule_policy="fcfs", disable_overlap_schedule=True)


def _pair(high_priority: int, **settings: object):
    """``low`` (priority 0, 10 outputs) runs alone (max_running_requests=1); ``high`` arrives at 25 ms."""
    reqs = [req("low", 0.0, 100, 10, priority=0), req("high", 0.025, 100, 3, priority=high_priority)]
    return run(reqs, max_running_requests=1, **settings)


def test_much_more_urgent_request_preempts_the_running_one() -> None:
    res = _pair(20, **PRIO)
    low, high = res.records["low"], res.records["high"]
    # low: prefill 0–20 ms (token 1), decode 20–30 ms (token 2). At 30 ms high is seen; the batch is full
    # (1 running of 1) and 20 − 0 > threshold 10 → low is released (KV freed, not cached) and requeued.
    # high: prefill 30–50 ms (first token at 50 ms), decodes 50–60, 60–70 → finishes at 70 ms.
    assert (high.first_token_s, high.finish_s) == pytest.approx((0.050, 0.070))
    # low re-prefills prompt + its 2 tokens (102 tokens: 10 + 10.2 ms) from 70 ms, sampling token 3 at 90.2 ms,
    # then 7 decode steps: finishes at 160.2 ms; its first token stays the one of 20 ms
    assert (low.first_token_s, low.finish_s) == pytest.approx((0.020, 0.1602))
    assert (low.num_retractions, high.num_retractions) == (1, 0)
    assert res.server.num_preemptions == 1 and res.server.num_retractions == 0
    assert [s.shape.extend_lens for s in res.steps if s.shape.mode == "prefill"] == [(100,), (100,), (102,)]


def test_without_priority_the_late_request_waits() -> None:
    res = _pair(20, disable_overlap_schedule=True)
    # low runs to the end: 20 ms prefill + 9 decodes = 110 ms; high then prefills 110–130 ms, finishes 150 ms
    assert res.records["low"].finish_s == pytest.approx(0.110)
    assert (res.records["high"].first_token_s, res.records["high"].finish_s) == pytest.approx((0.130, 0.150))
    assert res.server.num_preemptions == 0


@pytest.mark.parametrize("settings", [
    dict(PRIO),                                                       # priority 10: 10 − 0 is not > 10
    dict(PRIO, disable_priority_preemption=True),                     # preemption off (priority 20 below)
    dict(PRIO, priority_scheduling_preemption_threshold=25),          # threshold raised above 20
])
def test_no_preemption_below_the_threshold_or_when_disabled(settings: dict) -> None:
    res = _pair(10 if settings == PRIO else 20, **settings)
    assert res.server.num_preemptions == 0
    assert res.records["low"].finish_s == pytest.approx(0.110)
    assert res.records["high"].first_token_s == pytest.approx(0.130)


def test_low_values_first_flips_who_preempts() -> None:
    # with --schedule-low-priority-values-first, priority −20 is the urgent one: (−20 − 0) × (−1) = 20 > 10
    res = _pair(-20, schedule_low_priority_values_first=True, **PRIO)
    assert res.records["high"].first_token_s == pytest.approx(0.050)
    assert res.server.num_preemptions == 1
    # and +20 is the least urgent: no preemption
    assert _pair(20, schedule_low_priority_values_first=True, **PRIO).server.num_preemptions == 0


def test_a_request_without_priority_is_the_least_preferred() -> None:
    # §2.4: no priority → −sys.maxsize − 1, so priority 5 preempts it although 5 − 0 would not be > 10
    reqs = [req("low", 0.0, 100, 10), req("high", 0.025, 100, 3, priority=5)]
    res = run(reqs, max_running_requests=1, **PRIO)
    assert res.records["high"].first_token_s == pytest.approx(0.050)  # same timeline as the priority-20 case
    assert res.server.num_preemptions == 1
    # with low values first the missing priority is +sys.maxsize: still the least preferred (5 preempts it)
    flipped = run(reqs, max_running_requests=1, schedule_low_priority_values_first=True, **PRIO)
    assert flipped.server.num_preemptions == 1
    # and in the queue it comes after every request that gave one, even a negative priority
    q = [req("a", 0.0, 100, 2, priority=0), req("none", 0.001, 100, 2), req("neg", 0.002, 100, 2, priority=-3)]
    rec = run(q, max_running_requests=1, **PRIO).records
    assert rec["neg"].first_token_s == pytest.approx(0.050) and rec["none"].first_token_s == pytest.approx(0.080)


def _queue(**settings: object) -> dict:
    """a runs alone (2 outputs: prefill 0–20 ms, decode 20–30 ms); b (priority 1) and c (priority 5) wait."""
    reqs = [req("a", 0.0, 100, 2, priority=0), req("b", 0.001, 100, 2, priority=1),
            req("c", 0.002, 100, 2, priority=5)]
    return run(reqs, max_running_requests=1, **{"disable_overlap_schedule": True, **settings}).records


def test_priority_orders_the_queue() -> None:
    # from 30 ms one request at a time, 30 ms each (20 ms prefill + one decode): first tokens at 50 and 80 ms
    fcfs = _queue()
    assert (fcfs["b"].first_token_s, fcfs["c"].first_token_s) == pytest.approx((0.050, 0.080))
    prio = _queue(**PRIO)  # c (5) before b (1); 5 − 0 ≤ 10: a is not preempted
    assert (prio["c"].first_token_s, prio["b"].first_token_s) == pytest.approx((0.050, 0.080))
    low_first = _queue(schedule_low_priority_values_first=True, **PRIO)  # b (1) before c (5)
    assert (low_first["b"].first_token_s, low_first["c"].first_token_s) == pytest.approx((0.050, 0.080))
    lof = _queue(enable_priority_scheduling=True, schedule_policy="lof", disable_overlap_schedule=False)
    assert lof["c"].first_token_s < lof["b"].first_token_s


def test_equal_priorities_keep_arrival_order() -> None:
    reqs = [req("a", 0.0, 100, 2, priority=3), req("b", 0.001, 100, 2, priority=3),
            req("c", 0.002, 100, 2, priority=3)]
    rec = run(reqs, max_running_requests=1, **PRIO).records
    assert rec["a"].first_token_s < rec["b"].first_token_s < rec["c"].first_token_s


def test_priority_scheduling_needs_fcfs_or_lof() -> None:
    with pytest.raises(UserError) as e:
        ServerSettings(enable_priority_scheduling=True, schedule_policy="lpm")
    assert e.value.field == "enable_priority_scheduling"
    ServerSettings(enable_priority_scheduling=True)  # default policy fcfs (0.5.9)
    with pytest.raises(UserError):
        ServerSettings(enable_priority_scheduling=True, sglang_version="0.4.3")  # 0.4.3's default is lpm


def test_prefill_max_requests_caps_one_prefill_batch() -> None:
    reqs = [req(f"r{i}", 0.0, 100, 2) for i in range(3)]
    capped = run(reqs, prefill_max_requests=2, disable_overlap_schedule=True)
    assert [s.shape.extend_lens for s in capped.steps if s.shape.mode == "prefill"] == [(100, 100), (100,)]
    free = run(reqs, disable_overlap_schedule=True)
    assert [s.shape.extend_lens for s in free.steps if s.shape.mode == "prefill"] == [(100, 100, 100)]


def _workload() -> list:
    import random

    rnd = random.Random(11)
    out = []
    for i in range(120):
        n = rnd.randint(10, 700)
        m = rnd.randint(1, 300)
        base = (i % 4) * 10_000
        out.append(req(f"r{i}", i * 0.01, n, m, max_new=m + 50 if i % 2 else -1,
                       key=list(range(base, base + n)), priority=50 if i % 10 == 9 else i % 7))
    return out


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("policy", ["fcfs", "lof"])
def test_fast_path_equals_step_by_step_with_priorities_and_refresh(overlap: bool, policy: str) -> None:
    kw = dict(cap=2500, chunked_prefill_size=512, schedule_policy=policy, disable_overlap_schedule=not overlap,
              enable_priority_scheduling=True, sglang_version="0.5.23", max_running_requests=4,
              lat=LinearLatencyModel(cpu_s=0.001), check=False)
    fast = run(_workload(), fast=True, **kw)
    slow = run(_workload(), fast=False, **kw)
    assert fast.server.num_preemptions > 0 and fast.server.refresh_calls > 32
    assert sorted(fast.server.records, key=lambda r: r.rid) == sorted(slow.server.records, key=lambda r: r.rid)
    assert [(s.start_s, s.shape) for s in fast.steps] == [(s.start_s, s.shape) for s in slow.steps]


def test_invariants_hold_under_preemption() -> None:
    res = run(_workload(), cap=2500, chunked_prefill_size=512, enable_priority_scheduling=True,
              max_running_requests=4, check=True)
    assert res.server.num_preemptions > 0 and len(res.records) == 120


@pytest.mark.parametrize("cut_s", [0.4, 1.3])
def test_snapshot_restore_continues_exactly_with_priorities_and_refresh(cut_s: float) -> None:
    s = resolve(ServerSettings(chunked_prefill_size=512, enable_priority_scheduling=True, sglang_version="0.5.23",
                               max_running_requests=4), 80 * 1024**3)
    r = snapshot_and_resume(s, _workload(), cut_s)
    assert r.snapshot["refresh_calls"] > 0
    assert r.resumed_records == r.whole_records
    assert r.second.num_preemptions == r.whole.num_preemptions > 0  # the counter is part of the snapshot


def test_snapshot_without_the_new_fields_still_restores() -> None:
    s = resolve(ServerSettings(), 80 * 1024**3)
    env = simpy.Environment()
    srv = Server(env, s, 5000, LinearLatencyModel(cpu_s=0.001))
    srv.submit(req("a", 0.0, 100, 20))
    env.run(until=0.05)
    snap = json.loads(json.dumps(srv.snapshot()))
    del snap["refresh_calls"], snap["num_preemptions"]  # a snapshot written before these existed
    env2 = simpy.Environment(initial_time=env.now)
    back = Server.restore(env2, snap, s, LinearLatencyModel(cpu_s=0.001))
    env2.run()
    assert (back.refresh_calls, back.num_preemptions) == (0, 0)
    assert [r.rid for r in back.records] == ["a"] and back.records[0].output_len == 20
