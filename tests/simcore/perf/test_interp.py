"""Log-log interpolation: exact on power laws, flat below the first measurement, holes tolerated."""
from __future__ import annotations

import math

import numpy as np
import pytest

from simcore.perf.interp import Curve, LogGrid


def test_curve_is_exact_on_a_power_law_and_flat_below_range() -> None:
    xs = [1, 4, 16, 64]
    c = Curve(xs, [3.0 * x**1.5 for x in xs])
    assert c(8) == pytest.approx(3.0 * 8**1.5)
    assert c(100) == pytest.approx(3.0 * 100**1.5)  # last-segment slope continues (1.5 ≤ 2)
    assert c(0.5) == pytest.approx(3.0)  # never faster than the smallest measured call


def test_curve_clamps_extrapolation_slope() -> None:
    c = Curve([1, 2], [1.0, 16.0])  # slope 4 in log-log, e.g. a noisy tail
    assert c(4) == pytest.approx(16.0 * 2**2)


def test_loggrid_exact_on_separable_power_law_with_holes() -> None:
    a, b = np.array([1.0, 2.0, 4.0, 8.0]), np.array([10.0, 100.0, 1000.0])
    vals = np.array([[2 * x * y**0.5 for y in b] for x in a])
    g = LogGrid([a, b], vals)
    assert g.at([3.0, 300.0]) == pytest.approx(2 * 3 * 300**0.5)
    vals[1, 1] = np.nan  # a missing measurement next to the query point
    g2 = LogGrid([a, b], vals)
    assert g2.at([3.0, 300.0]) == pytest.approx(2 * 3 * 300**0.5, rel=1e-9)
    assert math.isfinite(g2.at([2.0, 100.0]))  # exactly on the hole: neighbours answer


def test_curve_along_axis() -> None:
    a, b = np.array([1.0, 10.0]), np.array([1.0, 2.0, 4.0])
    g = LogGrid([a, b], np.array([[x * y for y in b] for x in a]))
    c = g.curve_along(1, [5.0])
    assert c(3.0) == pytest.approx(15.0)


def _numpy_at(g: LogGrid, point: list[float]) -> float:
    """The grid lookup as it was written on the numpy arrays (searchsorted brackets, N-d indexing)."""
    from itertools import product
    br = []
    for d, p in enumerate(point):
        la, t = g.log_axes[d], math.log(max(p, 1e-12))
        if len(la) == 1:
            br.append((0, 0, 0.0))
            continue
        i = min(max(int(np.searchsorted(la, t, side="right")), 1), len(la) - 1)
        br.append((i - 1, i, float((t - la[i - 1]) / (la[i] - la[i - 1]))))
    acc = wsum = 0.0
    for corner in product((0, 1), repeat=len(br)):
        w, idx = 1.0, []
        for (lo, hi, f), c in zip(br, corner):
            idx.append(hi if c else lo)
            w *= f if c else (1.0 - f)
        v = g.logv[tuple(idx)]
        if w == 0.0 or math.isnan(v):
            continue
        acc += w * v
        wsum += w
    return math.exp(acc / wsum) if abs(wsum - 1.0) > 1e-9 else math.exp(acc)


def test_pure_python_lookup_and_pickle_are_the_numpy_grid_bit_for_bit() -> None:
    """LogGrid evaluates on flat pure-Python copies (start-up: a pickled grid needs no numpy); the results must be
    the very floats of indexing the numpy arrays, before and after a pickle round trip, holes included."""
    import pickle
    import random

    rnd = random.Random(5)
    a, b, c = np.array([1.0, 3.0, 8.0, 40.0]), np.array([16.0, 64.0, 512.0]), np.array([2.0, 7.0])
    vals = np.array([[[x**0.9 * y**1.3 * z * (1 + 0.05 * rnd.random()) for z in c] for y in b] for x in a])
    vals[2, 1, 0] = np.nan
    g = LogGrid([a, b, c], vals, fill=False)
    blob = pickle.dumps(g)
    assert b"numpy" not in blob  # plain lists and an array('d'): unpickling imports no numpy
    back = pickle.loads(blob)
    for _ in range(300):
        pt = [rnd.uniform(0.5, 60.0), rnd.uniform(8.0, 900.0), rnd.uniform(1.0, 9.0)]
        assert g.at(pt) == back.at(pt) == _numpy_at(g, pt)
    assert np.array_equal(back.logv, g.logv, equal_nan=True)  # arrays rebuilt on first access
    assert all(np.array_equal(x, y) for x, y in zip(back.axes, g.axes))
    assert back.curve_along(0, [100.0, 3.0])(5.0) == g.curve_along(0, [100.0, 3.0])(5.0)
