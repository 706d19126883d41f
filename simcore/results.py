"""What a simulation produces: per-request records, per-step records and summary statistics.

Units: seconds in records (``*_s``), milliseconds in the summary's latency objects (``*_ms``), tokens elsewhere.
"""
from __future__ import annotations

import math
from typing import Any, Sequence


from simcore.perf.base import BatchShape
from simcore.written_dataclass import DataclassFields, frozen_error

_object_setattr = object.__setattr__


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

    __slots__ = ("rid", "arrival_s", "input_len", "output_len", "cached_tokens", "first_token_s", "finish_s",
                 "ttft_s", "tpot_s", "e2e_s", "queue_time_s", "num_retractions", "aborted")
    __match_args__ = ("rid", "arrival_s", "input_len", "output_len", "cached_tokens", "first_token_s", "finish_s",
                      "ttft_s", "tpot_s", "e2e_s", "queue_time_s", "num_retractions", "aborted")
    __dataclass_fields__ = DataclassFields(frozen=True)

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
    num_retractions: int
    aborted: bool

    def __init__(self, rid: str, arrival_s: float, input_len: int, output_len: int, cached_tokens: int,
                 first_token_s: float, finish_s: float, ttft_s: float, tpot_s: float | None, e2e_s: float,
                 queue_time_s: float, num_retractions: int = 0, aborted: bool = False) -> None:
        _object_setattr(self, "rid", rid)
        _object_setattr(self, "arrival_s", arrival_s)
        _object_setattr(self, "input_len", input_len)
        _object_setattr(self, "output_len", output_len)
        _object_setattr(self, "cached_tokens", cached_tokens)
        _object_setattr(self, "first_token_s", first_token_s)
        _object_setattr(self, "finish_s", finish_s)
        _object_setattr(self, "ttft_s", ttft_s)
        _object_setattr(self, "tpot_s", tpot_s)
        _object_setattr(self, "e2e_s", e2e_s)
        _object_setattr(self, "queue_time_s", queue_time_s)
        _object_setattr(self, "num_retractions", num_retractions)
        _object_setattr(self, "aborted", aborted)

    def __repr__(self) -> str:
        return (self.__class__.__qualname__
                + f"(rid={self.rid!r}, arrival_s={self.arrival_s!r}, input_len={self.input_len!r}, "
                  f"output_len={self.output_len!r}, cached_tokens={self.cached_tokens!r}, "
                  f"first_token_s={self.first_token_s!r}, finish_s={self.finish_s!r}, "
                  f"ttft_s={self.ttft_s!r}, tpot_s={self.tpot_s!r}, e2e_s={self.e2e_s!r}, "
                  f"queue_time_s={self.queue_time_s!r}, num_retractions={self.num_retractions!r}, "
                  f"aborted={self.aborted!r})")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return ((self.rid, self.arrival_s, self.input_len, self.output_len, self.cached_tokens,
                     self.first_token_s, self.finish_s, self.ttft_s, self.tpot_s, self.e2e_s, self.queue_time_s,
                     self.num_retractions, self.aborted)
                    == (other.rid, other.arrival_s, other.input_len, other.output_len, other.cached_tokens,
                        other.first_token_s, other.finish_s, other.ttft_s, other.tpot_s, other.e2e_s,
                        other.queue_time_s, other.num_retractions, other.aborted))  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.rid, self.arrival_s, self.input_len, self.output_len, self.cached_tokens,
                     self.first_token_s, self.finish_s, self.ttft_s, self.tpot_s, self.e2e_s, self.queue_time_s,
                     self.num_retractions, self.aborted))

    def __setattr__(self, name: str, value: Any) -> None:
        if type(self) is RequestRecord or name in _REQUESTRECORD_FIELDS:
            raise frozen_error(f"cannot assign to field {name!r}")
        super(RequestRecord, self).__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if type(self) is RequestRecord or name in _REQUESTRECORD_FIELDS:
            raise frozen_error(f"cannot delete field {name!r}")
        super(RequestRecord, self).__delattr__(name)

    def __getstate__(self) -> list[Any]:
        return [self.rid, self.arrival_s, self.input_len, self.output_len, self.cached_tokens, self.first_token_s,
                self.finish_s, self.ttft_s, self.tpot_s, self.e2e_s, self.queue_time_s, self.num_retractions,
                self.aborted]

    def __setstate__(self, state: list[Any]) -> None:
        for name, value in zip(_REQUESTRECORD_FIELDS, state):
            _object_setattr(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict  # start-up: imported by what uses it

        return asdict(self)


_REQUESTRECORD_FIELDS = RequestRecord.__match_args__


class StepRecord:
    """One scheduler iteration that launched a forward pass, for observers (live exporter, tests).

    ``start_s``: GPU launch; ``end_s``: GPU end. ``kv_used``/``kv_capacity`` in tokens after the step's
    allocations (SGLang's ``num_used``, §4.6). ``retracted``: rids retracted by this step's scheduling pass.
    """

    __slots__ = ("start_s", "end_s", "shape", "num_running", "num_waiting", "kv_used", "kv_capacity",
                 "new_token_ratio", "retracted")
    __match_args__ = ("start_s", "end_s", "shape", "num_running", "num_waiting", "kv_used", "kv_capacity",
                      "new_token_ratio", "retracted")
    __dataclass_fields__ = DataclassFields(frozen=True)

    start_s: float
    end_s: float
    shape: BatchShape
    num_running: int
    num_waiting: int
    kv_used: int
    kv_capacity: int
    new_token_ratio: float
    retracted: tuple[str, ...]

    def __init__(self, start_s: float, end_s: float, shape: BatchShape, num_running: int, num_waiting: int,
                 kv_used: int, kv_capacity: int, new_token_ratio: float, retracted: tuple[str, ...] = ()) -> None:
        _object_setattr(self, "start_s", start_s)
        _object_setattr(self, "end_s", end_s)
        _object_setattr(self, "shape", shape)
        _object_setattr(self, "num_running", num_running)
        _object_setattr(self, "num_waiting", num_waiting)
        _object_setattr(self, "kv_used", kv_used)
        _object_setattr(self, "kv_capacity", kv_capacity)
        _object_setattr(self, "new_token_ratio", new_token_ratio)
        _object_setattr(self, "retracted", retracted)

    def __repr__(self) -> str:
        return (self.__class__.__qualname__
                + f"(start_s={self.start_s!r}, end_s={self.end_s!r}, shape={self.shape!r}, "
                  f"num_running={self.num_running!r}, num_waiting={self.num_waiting!r}, "
                  f"kv_used={self.kv_used!r}, kv_capacity={self.kv_capacity!r}, "
                  f"new_token_ratio={self.new_token_ratio!r}, retracted={self.retracted!r})")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return ((self.start_s, self.end_s, self.shape, self.num_running, self.num_waiting, self.kv_used,
                     self.kv_capacity, self.new_token_ratio, self.retracted)
                    == (other.start_s, other.end_s, other.shape, other.num_running, other.num_waiting, other.kv_used,
                        other.kv_capacity, other.new_token_ratio, other.retracted))  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.start_s, self.end_s, self.shape, self.num_running, self.num_waiting, self.kv_used,
                     self.kv_capacity, self.new_token_ratio, self.retracted))

    def __setattr__(self, name: str, value: Any) -> None:
        if type(self) is StepRecord or name in _STEPRECORD_FIELDS:
            raise frozen_error(f"cannot assign to field {name!r}")
        super(StepRecord, self).__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if type(self) is StepRecord or name in _STEPRECORD_FIELDS:
            raise frozen_error(f"cannot delete field {name!r}")
        super(StepRecord, self).__delattr__(name)

    def __getstate__(self) -> list[Any]:
        return [self.start_s, self.end_s, self.shape, self.num_running, self.num_waiting, self.kv_used,
                self.kv_capacity, self.new_token_ratio, self.retracted]

    def __setstate__(self, state: list[Any]) -> None:
        for name, value in zip(_STEPRECORD_FIELDS, state):
            _object_setattr(self, name, value)


_STEPRECORD_FIELDS = StepRecord.__match_args__


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
