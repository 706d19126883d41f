"""Drift detection: rolling error windows (model drift) and online calibration factors (performance drift).

Two different questions:

* **Model drift** — are the predictions getting worse? Each finished request gives an absolute percentage error
  (APE) per metric; ``ErrorWindow`` keeps those of the last ``window_s`` seconds of *event time* and reports their
  mean (MAPE). Above the configured threshold (with at least ``min_samples`` requests) the verdict is on.
* **Performance drift** — did the server itself get slower or faster? ``OnlineCalibrator`` compares the step times
  the server reports (``forward_pass`` events, or decode-batch throughput) with what the latency model predicts for
  the same batch shape, and keeps an EWMA of the ratio per op class (``prefill``, ``decode``). A factor that leaves
  ``1 ± performance_band`` means the hardware/software got slower or faster, not that the scheduler model is wrong.

Everything here is event-time driven and deterministic, and snapshots to plain JSON-able dicts.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

OP_CLASSES: tuple[str, ...] = ("prefill", "decode")


def ape(predicted: float, actual: float) -> float | None:
    """|predicted − actual| / actual, or None when the actual is not positive (no defined relative error)."""
    if actual <= 0 or not math.isfinite(predicted) or not math.isfinite(actual):
        return None
    return abs(predicted - actual) / actual


#: APE samples are summed in fixed point (units of 2^-40, ~1e-12): integer sums are exact and independent of the
#: order samples came and went in, so ``mape()`` is O(1) per call and bit-identical after a restore.
_FIXED = float(2**40)


@dataclass
class ErrorWindow:
    """APE samples of the last ``window_s`` seconds of event time. ``mape()`` is their mean (0 when empty)."""

    window_s: float
    samples: deque[tuple[float, float]] = field(default_factory=deque)
    _sum: int = 0  # sum of round(value × 2^40) over samples

    def add(self, ts: float, value: float) -> None:
        """Add a sample at event time ``ts``; the owner calls ``expire`` as its clock advances."""
        self.samples.append((ts, value))
        self._sum += round(value * _FIXED)

    def expire(self, now_ts: float) -> None:
        """Drop samples older than ``now_ts − window_s`` (event time)."""
        cutoff = now_ts - self.window_s
        samples = self.samples
        while samples and samples[0][0] < cutoff:
            self._sum -= round(samples.popleft()[1] * _FIXED)

    def __len__(self) -> int:
        return len(self.samples)

    def mape(self) -> float:
        return self._sum / _FIXED / len(self.samples) if self.samples else 0.0

    def snapshot(self) -> list[list[float]]:
        return [[t, v] for t, v in self.samples]

    @classmethod
    def restore(cls, window_s: float, data: list[list[float]]) -> ErrorWindow:
        w = cls(window_s)
        for t, v in data:
            w.add(float(t), float(v))
        return w


@dataclass
class OnlineCalibrator:
    """EWMA of observed/predicted step time per op class, clamped to ``bounds``.

    ``alpha = 1 − 0.5^(1/halflife_steps)``: after ``halflife_steps`` observations an old level has half its weight.
    """

    halflife_steps: float = 50.0
    bounds: tuple[float, float] = (0.5, 2.0)
    factors: dict[str, float] = field(default_factory=lambda: {c: 1.0 for c in OP_CLASSES})
    counts: dict[str, int] = field(default_factory=lambda: {c: 0 for c in OP_CLASSES})

    # (halflife_steps, alpha): the power is computed once per halflife, not once per observed step
    _alpha_of: tuple[float, float] = field(default=(math.nan, math.nan), init=False, repr=False, compare=False)

    @property
    def alpha(self) -> float:
        h, a = self._alpha_of
        if h != self.halflife_steps:
            a = 1.0 - 0.5 ** (1.0 / self.halflife_steps)
            self._alpha_of = (self.halflife_steps, a)
        return a

    def observe(self, op_class: str, observed_s: float, predicted_s: float) -> None:
        """One step: the server reported ``observed_s`` where the model says ``predicted_s``."""
        factors = self.factors
        if op_class not in factors or predicted_s <= 0 or observed_s <= 0:
            return
        lo, hi = self.bounds
        ratio = observed_s / predicted_s
        ratio = lo if lo > ratio else ratio  # max(ratio, lo), without the calls (the same value, NaN included)
        ratio = hi if hi < ratio else ratio  # min(ratio, hi)
        counts = self.counts
        if counts[op_class] == 0:
            factors[op_class] = ratio  # first sample: start at the data, not at the prior
        else:
            f = factors[op_class]
            h, a = self._alpha_of  # self.alpha, its cache read here
            if h != self.halflife_steps:
                a = self.alpha
            factors[op_class] = f + a * (ratio - f)
        counts[op_class] += 1

    def snapshot(self) -> dict[str, Any]:
        return {"factors": dict(self.factors), "counts": dict(self.counts)}

    def restore(self, data: dict[str, Any]) -> None:
        self.factors = {k: float(v) for k, v in data["factors"].items()}
        self.counts = {k: int(v) for k, v in data["counts"].items()}


@dataclass(frozen=True)
class DriftVerdict:
    """What the detector concludes for one instance right now."""

    model: bool
    performance: bool
    mape: dict[str, float]
    over_threshold: tuple[str, ...]
    factors: dict[str, float]

    @property
    def explanation(self) -> str:
        if self.performance and self.model:
            return "performance drift: the server's step times moved (" + _fmt_factors(self.factors) + ")"
        if self.performance:
            return "performance drift without prediction error yet (" + _fmt_factors(self.factors) + ")"
        if self.model:
            return "model drift: " + ", ".join(self.over_threshold) + " error above threshold, step times steady"
        return "ok"


def _fmt_factors(factors: dict[str, float]) -> str:
    return ", ".join(f"{k} ×{v:.2f}" for k, v in factors.items())


def decide(mape: dict[str, float], counts: dict[str, int], thresholds: dict[str, float], min_samples: int,
           factors: dict[str, float], factor_counts: dict[str, int], baseline: dict[str, float],
           band: float, min_factor_samples: int = 5) -> DriftVerdict:
    """Pure verdict function: model drift when a metric's MAPE exceeds its threshold on enough samples;
    performance drift when a calibrated factor left ``baseline ± band`` on enough steps."""
    over = tuple(m for m, v in mape.items()
                 if m in thresholds and counts.get(m, 0) >= min_samples and v > thresholds[m])
    perf = any(factor_counts.get(c, 0) >= min_factor_samples and abs(f - baseline.get(c, 1.0)) > band
               for c, f in factors.items())
    return DriftVerdict(model=bool(over), performance=perf, mape=dict(mape), over_threshold=over,
                        factors=dict(factors))
