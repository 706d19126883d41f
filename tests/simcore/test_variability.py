"""simcore.variability: seeded step jitter, client delays and replica intervals (docs/accuracy.md §3.7)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from simcore.engine import simulate
from simcore.errors import UserError
from simcore.perf.base import BatchShape, LinearLatencyModel
from simcore.settings import ServerSettings, resolve
from simcore.variability import (ClientDelays, DelayedWorkload, JitteredLatency, Variability, client_records,
                                 percentile_interval, replica_intervals, replica_seeds, run_replicas,
                                 with_variability)
from simcore.workload import ClosedLoop

GiB = 1024**3
DECODE = BatchShape(num_decode=4, decode_sum_kv=400)


def _flat(step_s: float = 0.01) -> LinearLatencyModel:
    return LinearLatencyModel(base_s=step_s, per_extend_token_s=0.0, per_decode_req_s=0.0, per_kv_token_s=0.0)


def test_off_is_the_identity() -> None:
    lat = _flat()
    assert with_variability(lat, Variability.off(), seed=3) is lat
    assert with_variability(lat, None, seed=3) is lat
    assert Variability.off().is_off and not Variability.measured().is_off


def test_jitter_has_mean_one_and_the_asked_cv() -> None:
    # log-normal with mean 1 and CV 0.2: sigma = sqrt(ln(1.04)) = 0.1980; 20,000 steps → mean within 0.5%
    jl = JitteredLatency(_flat(0.01), step_time_cv=0.2, run_time_cv=0.0, seed=7)
    g = np.array([jl.step_time(DECODE).gpu_s for _ in range(20_000)]) / 0.01
    assert g.mean() == pytest.approx(1.0, abs=0.005)
    assert g.std() / g.mean() == pytest.approx(0.2, rel=0.05)
    assert np.log(g).std() == pytest.approx(math.sqrt(math.log(1.04)), rel=0.05)
    assert jl.step_time(DECODE).cpu_s == 0.0  # host time is not scaled


def test_run_factor_is_one_draw_for_the_whole_run() -> None:
    jl = JitteredLatency(_flat(0.01), step_time_cv=0.0, run_time_cv=0.1, seed=11)
    times = {jl.step_time(DECODE).gpu_s for _ in range(5000)}
    assert len(times) == 1 and times.pop() == pytest.approx(0.01 * jl.run_factor)
    # the factor differs between seeds and averages to 1 over many runs (mean-one log-normal)
    factors = [JitteredLatency(_flat(), 0.0, 0.1, s).run_factor for s in range(2000)]
    assert np.mean(factors) == pytest.approx(1.0, abs=0.01) and np.std(factors) == pytest.approx(0.1, rel=0.1)


def test_same_seed_same_draws_other_seed_other_draws() -> None:
    a = [JitteredLatency(_flat(), 0.05, 0.01, 5).step_time(DECODE).gpu_s for _ in range(1)]
    b = [JitteredLatency(_flat(), 0.05, 0.01, 5).step_time(DECODE).gpu_s for _ in range(1)]
    c = [JitteredLatency(_flat(), 0.05, 0.01, 6).step_time(DECODE).gpu_s for _ in range(1)]
    assert a == b and a != c


def test_client_delays_are_per_request_index_and_seeded() -> None:
    d = ClientDelays(0.002, 0.0, seed=1)
    assert d.for_request(0) == (0.001, 0.001) and d.for_request(99) == (0.001, 0.001)
    g1, g2 = ClientDelays(0.002, 1.0, seed=1), ClientDelays(0.002, 1.0, seed=1)
    late = g2.for_request(500)  # drawn out of order: still the same value
    assert [g1.for_request(i) for i in range(501)][500] == late
    draws = np.array([g1.for_request(i) for i in range(4000)])
    assert draws.mean() == pytest.approx(0.001, rel=0.05)  # mean one-way = half the round trip
    assert draws.std() / draws.mean() == pytest.approx(1.0, rel=0.1)  # CV 1 (an exponential)
    assert ClientDelays.from_variability(Variability(step_time_cv=0.1), 0) is None


def test_delayed_closed_loop_adds_the_round_trip_to_ttft_and_e2e_only() -> None:
    # 1 client, 3 requests of 10 prompt / 5 output tokens, 10 ms per step, 2 ms each way (CV 0):
    # server-side TTFT is 1 step (prefill) and every later token 1 step; the client adds 4 ms to TTFT and e2e,
    # and each next request leaves 2 ms after the previous response, reaching the server 2 ms later still.
    settings = resolve(ServerSettings(disable_overlap_schedule=True), 80 * GiB)
    wl = DelayedWorkload(ClosedLoop(1, 3, 10, 5, seed=0), ClientDelays(0.004, 0.0, seed=0))
    res = simulate(settings, _flat(0.01), wl, kv_capacity_tokens=10_000)
    recs = sorted(res.records, key=lambda r: r.arrival_s)
    assert [r.arrival_s for r in recs] == pytest.approx([0.002, 0.002 + 0.05 + 0.004, 0.002 + 2 * (0.05 + 0.004)])
    assert [r.ttft_s for r in recs] == pytest.approx([0.01] * 3)
    client = client_records(recs, wl.offsets)
    assert [r.ttft_s for r in client] == pytest.approx([0.014] * 3)
    assert [r.e2e_s for r in client] == pytest.approx([0.054] * 3)
    assert [r.tpot_s for r in client] == [r.tpot_s for r in recs] == pytest.approx([0.01] * 3)
    assert client[0].arrival_s == pytest.approx(0.0)


def test_fixed_seed_gives_identical_runs() -> None:
    settings = resolve(ServerSettings(), 80 * GiB)
    v = Variability.measured()

    def run(seed: int) -> list[tuple[float, float]]:
        wl = DelayedWorkload(ClosedLoop(8, 64, 300, 40, seed=seed), ClientDelays.from_variability(v, seed))
        res = simulate(settings, with_variability(LinearLatencyModel(), v, seed), wl, kv_capacity_tokens=100_000)
        return [(r.first_token_s, r.finish_s) for r in client_records(res.records, wl.offsets)]

    assert run(4) == run(4)
    assert run(4) != run(5)


def test_percentile_interval_hand_computed() -> None:
    # numpy's linear rule on 1..11: p5 = 1 + 0.05 × 10 = 1.5, p50 = 6, p95 = 10.5
    assert percentile_interval(list(range(1, 12))) == {"p5": 1.5, "p50": 6.0, "p95": 10.5}
    assert percentile_interval([]) == {}


def test_replica_intervals_keep_the_nesting_and_drop_non_numbers() -> None:
    runs = [{"ttft_ms": {"mean": float(i)}, "model": "x", "n": i, "maybe": None if i == 0 else 1.0}
            for i in range(11)]
    iv = replica_intervals(runs)
    assert iv == {"ttft_ms": {"mean": {"p5": 0.5, "p50": 5.0, "p95": 9.5}}, "n": {"p5": 0.5, "p50": 5.0, "p95": 9.5}}


def test_run_replicas_and_seed_errors() -> None:
    assert replica_seeds(10, 3) == [10, 11, 12]
    with pytest.raises(UserError, match="--replicas"):
        replica_seeds(0, 0)
    out = run_replicas(lambda s: {"x": float(s)}, 0, 21)
    assert out["seeds"] == list(range(21)) and out["intervals"]["x"] == {"p5": 1.0, "p50": 10.0, "p95": 19.0}
    with pytest.raises(UserError, match="step_time_cv"):
        Variability(step_time_cv=-0.1)
