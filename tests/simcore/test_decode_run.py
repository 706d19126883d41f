"""Decode runs (simcore.decode_run, Server._decode_run): the same results as the step-by-step loop.

``fast=False`` is the reference: it yields to SimPy at every iteration, submits arrivals live and never takes a
decode run. With ``decode_run_spacing=0`` the runs price every step with the model, so records, ITL samples and
counters must be *identical*; with the default knot spacing they must stay within the documented bound
(docs/architecture.md, simcore/decode_run.py). Real latency models (measured tables, roofline) throughout.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import simpy

from simcore.decode_run import DEFAULT_MAX_REL_SPACING, DecodeStepTimes
from simcore.engine import SimResult, simulate
from simcore.gpus import load_gpu
from simcore.models import load_model
from simcore.perf import build_latency_model
from simcore.request import RequestSpec
from simcore.server import Server
from simcore.settings import ServerSettings, resolve
from simcore.workload import ClosedLoop, OpenLoop, TraceReplay
from streams.traces import read_trace

H100 = load_gpu("h100_sxm")
LLAMA = load_model("meta-llama/Llama-3.1-8B-Instruct")
TABLE = build_latency_model(LLAMA, H100, 1, "bf16")


def _settings(**kw: object) -> ServerSettings:
    return resolve(ServerSettings(**kw), H100.memory_bytes)


def _mooncake(shared_dir, n: int) -> list[RequestSpec]:  # type: ignore[no-untyped-def]
    return read_trace(shared_dir / "data" / "mooncake" / "conversation_trace.jsonl", limit=n).requests


def _mixed_requests(n: int, seed: int) -> list[RequestSpec]:
    """EOS finishes, length finishes and max_new above the 4096 reservation clip (the falling-reservation heap)."""
    rnd = random.Random(seed)
    out = []
    t = 0.0
    for i in range(n):
        t += rnd.expovariate(4.0)
        inp = rnd.randint(50, 3000)
        outl = rnd.randint(1, 600)
        max_new = rnd.choice([outl, outl + 50, 4200, None])
        if max_new == 4200:
            outl = 4200 if rnd.random() < 0.3 else outl
        out.append(RequestSpec(f"r{i}", t, inp, outl, max_new, None, 1, False))
    return out


def _same(a: SimResult, b: SimResult) -> None:
    assert a.records == b.records  # finish order, every field
    assert a.itl_values_s == b.itl_values_s and a.itl_weights == b.itl_weights
    assert (a.steps, a.num_retractions, a.kv_peak_usage, a.sim_time_s) == (b.steps, b.num_retractions,
                                                                           b.kv_peak_usage, b.sim_time_s)


class _RunCounter(Server):
    """A Server that recounts its incremental state after every decode run (the test's own check)."""

    runs = 0

    def _decode_run(self, t: float) -> bool:
        done = super()._decode_run(t)
        if done:
            type(self).runs += 1
            self.check_invariants()
        return done


@pytest.mark.parametrize("overlap", [True, False])
def test_exact_decode_runs_equal_step_by_step_on_mooncake(shared_dir, overlap: bool) -> None:  # type: ignore[no-untyped-def]
    # a 150k-token pool under the first 400 Mooncake requests: latched full batches, queueing, retraction
    reqs = _mooncake(shared_dir, 400)
    s = _settings(disable_overlap_schedule=not overlap)
    kw = dict(kv_capacity_tokens=150_000, key_unit=512, context_len=131072)
    fast = simulate(s, TABLE, TraceReplay(reqs), fast=True, decode_run_spacing=0.0, **kw)
    slow = simulate(s, TABLE, TraceReplay(reqs), fast=False, **kw)
    _same(fast, slow)
    assert fast.num_retractions > 0 and len(fast.records) == 400


@pytest.mark.parametrize("overlap", [True, False])
def test_exact_decode_runs_equal_step_by_step_mixed_finishes(overlap: bool) -> None:
    reqs = _mixed_requests(300, seed=3)
    s = _settings(disable_overlap_schedule=not overlap)
    lat = build_latency_model(load_model("Qwen/Qwen3-32B"), H100, 2, "bf16", backend="roofline")
    fast = simulate(s, lat, reqs, kv_capacity_tokens=120_000, fast=True, decode_run_spacing=0.0)
    slow = simulate(s, lat, reqs, kv_capacity_tokens=120_000, fast=False)
    _same(fast, slow)


@pytest.mark.parametrize("factor", [2.0, 1.0])
def test_exact_decode_runs_equal_step_by_step_whatever_the_ratio_decay(factor: float) -> None:
    """A run decays new_token_ratio once per step exactly as ``NewTokenRatio.decay_step`` (``max(current − decay,
    min)``, 0.5.23 new_token_ratio_tracker.py line 35), also when the decay is negative (min factor above one:
    the ratio sits at the floor, then creeps up every step until an idle reset) or zero: the run's table of
    successive values (``NewTokenRatio.decay_steps``) gives the same floats, and the admission decisions that
    read the ratio stay the same."""
    reqs = _mixed_requests(250, seed=5)
    s = _settings(min_new_token_ratio_factor=factor)
    lat = build_latency_model(load_model("Qwen/Qwen3-32B"), H100, 2, "bf16", backend="roofline")
    fast = simulate(s, lat, reqs, kv_capacity_tokens=60_000, fast=True, decode_run_spacing=0.0)
    slow = simulate(s, lat, reqs, kv_capacity_tokens=60_000, fast=False)
    _same(fast, slow)


def test_decode_runs_cover_most_steps_and_keep_invariants() -> None:
    """Live submission (no arrivals handed over up front), invariants recounted after every run."""
    env = simpy.Environment()
    srv = _RunCounter(env, _settings(), 200_000, TABLE, decode_run_spacing=0.0)
    OpenLoop(3.0, 200, 1500, 400, seed=1, ignore_eos=True).start(env, srv)
    env.run()
    assert len(srv.records) == 200 and _RunCounter.runs > 50
    assert srv.run_steps > 0.5 * srv.steps  # the runs do most of the steps


def test_closed_loop_runs_equal_step_by_step() -> None:
    s = _settings()
    wl = lambda: ClosedLoop(32, 150, 2000, 300, seed=2)  # noqa: E731
    fast = simulate(s, TABLE, wl(), kv_capacity_tokens=150_000, fast=True, decode_run_spacing=0.0)
    slow = simulate(s, TABLE, wl(), kv_capacity_tokens=150_000, fast=False)
    _same(fast, slow)


def test_planned_arrivals_are_the_live_submissions() -> None:
    """engine.simulate hands open-loop arrivals over up front: the very specs, at the very float times."""
    for wl_factory in (lambda: OpenLoop(7.3, 50, 100, 10, seed=4),
                       lambda: TraceReplay(_mixed_requests(50, seed=5), time_scale=3.7)):
        live = wl_factory()
        env = simpy.Environment()
        seen: list[tuple[float, RequestSpec]] = []

        class Recorder:
            def submit(self, spec: RequestSpec) -> simpy.Event:
                seen.append((env.now, spec))
                return env.event()

        live.start(env, Recorder())
        env.run()
        assert wl_factory().planned_arrivals(0.0) == seen


# ---- interpolated step times ----------------------------------------------------------------------------
MODELS = [
    ("table llama-8b h100", TABLE),
    ("table qwen3-32b h200 tp2", build_latency_model(load_model("Qwen/Qwen3-32B"), load_gpu("h200_sxm"), 2, "bf16")),
    ("table qwen3-30b-a3b moe a100", build_latency_model(load_model("Qwen/Qwen3-30B-A3B"), load_gpu("a100_sxm"), 1,
                                                         "bf16")),
    ("roofline deepseek-v3 mla b200 tp8", build_latency_model(load_model("deepseek-ai/DeepSeek-V3"),
                                                              load_gpu("b200_sxm"), 8, "fp8", backend="roofline")),
    ("table llama-70b l40s tp4", build_latency_model(load_model("meta-llama/Meta-Llama-3.1-70B"), load_gpu("l40s"),
                                                     4, "bf16")),
]
STEP_TIME_BOUND = 1e-4  # documented: interpolated decode step times within 0.01 % of the model's (measured ≤ 6e-8)


@pytest.mark.parametrize("name,lat", MODELS, ids=[m[0] for m in MODELS])
def test_interpolated_step_times_within_the_stated_bound(name: str, lat) -> None:  # type: ignore[no-untyped-def]
    exact = DecodeStepTimes(lat, 0.0)
    knots = DecodeStepTimes(lat)
    worst = 0.0
    rng = np.random.default_rng(7)
    for rows in (1, 3, 8, 33, 128, 256, 700, 2048):
        graph = rows if rows <= 256 else None
        for kv_len in (64, 700, 3000, 9000, 30000, 120000):
            s0 = int(rows * kv_len * rng.uniform(0.8, 1.2))
            g_k, c_k = knots.times(rows, graph, s0, 300)
            g_e, c_e = exact.times(rows, graph, s0, 300)
            assert c_k == pytest.approx(c_e, rel=1e-12)
            worst = max(worst, max(abs(a - b) / b for a, b in zip(g_k, g_e)))
    assert worst <= STEP_TIME_BOUND, f"{name}: worst relative error {worst:.2e}"


def test_interpolated_runs_stay_within_the_documented_bound(shared_dir) -> None:  # type: ignore[no-untyped-def]
    """Default spacing vs the exact path on 600 Mooncake requests: every request's TTFT and e2e within 0.1 %
    (and 1 ms), summaries within 0.01 %."""
    reqs = _mooncake(shared_dir, 600)
    s = _settings()
    kw = dict(kv_capacity_tokens=80_000, key_unit=512, context_len=131072)
    approx = simulate(s, TABLE, TraceReplay(reqs), decode_run_spacing=DEFAULT_MAX_REL_SPACING, **kw)
    exact = simulate(s, TABLE, TraceReplay(reqs), fast=False, **kw)
    a = {r.rid: r for r in approx.records}
    assert len(a) == len(exact.records) == 600
    for r in exact.records:
        for f in ("ttft_s", "e2e_s"):
            x, y = getattr(a[r.rid], f), getattr(r, f)
            assert abs(x - y) <= max(1e-3 * y, 1e-3), (r.rid, f, x, y)
    sa, se = approx.summary(), exact.summary()
    for k in ("mean_ttft_ms", "mean_tpot_ms", "mean_e2e_ms", "output_throughput_tok_s"):
        if k in se:
            assert sa[k] == pytest.approx(se[k], rel=1e-4), k


def test_models_random_per_call_get_no_runs_and_keep_their_draw_order() -> None:
    """A jittered model draws one factor per step_time call: no runs, the same draws as step by step."""
    from simcore.perf.base import has_pure_step_time
    from simcore.variability import Variability, with_variability

    assert has_pure_step_time(TABLE)
    results = []
    for fast in (True, False):
        lat = with_variability(TABLE, Variability(step_time_cv=0.05, run_time_cv=0.01), seed=11)
        assert not has_pure_step_time(lat)
        env = simpy.Environment()
        srv = Server(env, _settings(), 200_000, lat, fast=fast)
        OpenLoop(3.0, 60, 1500, 200, seed=1).start(env, srv)
        env.run()
        assert srv.run_steps == 0
        results.append(srv.records)
    assert results[0] == results[1]


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("spacing", [0.0, DEFAULT_MAX_REL_SPACING])
def test_numpy_blocks_give_the_same_floats_as_the_python_loop(monkeypatch, overlap: bool, spacing: float) -> None:
    """plan_run/decode_gaps: long blocks go through numpy; the floats must equal the plain loop's, bit for bit."""
    import simcore.decode_run as dr

    def plan(bound: float) -> tuple:  # type: ignore[type-arg]
        times = DecodeStepTimes(TABLE, spacing)
        times.long_steps = dr.PURE_PYTHON_STEPS  # numpy takes over long blocks past this many plain steps
        starts, ends, cpu = dr.plan_run(times, 200, 200, 200 * 3000 + 17, 1500, 5.0, 5.004, bound, overlap)
        gaps = dr.decode_gaps(ends, cpu, overlap, 4.9, 4.95, 0.001, vectorize=dr.NUMPY_FROM < 10**9)
        return starts, ends, cpu, gaps

    whole = plan(float("inf"))  # blocks 8, 16, ..., 256 in Python, then 512 (numpy) and the rest
    starts_of = whole[0] if overlap else whole[1]
    for bound in (float("inf"), starts_of[900], starts_of[700], 5.05):  # inside the numpy block, before it
        vectorized = plan(bound)
        monkeypatch.setattr(dr, "NUMPY_FROM", 10**9)
        plain = plan(bound)
        monkeypatch.undo()
        assert vectorized == plain
        nxt = plain[0] if overlap else plain[1]  # when each iteration after a step starts
        assert all(x < bound for x in nxt[:-1])  # every iteration of the run starts before the bound
        assert len(nxt) == 1500 or nxt[-1] >= bound  # and it stops at the first that would not


def test_numpy_takes_over_long_blocks_only_after_the_pure_python_budget() -> None:
    """Start-up: a fresh server does long blocks in pure Python (no numpy import) until PURE_PYTHON_STEPS steps of
    them were done, then numpy (same floats, checked above)."""
    import simcore.decode_run as dr

    times = DecodeStepTimes(TABLE, DEFAULT_MAX_REL_SPACING)
    assert not times.vectorize(dr.NUMPY_FROM - 1)
    done = 0
    while done < dr.PURE_PYTHON_STEPS:
        assert not times.vectorize(4096)
        done += 4096
    assert times.vectorize(dr.NUMPY_FROM) and not times.vectorize(dr.NUMPY_FROM - 1)


@pytest.mark.parametrize("overlap", [True, False])
def test_unwatched_finishes_spend_no_simpy_event_and_change_nothing(shared_dir, overlap: bool) -> None:  # type: ignore[no-untyped-def]
    """simulate() of an open loop that nobody watches does not trigger finish events (no SimPy event, no yield per
    finish); with an on_finish callback it does. Records, ITL samples and steps are the same either way."""
    import simpy.core

    reqs = _mooncake(shared_dir, 600)
    settings = _settings(disable_overlap_schedule=not overlap)
    counted: list[int] = []
    orig = simpy.core.Environment.step

    def run(**kw):  # type: ignore[no-untyped-def]
        n = [0]

        def step(env):  # type: ignore[no-untyped-def]
            n[0] += 1
            return orig(env)
        simpy.core.Environment.step = step  # type: ignore[method-assign]
        try:
            res = simulate(settings, TABLE, TraceReplay(reqs), kv_capacity_tokens=120_000, key_unit=512, **kw)
        finally:
            simpy.core.Environment.step = orig  # type: ignore[method-assign]
        counted.append(n[0])
        return res

    finished: list[str] = []
    silent = run()
    watched = run(on_finish=lambda rec: finished.append(rec.rid))
    _same(silent, watched)
    assert sorted(finished) == sorted(r.rid for r in silent.records) and len(finished) == 600
    assert counted[0] < 10 < 600 < counted[1]  # a SimPy event per finish when watched, none when not
