"""Plain, snapshot-able counters and histograms of one shadowed instance.

They live in the twin's domain state (not in prometheus_client objects) so that a restored twin exports exactly
the numbers an uninterrupted one would; the exporter reads them at scrape time.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any

# SGLang's own default buckets (sglang-internals §5.2), so dashboards can overlay shadowsim and SGLang histograms.
TTFT_BUCKETS_S: tuple[float, ...] = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
ITL_BUCKETS_S: tuple[float, ...] = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
                                    0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1, 2, 4, 6, 8)
E2E_BUCKETS_S: tuple[float, ...] = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400,
                                    600, 1200, 1800, 2400)
# Relative errors: 1 % … 500 %. Fine steps below 50 % where alert thresholds live.
APE_BUCKETS: tuple[float, ...] = (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0)

BUCKETS_BY_METRIC: dict[str, tuple[float, ...]] = {"ttft": TTFT_BUCKETS_S, "tpot": ITL_BUCKETS_S,
                                                   "e2e": E2E_BUCKETS_S}


@dataclass
class Histogram:
    """Cumulative-at-export histogram: per-bucket (non-cumulative) counts, +Inf last, and the sum."""

    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float) -> None:
        if not math.isfinite(value):
            return
        # bisect_left: a value equal to a bound belongs to that bucket (Prometheus `le` semantics).
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """[(le, cumulative count)] including '+Inf', as Prometheus exposes them."""
        out, acc = [], 0
        for bound, c in zip([*map(_fmt, self.buckets), "+Inf"], self.counts):
            acc += c
            out.append((bound, acc))
        return out

    def snapshot(self) -> dict[str, Any]:
        return {"counts": list(self.counts), "sum": self.total}

    def restore(self, data: dict[str, Any]) -> None:
        self.counts = [int(c) for c in data["counts"]]
        self.total = float(data["sum"])


def _fmt(x: float) -> str:
    return repr(float(x))


SOURCES: tuple[str, ...] = ("predicted", "actual")
COUNTER_NAMES: tuple[str, ...] = ("requests_finished", "output_tokens", "prompt_tokens", "cached_tokens")


@dataclass
class InstanceStats:
    """Everything the exporter shows for one instance that must survive a restart exactly."""

    latency: dict[str, dict[str, Histogram]] = field(default_factory=lambda: {
        m: {s: Histogram(b) for s in SOURCES} for m, b in BUCKETS_BY_METRIC.items()})
    ape: dict[str, dict[str, Histogram]] = field(default_factory=lambda: {
        m: {mode: Histogram(APE_BUCKETS) for mode in ("free", "anchored")} for m in BUCKETS_BY_METRIC})
    counters: dict[str, dict[str, int]] = field(default_factory=lambda: {
        c: {s: 0 for s in SOURCES} for c in COUNTER_NAMES})
    events_processed: int = 0
    events_late: int = 0
    requests_estimated: int = 0
    requests_expired: int = 0  # forgotten after max_wait_s + pending_expiry_margin_s without both halves
    requests_shed: int = 0  # refused by the simulator's full queue (limits.max_simulated_queue), then forgotten

    def snapshot(self) -> dict[str, Any]:
        return {
            "latency": {m: {s: h.snapshot() for s, h in d.items()} for m, d in self.latency.items()},
            "ape": {m: {s: h.snapshot() for s, h in d.items()} for m, d in self.ape.items()},
            "counters": {c: dict(d) for c, d in self.counters.items()},
            "events_processed": self.events_processed,
            "events_late": self.events_late,
            "requests_estimated": self.requests_estimated,
            "requests_expired": self.requests_expired,
            "requests_shed": self.requests_shed,
        }

    @classmethod
    def restore(cls, data: dict[str, Any]) -> InstanceStats:
        st = cls()
        for m, d in data["latency"].items():
            for s, h in d.items():
                st.latency[m][s].restore(h)
        for m, d in data["ape"].items():
            for s, h in d.items():
                st.ape[m][s].restore(h)
        st.counters = {c: {s: int(v) for s, v in d.items()} for c, d in data["counters"].items()}
        st.events_processed = int(data["events_processed"])
        st.events_late = int(data["events_late"])
        st.requests_estimated = int(data.get("requests_estimated", 0))
        st.requests_expired = int(data.get("requests_expired", 0))
        st.requests_shed = int(data.get("requests_shed", 0))  # absent before the queue bound
        return st
