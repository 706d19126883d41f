"""Interpolation on measured grids, in log-log space.

GPU kernel latencies follow power laws piecewise: flat (launch-bound), ∝ size (memory- or compute-bound),
∝ size² (causal attention). Interpolating log(latency) linearly in log(size) is exact for any power law and
never produces negative times, so every table lookup in simcore.perf goes through these two helpers.

- `Curve`: one measured axis, evaluated on the hot path (pure Python bisect, well under a microsecond).
- `LogGrid`: an N-d grid with holes (NaN), evaluated only when a `Curve` is built for one op shape. Built with
  numpy; evaluated in pure Python on a flat copy, which is all a pickled grid keeps (start-up: loading the
  binary table cache and building curves imports no numpy; the numpy arrays come back on first access).
"""
from __future__ import annotations

import math
from bisect import bisect_right
from array import array
from itertools import product
from typing import TYPE_CHECKING, Any, Sequence

try:
    import cython  # compiled (setup.py NATIVE_MODULES, interp.pxd): Cython's directives; interpreted: no-ops
except ImportError:  # pragma: no cover - Cython is a build dependency, not a runtime one
    from simcore import _pure_cython as cython

if TYPE_CHECKING:
    import numpy as np


def _numpy() -> Any:
    import numpy  # start-up: only building grids (and a few rare paths) needs numpy
    return numpy


class LazyNumpy:
    """Stands for the numpy module and imports it on first attribute access (``np = LazyNumpy()``), so modules
    whose numpy code runs only when tables are built cost nothing to import."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        return getattr(_numpy(), name)


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

    def __reduce__(self) -> tuple[Any, tuple[list[float], list[float]]]:
        # the same pickle compiled (an extension type, interp.pxd) and interpreted: the table cache holds curves
        return _curve_from_logs, (self.lx, self.ly)

    @cython.locals(t=cython.double, lo=cython.double, hi=cython.double, y_lo=cython.double, y_hi=cython.double,
                   w=cython.double, i=cython.Py_ssize_t)
    def __call__(self, x: float) -> float:
        # (compiled, the locals are C doubles: the same IEEE operations in the same order as Python floats)
        lx = self.lx
        ly = self.ly
        if self.n == 1 or x <= 0:
            return math.exp(ly[0])
        t = math.log(x)
        if t <= lx[0]:
            return math.exp(ly[0])
        i = bisect_right(lx, t)
        if i >= self.n:
            slope = (ly[-1] - ly[-2]) / (lx[-1] - lx[-2])
            slope = min(2.0, max(0.0, slope))
            return math.exp(ly[-1] + slope * (t - lx[-1]))
        lo = lx[i - 1]
        hi = lx[i]
        y_lo = ly[i - 1]
        y_hi = ly[i]
        w = (t - lo) / (hi - lo)
        return math.exp(y_lo + w * (y_hi - y_lo))


def _curve_from_logs(lx: list[float], ly: list[float]) -> Curve:
    """A `Curve` from its log-space points, as pickled (`Curve.__reduce__`)."""
    c = Curve.__new__(Curve)
    c.lx = lx
    c.ly = ly
    c.n = len(lx)
    return c


def _fill_line(lx: np.ndarray, ly: np.ndarray) -> np.ndarray:
    """Fill NaNs of one grid line: interpolate inside, continue the end slopes (clamped to [0, 2]) outside."""
    np = _numpy()
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
    np = _numpy()
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

    ``axes``, ``log_axes`` and ``logv`` are numpy arrays; evaluation reads pure-Python copies of the same floats
    (``_ax``, ``_la``: lists; ``_flat``: ``logv`` in C order; ``_strides``), so its results are bit for bit
    what indexing the arrays gives. A pickle holds only those copies; the arrays are rebuilt on first access.
    """

    def __init__(self, axes: Sequence[np.ndarray], values: np.ndarray, fill: bool = True) -> None:
        np = _numpy()
        self._arrays: tuple[Any, Any, Any] | None = None
        ax = [np.asarray(a, dtype=float) for a in axes]
        la = [np.log(a) for a in ax]
        with np.errstate(divide="ignore", invalid="ignore"):
            logv = np.where(values > 0, np.log(values), np.nan)
        if fill:
            logv = _fill_holes(logv, la)
        self._set(ax, la, logv)

    def _set(self, axes: list[Any], log_axes: list[Any], logv: Any) -> None:
        self._arrays = (axes, log_axes, logv)
        self._ax = [[float(x) for x in a] for a in axes]
        self._la = [[float(x) for x in a] for a in log_axes]
        self._shape = tuple(int(n) for n in logv.shape)
        self._flat = array("d", logv.astype(float).ravel(order="C").tobytes())
        strides, acc = [], 1
        for n in reversed(self._shape):
            strides.append(acc)
            acc *= n
        self._strides = tuple(reversed(strides))

    def _materialize(self) -> tuple[Any, Any, Any]:
        if self._arrays is None:
            np = _numpy()
            self._arrays = ([np.array(a, dtype=float) for a in self._ax], [np.array(a, dtype=float) for a in self._la],
                            np.frombuffer(self._flat.tobytes(), dtype=float).reshape(self._shape).copy())
        return self._arrays

    @property
    def axes(self) -> list[Any]:
        return self._materialize()[0]

    @property
    def log_axes(self) -> list[Any]:
        return self._materialize()[1]

    @property
    def logv(self) -> Any:
        return self._materialize()[2]

    @logv.setter
    def logv(self, values: Any) -> None:
        axes, log_axes, _ = self._materialize()
        self._set(axes, log_axes, values)

    def __getstate__(self) -> dict[str, Any]:
        return {"ax": self._ax, "la": self._la, "shape": self._shape, "flat": self._flat, "strides": self._strides}

    def __setstate__(self, st: dict[str, Any]) -> None:
        self._arrays = None
        self._ax, self._la, self._shape, self._flat, self._strides = (st["ax"], st["la"], st["shape"], st["flat"],
                                                                      st["strides"])

    @classmethod
    def from_points(cls, coords: Sequence[np.ndarray], latency: np.ndarray) -> LogGrid:
        """Build from scattered rows (one array per axis, same length as ``latency``)."""
        np = _numpy()
        axes = [np.unique(c) for c in coords]
        idx = tuple(np.searchsorted(a, c) for a, c in zip(axes, coords))
        vals = np.full([len(a) for a in axes], np.nan)
        vals[idx] = latency
        return cls(axes, vals)

    def _bracket(self, d: int, t: float) -> tuple[int, int, float]:
        la = self._la[d]
        if len(la) == 1:
            return 0, 0, 0.0
        i = bisect_right(la, t)  # numpy.searchsorted(side="right") on the same floats
        i = min(max(i, 1), len(la) - 1)
        w = (t - la[i - 1]) / (la[i] - la[i - 1])
        return i - 1, i, w

    def at(self, point: Sequence[float]) -> float:
        br = [self._bracket(d, math.log(max(p, 1e-12))) for d, p in enumerate(point)]
        acc, wsum = 0.0, 0.0
        flat, strides = self._flat, self._strides
        for corner in product((0, 1), repeat=len(br)):
            w = 1.0
            off = 0
            for (lo, hi, f), c, stride in zip(br, corner, strides):
                off += (hi if c else lo) * stride
                w *= f if c else (1.0 - f)
            v = flat[off]
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
        np = _numpy()
        valid = np.argwhere(~np.isnan(self.logv))
        if len(valid) == 0:
            return float("nan")
        t = np.array([math.log(max(p, 1e-12)) for p in point])
        coords = np.stack([self.log_axes[d][valid[:, d]] for d in range(len(point))], axis=1)
        j = int(np.argmin(((coords - t) ** 2).sum(axis=1)))
        return float(math.exp(self.logv[tuple(valid[j])]))

    def curve_along(self, axis: int, fixed: Sequence[float]) -> Curve:
        """A `Curve` along ``axis`` at its measured values, the other coordinates held at ``fixed``
        (``fixed`` lists the other axes' values in order, skipping ``axis``).

        Each point is ``at(point)`` bit for bit (``test_curve_along_is_at_bit_for_bit``), with what does not
        move along the axis worked out once (start-up: a latency model builds its curves in every process): the
        brackets of the fixed coordinates, and per corner the weight factors of the axes before ``axis``
        multiplied in ``at``'s order (starting from 1.0), the factors after it, and the fixed part of the offset.
        """
        ndim = len(self._la)
        fixed_br = [self._bracket(d, math.log(max(p, 1e-12)))
                    for d, p in zip([d for d in range(ndim) if d != axis], fixed)]
        strides = self._strides
        stride = strides[axis]
        corners = []  # (before, after, fixed offset, corner's side on the axis), in at()'s corner order
        for corner in product((0, 1), repeat=ndim):
            before, after, off = 1.0, [], 0
            for d, c in enumerate(corner):
                if d == axis:
                    continue
                lo, hi, f = fixed_br[d if d < axis else d - 1]
                off += (hi if c else lo) * strides[d]
                if d < axis:
                    before *= f if c else (1.0 - f)
                else:
                    after.append(f if c else (1.0 - f))
            corners.append((before, tuple(after), off, corner[axis]))
        flat, isnan, exp = self._flat, math.isnan, math.exp
        xs, ys = [], []
        for x in self._ax[axis]:
            lo, hi, f = self._bracket(axis, math.log(max(float(x), 1e-12)))
            f_hi, f_lo, off_hi, off_lo = f, 1.0 - f, hi * stride, lo * stride
            acc, wsum = 0.0, 0.0
            for before, after, off, c in corners:
                w = before * (f_hi if c else f_lo)
                for g in after:
                    w *= g
                v = flat[off + (off_hi if c else off_lo)]
                if w == 0.0 or isnan(v):
                    continue
                acc += w * v
                wsum += w
            if wsum <= 1e-9 or wsum > 1e9:
                pt = list(fixed)
                pt.insert(axis, float(x))
                y = self._nearest(pt)
            else:
                y = exp(acc / wsum) if abs(wsum - 1.0) > 1e-9 else exp(acc)
            if math.isfinite(y):
                xs.append(x)
                ys.append(y)
        return Curve(xs, ys)
