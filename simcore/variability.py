"""Run-to-run variability of a served benchmark: seeded GPU step-time jitter and client/network delays.

The simulator is deterministic; a real benchmark is not. Kernel times scatter from step to step and from one
server start to the next, and every request crosses a network and an HTTP client on its way in and out. Those
random parts break the artificial lockstep of a simulated closed loop with fixed lengths (every client sending
at the same instant, forever) and give every prediction an interval. docs/accuracy.md §3.7 measures the
magnitudes and says which part is on by default.

The model (all pure and seeded; a fixed seed gives identical results):

- **step jitter**: every forward pass's GPU time × a log-normal factor of mean 1 and coefficient of variation
  ``step_time_cv`` (independent per step), × one log-normal factor of mean 1 and CV ``run_time_cv`` drawn once
  per run (a server that is a little faster or slower all run long: clocks, placement, the kernel variant the
  autotuner picked). Host (CPU) time is not scaled.
- **client delays**: each request reaches the server ``request_delay`` after the client sent it, and each
  response reaches the client ``response_delay`` after the server emitted it; both are gamma-distributed with
  mean ``client_delay_s / 2`` and CV ``client_delay_cv`` (0 = exactly the mean), drawn per request index, so a
  request's delay does not depend on the order in which requests were sent. The client sees
  TTFT and e2e longer by ``request_delay + response_delay``; TPOT is unchanged.

Public entry points (used by ``validate``, ``predict``, ``sweep`` and the Python API):

- :class:`Variability` (``off()``, ``measured()``) and :func:`with_variability` (latency wrapper, identity
  when off);
- :class:`ClientDelays`, :class:`DelayedWorkload` (any workload of :mod:`simcore.workload` behind the delays)
  and :func:`client_records` (the records as the client saw them);
- :func:`replica_seeds`, :func:`percentile_interval` and :func:`replica_intervals` (p5–p50–p95 of every
  numeric figure over N seeded replicas), :func:`run_replicas` (one call that does all of it).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from simcore._simpy import simpy

from simcore.perf.base import BatchShape, GpuTimeScaling, LatencyModel
from simcore.request import RequestSpec
from simcore.results import RequestRecord

# Measured magnitudes (docs/accuracy.md §3.7; `python validation/kernel_scatter.py` recomputes the kernel ones).
# Run to run: the same GEMM shape measured by four SGLang collections of H100 / H200 (0.5.6.post2 … 0.5.14)
# scatters around its median with a robust CV of 0.9% / 1.0% (attention: 4.5–12%, but its kernels changed
# between those versions, so that is not run-to-run noise).
MEASURED_RUN_TIME_CV = 0.01
# Step to step: within one collection, m and m + 1 tokens of the same GEMM (one more row) differ with a robust
# CV of 4.9% (H100) / 6.5% (H200) per measurement. Taken as the scatter of a whole step (all of a step's
# kernels moving together: clocks, memory contention), an upper bound.
MEASURED_STEP_TIME_CV = 0.05
# Client + network: aiperf / bench_serving on the same cluster, one streaming HTTP request each way
# (loopback or one switch hop, ~0.1–1 ms round trip; the Python client's event-loop jitter is of the same order).
MEASURED_CLIENT_DELAY_S = 0.001
MEASURED_CLIENT_DELAY_CV = 1.0
_BLOCK = 4096  # normals drawn at once (one numpy call per 4096 steps keeps the wrapper ~0.1 µs per step)


def _lognormal_sigma(cv: float) -> float:
    """σ of a log-normal with mean 1 and coefficient of variation ``cv`` (μ = −σ²/2)."""
    return math.sqrt(math.log1p(cv * cv))


@dataclass(frozen=True)
class Variability:
    """Magnitudes of the random parts of a benchmark (all 0 = the deterministic simulator)."""

    step_time_cv: float = 0.0
    run_time_cv: float = 0.0
    client_delay_s: float = 0.0  # mean round trip added per request (half each way)
    client_delay_cv: float = 0.0

    def __post_init__(self) -> None:
        for name in ("step_time_cv", "run_time_cv", "client_delay_s", "client_delay_cv"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                from simcore.errors import UserError

                raise UserError(name, f"must be a finite number >= 0, got {v!r}")

    @classmethod
    def off(cls) -> "Variability":
        return cls()

    @classmethod
    def measured(cls) -> "Variability":
        """The magnitudes measured for docs/accuracy.md §3.7 (kernel scatter, same-cluster client)."""
        return cls(MEASURED_STEP_TIME_CV, MEASURED_RUN_TIME_CV, MEASURED_CLIENT_DELAY_S, MEASURED_CLIENT_DELAY_CV)

    @property
    def is_off(self) -> bool:
        return self.step_time_cv == 0 and self.run_time_cv == 0 and self.client_delay_s == 0

    @property
    def jitters_steps(self) -> bool:
        return self.step_time_cv > 0 or self.run_time_cv > 0

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


class JitteredLatency(GpuTimeScaling):
    """``base``'s step time with its GPU part × (run factor) × (a fresh per-step factor), both log-normal with
    mean 1. The per-step factors come from one seeded stream in call order (the server calls ``step_time``
    once per launched step, in simulated-time order), so a seed fixes the whole run."""

    def __init__(self, base: LatencyModel, step_time_cv: float, run_time_cv: float, seed: int) -> None:
        self.base = base
        self._rng = np.random.default_rng([seed, 0x5EED])
        s_run = _lognormal_sigma(run_time_cv)
        self.run_factor = float(np.exp(self._rng.standard_normal() * s_run - s_run * s_run / 2)) \
            if run_time_cv > 0 else 1.0
        self._sigma = _lognormal_sigma(step_time_cv)
        self._mu = -self._sigma * self._sigma / 2
        self._block: list[float] = []
        self._i = 0
        # a run factor alone is a constant: steps may then be priced ahead (simcore.decode_run)
        self.pure_gpu_factor = step_time_cv == 0

    def _refill(self) -> None:
        if self._sigma > 0:
            z = self._rng.standard_normal(_BLOCK)
            self._block = (np.exp(z * self._sigma + self._mu) * self.run_factor).tolist()
        else:
            self._block = [self.run_factor] * _BLOCK
        self._i = 0

    def gpu_factor(self, shape: BatchShape) -> float:
        if self._i >= len(self._block):
            self._refill()
        f = self._block[self._i]
        self._i += 1
        return f


def with_variability(latency: LatencyModel, variability: Variability | None, seed: int) -> LatencyModel:
    """``latency`` with the step jitter of ``variability`` (seeded), or ``latency`` itself when there is none."""
    if variability is None or not variability.jitters_steps:
        return latency
    return JitteredLatency(latency, variability.step_time_cv, variability.run_time_cv, seed)


class ClientDelays:
    """Per-request (request path, response path) delays in seconds, a pure function of (seed, request index)."""

    def __init__(self, mean_round_trip_s: float, cv: float, seed: int) -> None:
        self.mean_one_way_s = mean_round_trip_s / 2
        self.cv = cv
        self.seed = seed
        self._cache: dict[int, tuple[float, float]] = {}

    @classmethod
    def from_variability(cls, variability: Variability | None, seed: int) -> "ClientDelays | None":
        if variability is None or variability.client_delay_s <= 0:
            return None
        return cls(variability.client_delay_s, variability.client_delay_cv, seed)

    def for_request(self, index: int) -> tuple[float, float]:
        got = self._cache.get(index)
        if got is None:
            m = self.mean_one_way_s
            if self.cv <= 0:
                got = (m, m)
            else:
                shape = 1.0 / (self.cv * self.cv)
                rng = np.random.default_rng([self.seed, 0xC11E, index])
                a, b = rng.gamma(shape, m / shape, size=2)
                got = (float(a), float(b))
            self._cache[index] = got
        return got


class _DelayedServer:
    """What a workload sees in place of the server: ``submit`` reaches the server after the request delay, and
    the returned event fires (with the server's value) after the response delay."""

    def __init__(self, env: simpy.Environment, server: Any, delays: ClientDelays, offsets: dict[str, tuple]) -> None:
        self.env = env
        self.server = server
        self.delays = delays
        self.offsets = offsets
        self._n = 0

    def __getattr__(self, name: str) -> Any:  # everything else is the server's (e.g. records, idle)
        return getattr(self.server, name)

    def submit(self, spec: RequestSpec) -> simpy.Event:
        env = self.env
        d_in, d_out = self.delays.for_request(self._n)
        self._n += 1
        self.offsets[spec.rid] = (d_in, d_out)
        done = env.event()

        def go():  # type: ignore[no-untyped-def]
            if d_in > 0:
                yield env.timeout(d_in)
            value = yield self.server.submit(dataclasses.replace(spec, arrival_s=float(env.now)))
            if d_out > 0:
                yield env.timeout(d_out)
            done.succeed(value)

        env.process(go())
        return done


class DelayedWorkload:
    """Any workload (``start(env, server)``) whose requests cross ``delays`` on their way in and out.

    ``offsets`` maps each request id to its (request, response) delay, for :func:`client_records`.
    """

    def __init__(self, workload: Any, delays: ClientDelays) -> None:
        self.workload = workload
        self.delays = delays
        self.offsets: dict[str, tuple[float, float]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.workload, name)

    def start(self, env: simpy.Environment, server: Any) -> Any:
        return self.workload.start(env, _DelayedServer(env, server, self.delays, self.offsets))


def client_records(records: Sequence[RequestRecord], offsets: Mapping[str, tuple[float, float]]) -> list[RequestRecord]:
    """``records`` as the client timed them: sent ``request delay`` earlier, every token ``response delay``
    later (TTFT and e2e grow by the round trip, TPOT is unchanged). Records without an offset pass unchanged."""
    out = []
    for r in records:
        off = offsets.get(r.rid)
        if off is None:
            out.append(r)
            continue
        d_in, d_out = off
        rt = d_in + d_out
        out.append(dataclasses.replace(r, arrival_s=r.arrival_s - d_in, first_token_s=r.first_token_s + d_out,
                                       finish_s=r.finish_s + d_out, ttft_s=r.ttft_s + rt, e2e_s=r.e2e_s + rt))
    return out


# ---- replicas --------------------------------------------------------------------------------------------------
def replica_seeds(seed: int, replicas: int) -> list[int]:
    """The seeds of ``replicas`` runs: ``seed, seed + 1, …`` (replica 0 is the single run of ``seed``)."""
    if replicas < 1:
        from simcore.errors import UserError

        raise UserError("--replicas", f"must be >= 1, got {replicas}", "give the number of seeded runs")
    return [seed + i for i in range(replicas)]


def percentile_interval(values: Sequence[float], low_pct: float = 5.0, high_pct: float = 95.0) -> dict[str, float]:
    """``{"p5", "p50", "p95"}`` (names follow the percentiles asked) of ``values``, linear interpolation."""
    a = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if a.size == 0:
        return {}
    lo, mid, hi = np.percentile(a, [low_pct, 50.0, high_pct])
    return {f"p{low_pct:g}": float(lo), "p50": float(mid), f"p{high_pct:g}": float(hi)}


def replica_intervals(summaries: Sequence[Any], low_pct: float = 5.0, high_pct: float = 95.0) -> Any:
    """The interval of every numeric figure of ``summaries`` (nested dicts of the same shape, one per replica):
    the same nesting with each number replaced by :func:`percentile_interval` over the replicas. Figures that
    are not numbers in every replica (strings, None) are left out; lists are left out."""
    first = summaries[0]
    if isinstance(first, Mapping):
        out: dict[str, Any] = {}
        for key in first:
            vals = [s.get(key) if isinstance(s, Mapping) else None for s in summaries]
            if any(v is None for v in vals):
                continue
            sub = replica_intervals(vals, low_pct, high_pct)
            if sub not in (None, {}):
                out[key] = sub
        return out
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in summaries):
        return percentile_interval([float(v) for v in summaries], low_pct, high_pct)
    return None


def run_replicas(run_one: Callable[[int], Any], seed: int, replicas: int, *, low_pct: float = 5.0,
                 high_pct: float = 95.0) -> dict[str, Any]:
    """Call ``run_one(seed_i)`` for each replica seed and return ``{"replicas", "seeds", "runs", "intervals"}``;
    ``runs`` are the replicas' summaries (nested dicts) in seed order."""
    seeds = replica_seeds(seed, replicas)
    runs = [run_one(s) for s in seeds]
    return {"replicas": replicas, "seeds": seeds, "runs": runs,
            "intervals": replica_intervals(runs, low_pct, high_pct)}
