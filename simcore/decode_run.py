"""Decode runs: a stretch of decode steps in which nothing can change the batch, computed in one pass.

Between two events that change the batch (an admissible arrival, a finish, a retraction, a chunk boundary, a
CUDA-graph size change) the scheduler builds the same decode batch every iteration: the same ``n`` rows, Σkv one
row per request larger each step, no allocation beyond the free pool. :class:`simcore.server.Server` recognises
such a stretch and jumps to its end (docs/architecture.md, "Decode runs"); this module prices its steps:

- :class:`DecodeStepTimes`: the step times of the run, ``step_time(BatchShape(num_decode=n,
  decode_sum_kv=S0 + j·n, cuda_graph_bs=pad))`` for ``j = 0 … steps−1``, through the model's own
  ``LatencyModel.step_time`` (the only interface it relies on, so any pricing works). With ``knot_spacing = 0``
  every step is priced by the model (bit-identical to step-by-step simulation). With ``knot_spacing > 0`` the
  model is priced at *knots* ``k·Q`` of Σkv only, with ``Q`` a power of two no larger than
  ``Σkv · knot_spacing`` (so knot spacing is at most that fraction of Σkv), and interpolated linearly between
  them; knots are memoized and shared by every run of the same batch size. Linear interpolation of a function
  that is locally a power law ``c·S^a`` (every table curve and roofline term) errs by at most
  ``|a(a−1)|/8 · (Q/S)²`` relative, and by ``|Δa|/4 · Q/S`` across a kink of a piecewise curve: with the
  default 1/1024 spacing, under 10⁻³ relative for any slope change below 4. ``tests/simcore/test_decode_run.py``
  measures the error against the model itself (H100/H200/A100/L40S tables, roofline, MoE and MLA models) and
  checks a 10⁻⁴ bound (measured ≤ 6·10⁻⁸).

The model must declare ``pure_step_time`` (``simcore.perf.base.has_pure_step_time``): steps are priced ahead of
their simulated time, and knots are shared between runs.
"""
from __future__ import annotations

from simcore.perf.base import BatchShape, LatencyModel

# Default knot spacing of the interpolated step times: at most this fraction of Σkv (docs/architecture.md).
DEFAULT_MAX_REL_SPACING = 1.0 / 1024
_KNOT_MEMO_LIMIT = 500_000


class DecodeStepTimes:
    """GPU and CPU seconds of the steps of a decode run, priced by ``latency.step_time``.

    ``knot_spacing`` = 0: every step priced exactly. > 0: knots at most ``knot_spacing × Σkv`` apart, linear
    interpolation in between (error bound in the module docstring; exact whenever the spacing rounds to the
    batch's own Σkv step)."""

    __slots__ = ("latency", "knot_spacing", "_knots")

    def __init__(self, latency: LatencyModel, knot_spacing: float = DEFAULT_MAX_REL_SPACING) -> None:
        if not 0.0 <= knot_spacing < 1.0:
            raise ValueError(f"knot_spacing must be in [0, 1), got {knot_spacing}")
        self.latency = latency
        self.knot_spacing = knot_spacing
        self._knots: dict[tuple[int, int | None, int], tuple[float, float]] = {}

    def price(self, rows: int, graph_bs: int | None, sum_kv: int) -> tuple[float, float]:
        """(gpu_s, cpu_s) of one decode step, from the model."""
        st = self.latency.step_time(BatchShape((), (), rows, sum_kv, (), graph_bs))
        return st.gpu_s, st.cpu_s

    def _knot(self, rows: int, graph_bs: int | None, x: int) -> tuple[float, float]:
        key = (rows, graph_bs, x)
        v = self._knots.get(key)
        if v is None:
            if len(self._knots) >= _KNOT_MEMO_LIMIT:
                self._knots.clear()
            v = self._knots[key] = self.price(rows, graph_bs, x)
        return v

    def times(self, rows: int, graph_bs: int | None, sum_kv0: int, steps: int) -> tuple[list[float], list[float]]:
        """(gpu_s, cpu_s) lists for ``steps`` decode steps of ``rows`` rows, step j at Σkv = sum_kv0 + j·rows."""
        q = self.spacing(sum_kv0)
        if q <= rows:  # knots no sparser than the steps: price each step
            pairs = [self.price(rows, graph_bs, sum_kv0 + j * rows) for j in range(steps)]
            return [p[0] for p in pairs], [p[1] for p in pairs]
        gpu: list[float] = []
        cpu: list[float] = []
        s = sum_kv0
        k = s // q
        x0 = k * q
        g0, c0 = self._knot(rows, graph_bs, x0)
        g1, c1 = self._knot(rows, graph_bs, x0 + q)
        for _ in range(steps):
            while s >= x0 + q:
                x0 += q
                g0, c0 = g1, c1
                g1, c1 = self._knot(rows, graph_bs, x0 + q)
            w = (s - x0) / q
            gpu.append(g0 + (g1 - g0) * w)
            cpu.append(c0 + (c1 - c0) * w)
            s += rows
        return gpu, cpu

    def spacing(self, sum_kv: int) -> int:
        """Knot spacing for runs starting at ``sum_kv``: the largest power of two ≤ spacing × Σkv (≥ 1)."""
        if self.knot_spacing <= 0.0:
            return 1
        want = int(sum_kv * self.knot_spacing)
        return 1 << (want.bit_length() - 1) if want >= 1 else 1
