"""Interpolation on measured grids, in log-log space.

GPU kernel latencies follow power laws piecewise: flat (launch-bound), ∝ size (memory- or compute-bound),
∝ size² (causal attention). Interpolating log(latency) linearly in log(size) is exact for any power law and
never produces negative times, so every table lookup in simcore.perf goes through these two helpers.

- `Curve`: one measured axis, evaluated on the hot path (pure Python bisect, well under a microsecond).
- `LogGrid`: an N-d grid with holes (NaN), evaluated only when a `Curve` is built for one op shape.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from itertools import product
from typing import Sequence

import numpy as np


class Curve:
    """Piecewise power law through points (x_i, y_i), x and y > 0, x strictly increasing.

    Below the first point the curve is flat (a kernel cannot get faster than its smallest measured size);
    above the last it continues the last segment's slope, clamped to [0, 2] so a noisy tail cannot explode.
    """

    __slots__ = ("lx", "ly", "n")

    def __init__(self, xs: Sequence[float], ys: Sequence[float]) -> None:
        pts = sorted((float(x), float(y)) for x, y in zip(xs, ys) if x > 0 and y > 0 and math.isfinite(y))
        if not pts:
            raise ValueError("Curve needs at least one positive point")
        self.lx = [math.log(x) for x, _ in pts]
        self.ly = [math.log(y) for _, y in pts]
        self.n = len(pts)

    def __call__(self, x: float) -> float:
        lx = self.lx
        if self.n == 1 or x <= 0:
            return math.exp(self.ly[0])
        t = math.log(x)
        if t <= lx[0]:
            return math.exp(self.ly[0])
        i = bisect_right(lx, t)
        if i >= self.n:
            slope = (self.ly[-1] - self.ly[-2]) / (lx[-1] - lx[-2])
            slope = min(2.0, max(0.0, slope))
            return math.exp(self.ly[-1] + slope * (t - lx[-1]))
        w = (t - lx[i - 1]) / (lx[i] - lx[i - 1])
        return math.exp(self.ly[i - 1] + w * (self.ly[i] - self.ly[i - 1]))


def _fill_line(lx: np.ndarray, ly: np.ndarray) -> np.ndarray:
    """Fill NaNs of one grid line: interpolate inside, continue the end slopes (clamped to [0, 2]) outside."""
    ok = ~np.isnan(ly)
    if ok.sum() < 2 or ok.all():
        return ly
    x, y = lx[ok], ly[ok]
    out = np.interp(lx, x, y)
    lo_slope = min(2.0, max(0.0, (y[1] - y[0]) / (x[1] - x[0])))
    hi_slope = min(2.0, max(0.0, (y[-1] - y[-2]) / (x[-1] - x[-2])))
    out = np.where(lx < x[0], y[0] + lo_slope * (lx - x[0]), out)
    out = np.where(lx > x[-1], y[-1] + hi_slope * (lx - x[-1]), out)
    return np.where(ok, ly, out)


def _fill_holes(logv: np.ndarray, log_axes: Sequence[np.ndarray]) -> np.ndarray:
    """Fill unmeasured cells with the mean (in log space) of 1-D power-law fills along each axis.

    Exact for separable power laws; measured cells are never changed. Cells no axis can reach stay NaN.
    """
    holes = np.isnan(logv)
    if not holes.any():
        return logv
    acc = np.zeros_like(logv)
    cnt = np.zeros_like(logv)
    for d, la in enumerate(log_axes):
        filled = np.apply_along_axis(lambda line: _fill_line(la, line), d, logv)
        ok = holes & ~np.isnan(filled)
        acc[ok] += filled[ok]
        cnt[ok] += 1
    out = logv.copy()
    has = holes & (cnt > 0)
    out[has] = acc[has] / cnt[has]
    return out


class LogGrid:
    """Latencies on a rectangular grid (axes of positive values), NaN where not measured.

    ``at(point)`` interpolates multilinearly in (log axis, log latency), extrapolating along an axis from
    its two outermost values when the point lies outside. Missing corners are skipped and the remaining
    weights renormalized; returns NaN when no corner around the point was measured.
    """

    def __init__(self, axes: Sequence[np.ndarray], values: np.ndarray, fill: bool = True) -> None:
        self.axes = [np.asarray(a, dtype=float) for a in axes]
        self.log_axes = [np.log(a) for a in self.axes]
        with np.errstate(divide="ignore", invalid="ignore"):
            self.logv = np.where(values > 0, np.log(values), np.nan)
        if fill:
            self.logv = _fill_holes(self.logv, self.log_axes)

    @classmethod
    def from_points(cls, coords: Sequence[np.ndarray], latency: np.ndarray) -> LogGrid:
        """Build from scattered rows (one array per axis, same length as ``latency``)."""
        axes = [np.unique(c) for c in coords]
        idx = tuple(np.searchsorted(a, c) for a, c in zip(axes, coords))
        vals = np.full([len(a) for a in axes], np.nan)
        vals[idx] = latency
        return cls(axes, vals)

    def _bracket(self, d: int, t: float) -> tuple[int, int, float]:
        la = self.log_axes[d]
        if len(la) == 1:
            return 0, 0, 0.0
        i = int(np.searchsorted(la, t, side="right"))
        i = min(max(i, 1), len(la) - 1)
        w = (t - la[i - 1]) / (la[i] - la[i - 1])
        return i - 1, i, float(w)

    def at(self, point: Sequence[float]) -> float:
        br = [self._bracket(d, math.log(max(p, 1e-12))) for d, p in enumerate(point)]
        acc, wsum = 0.0, 0.0
        for corner in product((0, 1), repeat=len(br)):
            w = 1.0
            idx = []
            for (lo, hi, f), c in zip(br, corner):
                idx.append(hi if c else lo)
                w *= f if c else (1.0 - f)
            v = self.logv[tuple(idx)]
            if w == 0.0 or math.isnan(v):
                continue
            acc += w * v
            wsum += w
        if wsum <= 1e-9 or wsum > 1e9:
            return self._nearest(point)
        # Renormalize only when corners were missing (wsum ≠ 1); exact otherwise, extrapolation included.
        return math.exp(acc / wsum) if abs(wsum - 1.0) > 1e-9 else math.exp(acc)

    def _nearest(self, point: Sequence[float]) -> float:
        """Value of the measured grid point closest in log space (fallback around holes)."""
        valid = np.argwhere(~np.isnan(self.logv))
        if len(valid) == 0:
            return float("nan")
        t = np.array([math.log(max(p, 1e-12)) for p in point])
        coords = np.stack([self.log_axes[d][valid[:, d]] for d in range(len(point))], axis=1)
        j = int(np.argmin(((coords - t) ** 2).sum(axis=1)))
        return float(math.exp(self.logv[tuple(valid[j])]))

    def curve_along(self, axis: int, fixed: Sequence[float]) -> Curve:
        """A `Curve` along ``axis`` at its measured values, the other coordinates held at ``fixed``
        (``fixed`` lists the other axes' values in order, skipping ``axis``)."""
        xs, ys = [], []
        for x in self.axes[axis]:
            pt = list(fixed)
            pt.insert(axis, float(x))
            y = self.at(pt)
            if math.isfinite(y):
                xs.append(float(x))
                ys.append(y)
        return Curve(xs, ys)
