"""What a simulation produces: per-request records, per-step records and summary statistics.

Units: seconds in records (``*_s``), milliseconds in the summary's latency objects (``*_ms``), tokens elsewhere.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence


from simcore.perf.base import BatchShape


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One finished request, timed like SGLang's TokenizerManager (§1).

    - ``cached_tokens``: prompt tokens served from the prefix cache, as SGLang reports it (§3.7): the match at
      first admission; a retracted request does not count again.
    - ``ttft_s = first_token_s − arrival_s``; ``e2e_s = finish_s − arrival_s``;
      ``tpot_s = (finish_s − first_token_s) / (output_len − 1)``, None for one-token outputs.
    - ``queue_time_s``: time spent in the waiting queue, summed over re-queues after retractions.
    - ``aborted``: the request could not fit in the KV pool even alone (SGLang aborts it with an OOM error).

    Per-token gaps are not kept per request (that would cost O(batch) per step); the simulation keeps them as
    weighted samples (``SimResult.itl_values_s``/``itl_weights``) for the ITL statistics.
    """

    rid: str
    arrival_s: float
    input_len: int
    output_len: int
    cached_tokens: int
    first_token_s: float
    finish_s: float
    ttft_s: float
    tpot_s: float | None
    e2e_s: float
    queue_time_s: float
    num_retractions: int = 0
    aborted: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One scheduler iteration that launched a forward pass, for observers (live exporter, tests).

    ``start_s``: GPU launch; ``end_s``: GPU end. ``kv_used``/``kv_capacity`` in tokens after the step's
    allocations (SGLang's ``num_used``, §4.6). ``retracted``: rids retracted by this step's scheduling pass.
    """

    start_s: float
    end_s: float
    shape: BatchShape
    num_running: int
    num_waiting: int
    kv_used: int
    kv_capacity: int
    new_token_ratio: float
    retracted: tuple[str, ...] = ()


def _stats_ms(values: Sequence[float], weights: Sequence[float] | None = None) -> dict[str, float | None]:
    """mean/p50/p90/p99 in milliseconds; weighted percentiles use the inverted-CDF rule."""
    if len(values) == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    import numpy as np  # start-up: only summaries need it
    v = np.asarray(values, dtype=float) * 1000.0
    if weights is None:
        return {"mean": float(v.mean()), "p50": float(np.percentile(v, 50)),
                "p90": float(np.percentile(v, 90)), "p99": float(np.percentile(v, 99))}
    w = np.asarray(weights, dtype=float)
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    cw = np.cumsum(w)
    total = cw[-1]

    def q(p: float) -> float:
        return float(v[min(int(np.searchsorted(cw, p / 100.0 * total, side="left")), len(v) - 1)])

    return {"mean": float((v * w).sum() / total), "p50": q(50), "p90": q(90), "p99": q(99)}


class Summary:
    """Inputs of :func:`summarize` beyond the records (a plain class: start-up, simcore/values.py)."""

    def __init__(self, sim_time_s: float, wall_time_s: float, kv_peak_usage: float, num_retractions: int,
                 itl_values_s: Sequence[float] = (), itl_weights: Sequence[float] = (), steps: int = 0) -> None:
        self.sim_time_s = sim_time_s
        self.wall_time_s = wall_time_s
        self.kv_peak_usage = kv_peak_usage
        self.num_retractions = num_retractions
        self.itl_values_s = itl_values_s
        self.itl_weights = itl_weights
        self.steps = steps


def summarize(records: Sequence[RequestRecord], info: Summary) -> dict[str, Any]:
    """The ``shadowsim predict --json`` summary (keys documented in docs/architecture.md)."""
    n = len(records)
    first_arrival = min((r.arrival_s for r in records), default=0.0)
    last_finish = max((r.finish_s for r in records), default=0.0)
    span = max(last_finish - first_arrival, 1e-12)
    prompt = sum(r.input_len for r in records)
    cached = sum(r.cached_tokens for r in records)
    out_tokens = sum(r.output_len for r in records)
    tpots = [r.tpot_s for r in records if r.tpot_s is not None and not math.isnan(r.tpot_s)]
    return {
        "num_requests": n,
        "num_aborted": sum(1 for r in records if r.aborted),
        "throughput_rps": n / span if n else 0.0,
        "output_tokens_per_s": out_tokens / span if n else 0.0,
        "prompt_tokens": prompt,
        "output_tokens": out_tokens,
        "cached_tokens": cached,
        "ttft_ms": _stats_ms([r.ttft_s for r in records]),
        "tpot_ms": _stats_ms(tpots),
        "itl_ms": _stats_ms(info.itl_values_s, info.itl_weights or None),
        "e2e_ms": _stats_ms([r.e2e_s for r in records]),
        "queue_ms": _stats_ms([r.queue_time_s for r in records]),
        "cache_hit_rate": cached / prompt if prompt else 0.0,
        "kv_peak_usage": info.kv_peak_usage,
        "num_retractions": info.num_retractions,
        "steps": info.steps,
        "sim_time_s": info.sim_time_s,
        "wall_time_s": info.wall_time_s,
    }
