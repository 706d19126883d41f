"""simcore.analysis: SLO attainment, Pareto fronts and the max-rate search, on hand-computed cases.

Objectives in the Pareto cases read as (throughput per GPU: maximise, latency: minimise).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.analysis import dominates, max_rate_under_slo, pareto_front, slo_attainment

UP_DOWN = [True, False]


@dataclass
class Rec:
    arrival_s: float
    finish_s: float
    ttft_s: float
    tpot_s: float | None
    aborted: bool = False


# ---- SLO attainment ----------------------------------------------------------------------------------------
def test_slo_fractions_both_and_goodput() -> None:
    recs = [
        Rec(0.0, 2.0, ttft_s=0.10, tpot_s=0.020),  # meets both
        Rec(1.0, 3.0, ttft_s=0.60, tpot_s=0.020),  # misses TTFT
        Rec(2.0, 4.0, ttft_s=0.20, tpot_s=0.080),  # misses TPOT
        Rec(3.0, 5.0, ttft_s=0.50, tpot_s=0.050),  # exactly on both thresholds: met (inclusive)
    ]
    rep = slo_attainment(recs, ttft_slo_s=0.5, tpot_slo_s=0.05)
    assert (rep.ttft_ok, rep.tpot_ok, rep.both_ok) == (0.75, 0.75, 0.5)
    # 2 requests meet both over the span 0 s .. 5 s
    assert rep.goodput_rps == pytest.approx(2 / 5.0)
    assert (rep.ttft_slo_ms, rep.tpot_slo_ms, rep.num_requests) == (500.0, 50.0, 4)


def test_slo_only_ttft_given_and_single_token_and_aborted() -> None:
    recs = [
        Rec(0.0, 1.0, ttft_s=0.1, tpot_s=None),   # one output token: no TPOT, meets any TPOT SLO
        Rec(0.0, 1.0, ttft_s=0.1, tpot_s=9.0),    # slow TPOT, but no TPOT SLO given
        Rec(0.0, 1.0, ttft_s=0.1, tpot_s=0.01, aborted=True),  # aborted: meets nothing
        Rec(0.0, 4.0, ttft_s=0.3, tpot_s=0.01),
    ]
    rep = slo_attainment(recs, ttft_slo_s=0.2)
    assert rep.tpot_ok is None and rep.tpot_slo_ms is None
    assert rep.ttft_ok == 0.5 and rep.both_ok == 0.5
    assert rep.goodput_rps == pytest.approx(2 / 4.0)
    only_tpot = slo_attainment(recs, tpot_slo_s=0.02)
    assert only_tpot.ttft_ok is None and only_tpot.tpot_ok == 0.5  # the None, the last; not 9 s, not aborted


def test_slo_of_no_requests_is_zero() -> None:
    rep = slo_attainment([], ttft_slo_s=1.0)
    assert (rep.num_requests, rep.ttft_ok, rep.both_ok, rep.goodput_rps) == (0, 0.0, 0.0, 0.0)


# ---- Pareto front ------------------------------------------------------------------------------------------
def test_pareto_hand_computed() -> None:
    pts = [
        [100.0, 50.0],   # 0: on the front (best latency among the fast ones)
        [200.0, 80.0],   # 1: on the front
        [150.0, 90.0],   # 2: dominated by 1 (less throughput, more latency)
        [200.0, 100.0],  # 3: dominated by 1 (same throughput, more latency)
        [50.0, 50.0],    # 4: dominated by 0 (same latency, less throughput)
        [300.0, 200.0],  # 5: on the front (most throughput)
    ]
    assert pareto_front(pts, UP_DOWN) == [0, 1, 5]
    assert dominates(pts[1], pts[2], UP_DOWN) and not dominates(pts[2], pts[1], UP_DOWN)
    assert dominates(pts[1], pts[3], UP_DOWN) and dominates(pts[0], pts[4], UP_DOWN)


def test_pareto_ties_are_all_kept() -> None:
    pts = [[10.0, 5.0], [10.0, 5.0], [9.0, 6.0]]
    assert not dominates(pts[0], pts[1], UP_DOWN)  # equal points do not dominate each other
    assert pareto_front(pts, UP_DOWN) == [0, 1]


def test_pareto_three_objectives_and_missing_values() -> None:
    up_down_down = [True, False, False]
    pts = [
        [10.0, 100.0, 20.0],  # 0: front (best TPOT)
        [10.0, 80.0, 30.0],   # 1: front (best TTFT)
        [10.0, 100.0, 30.0],  # 2: dominated by 0 and by 1
        [12.0, None, 10.0],   # 3: a missing latency counts as worst, but throughput and TPOT are best: front
        [8.0, 80.0, None],    # 4: dominated by 1 (less throughput, TPOT missing)
    ]
    assert pareto_front(pts, up_down_down) == [0, 1, 3]
    assert pareto_front([], up_down_down) == []
    with pytest.raises(ValueError):
        pareto_front([[1.0]], UP_DOWN)


finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3).flatmap(lambda k: st.tuples(
    st.lists(st.lists(finite | st.sampled_from([0.0, 1.0, 2.0]), min_size=k, max_size=k), max_size=25),
    st.lists(st.booleans(), min_size=k, max_size=k))))
def test_pareto_property(case: tuple[list[list[float]], list[bool]]) -> None:
    pts, maximize = case
    front = pareto_front(pts, maximize)
    on = set(front)
    for i in front:  # no Pareto point is dominated by any point
        assert not any(dominates(q, pts[i], maximize) for q in pts)
    for i in set(range(len(pts))) - on:  # every other point is dominated by some Pareto point
        assert any(dominates(pts[j], pts[i], maximize) for j in front)
    if pts:
        assert front  # a non-empty set always has a non-dominated point


# ---- max rate under SLO ------------------------------------------------------------------------------------
def test_rate_search_converges_on_the_knee() -> None:
    knee = 7.3  # p90 TTFT meets the SLO up to 7.3 req/s

    res = max_rate_under_slo(lambda r: r <= knee, 0.5, 32.0, rel_tol=0.01, max_evals=30)
    assert res.rate is not None and res.upper is not None
    assert res.rate <= knee < res.upper and res.upper - res.rate <= 0.01 * res.rate
    assert res.evaluations[:2] == [(0.5, True), (32.0, False)]
    # geometric bisection: the third probe is sqrt(0.5 x 32) = 4
    assert res.evaluations[2] == (4.0, True)


def test_rate_search_edges() -> None:
    never = max_rate_under_slo(lambda r: False, 1.0, 10.0)
    assert (never.rate, never.upper, never.evaluations) == (None, 1.0, [(1.0, False)])
    always = max_rate_under_slo(lambda r: True, 1.0, 10.0)
    assert (always.rate, always.upper) == (10.0, None) and len(always.evaluations) == 2
    capped = max_rate_under_slo(lambda r: r < 5.0, 1.0, 1000.0, rel_tol=1e-9, max_evals=6)
    assert len(capped.evaluations) == 6 and capped.rate < 5.0 <= capped.upper
    with pytest.raises(ValueError):
        max_rate_under_slo(lambda r: True, 0.0, 1.0)
    assert math.isclose(max_rate_under_slo(lambda r: True, 2.0, 2.0).rate or 0, 2.0)
