"""Pure analysis over simulation results: SLO attainment, Pareto fronts and the max-rate-under-SLO search.

Used by ``shadowsim predict``/``shadowsim sweep`` (docs/whatif.md). Nothing here runs a simulation or does I/O:
the search takes the evaluation as an injected function, so it is tested with plain arithmetic.

Units: seconds for latencies and objectives, requests per second for rates and goodput.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Protocol, Sequence


class _Timed(Protocol):
    """What SLO attainment reads from a request record (simcore.results.RequestRecord has these)."""

    arrival_s: float
    finish_s: float
    ttft_s: float
    tpot_s: float | None
    aborted: bool


# ---- SLO attainment ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SloReport:
    """Fractions (0-1) of requests meeting each SLO and both, and goodput.

    An SLO that was not given is met by every request and its own fraction is None. A request without a TPOT
    (one output token) meets the TPOT SLO: it has no inter-token gap to miss. An aborted request meets neither.
    ``goodput_rps``: requests meeting both per second of the run's span (first arrival to last finish, the
    same span as ``throughput_rps``), so goodput = throughput x ``both`` fraction.
    """

    ttft_slo_ms: float | None
    tpot_slo_ms: float | None
    num_requests: int
    ttft_ok: float | None
    tpot_ok: float | None
    both_ok: float
    goodput_rps: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def slo_attainment(records: Sequence[_Timed], *, ttft_slo_s: float | None = None,
                   tpot_slo_s: float | None = None) -> SloReport:
    """Per-request SLO check over ``records`` (any order). Thresholds are inclusive: ttft <= SLO meets it."""
    n = len(records)
    ttft_ok = tpot_ok = both = 0
    for r in records:
        a = not r.aborted and (ttft_slo_s is None or r.ttft_s <= ttft_slo_s)
        b = not r.aborted and (tpot_slo_s is None or r.tpot_s is None or math.isnan(r.tpot_s)
                               or r.tpot_s <= tpot_slo_s)
        ttft_ok += a
        tpot_ok += b
        both += a and b
    span = (max(r.finish_s for r in records) - min(r.arrival_s for r in records)) if n else 0.0
    span = max(span, 1e-12)

    def frac(k: int, given: float | None) -> float | None:
        return None if given is None else (k / n if n else 0.0)

    return SloReport(
        ttft_slo_ms=None if ttft_slo_s is None else ttft_slo_s * 1000.0,
        tpot_slo_ms=None if tpot_slo_s is None else tpot_slo_s * 1000.0,
        num_requests=n, ttft_ok=frac(ttft_ok, ttft_slo_s), tpot_ok=frac(tpot_ok, tpot_slo_s),
        both_ok=both / n if n else 0.0, goodput_rps=both / span if n else 0.0)


# ---- Pareto front ------------------------------------------------------------------------------------------
def _oriented(values: Sequence[float | None], maximize: Sequence[bool]) -> tuple[float, ...]:
    """Turn every objective into 'larger is better'; a missing or NaN value is the worst possible."""
    out = []
    for v, up in zip(values, maximize, strict=True):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            out.append(-math.inf)
        else:
            out.append(float(v) if up else -float(v))
    return tuple(out)


def dominates(a: Sequence[float | None], b: Sequence[float | None], maximize: Sequence[bool]) -> bool:
    """True when ``a`` is at least as good as ``b`` in every objective and strictly better in one.

    Two equal points do not dominate each other, so ties are both Pareto-optimal.
    """
    return _dominates(_oriented(a, maximize), _oriented(b, maximize))


def _dominates(oa: tuple[float, ...], ob: tuple[float, ...]) -> bool:
    """:func:`dominates` over already oriented ('larger is better') points."""
    return all(x >= y for x, y in zip(oa, ob)) and any(x > y for x, y in zip(oa, ob))


def pareto_front(points: Sequence[Sequence[float | None]], maximize: Sequence[bool]) -> list[int]:
    """Indices (ascending) of the points no other point dominates.

    ``maximize[k]`` says whether objective k is to be maximised (throughput per GPU) or minimised (a latency
    percentile). O(n² k): sweeps have tens to hundreds of points.
    """
    if any(len(p) != len(maximize) for p in points):
        raise ValueError("every point needs one value per objective")
    oriented = [_oriented(p, maximize) for p in points]
    return [i for i, p in enumerate(oriented)
            if not any(_dominates(q, p) for j, q in enumerate(oriented) if j != i)]


# ---- max rate under an SLO ---------------------------------------------------------------------------------
@dataclass
class RateSearch:
    """Result of :func:`max_rate_under_slo`.

    ``rate``: the largest rate seen to meet the objective (None when even ``lo`` misses it). ``upper``: the
    smallest rate seen to miss it (None when ``hi`` still meets it, i.e. the answer is at least ``hi``).
    ``evaluations``: every (rate, met) probed, in order.
    """

    rate: float | None
    upper: float | None
    evaluations: list[tuple[float, bool]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"rate": self.rate, "upper": self.upper,
                "evaluations": [{"rate": r, "met": m} for r, m in self.evaluations]}


def max_rate_under_slo(meets: Callable[[float], bool], lo: float, hi: float, *, rel_tol: float = 0.05,
                       max_evals: int = 12) -> RateSearch:
    """Bisect for the largest rate in [lo, hi] with ``meets(rate)`` true, assuming it is monotone (true below
    the knee, false above). Stops when ``upper - rate <= rel_tol x rate`` or after ``max_evals`` evaluations.

    Bisects in log space (geometric midpoints): rates span orders of magnitude and the tolerance is relative.
    """
    if not 0 < lo <= hi:
        raise ValueError(f"need 0 < lo <= hi, got lo={lo}, hi={hi}")
    evals: list[tuple[float, bool]] = []

    def probe(r: float) -> bool:
        ok = bool(meets(r))
        evals.append((r, ok))
        return ok

    if not probe(lo):
        return RateSearch(None, lo, evals)
    if hi == lo or probe(hi):
        return RateSearch(hi if hi > lo else lo, None, evals)
    good, bad = lo, hi
    while bad - good > rel_tol * good and len(evals) < max_evals:
        mid = math.sqrt(good * bad)
        if probe(mid):
            good = mid
        else:
            bad = mid
    return RateSearch(good, bad, evals)
