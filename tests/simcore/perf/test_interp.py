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


def _curve_points_by_at(g: LogGrid, axis: int, fixed: list[float]) -> tuple[list[float], list[float]]:
    """``curve_along`` as it was written: ``at`` at every measured value of the axis."""
    xs, ys = [], []
    for x in g._ax[axis]:
        pt = list(fixed)
        pt.insert(axis, float(x))
        y = g.at(pt)
        if math.isfinite(y):
            xs.append(x)
            ys.append(y)
    return xs, ys


def test_curve_along_is_at_bit_for_bit() -> None:
    """curve_along works out the fixed coordinates once (start-up); its points must be the floats ``at`` gives,
    on every axis of random 2-d and 3-d grids with holes (NaN corners skipped, weights renormalized), fixed
    coordinates inside, outside and exactly on the grid, and on the real GEMM and attention tables of an H100
    at the shapes of the catalogue's models."""
    import random

    from simcore.perf.tables import build_tables

    rnd = random.Random(11)
    a, b, c = np.array([1.0, 3.0, 8.0, 40.0]), np.array([16.0, 64.0, 512.0]), np.array([2.0, 7.0])
    for trial in range(20):
        vals = np.array([[[x**0.9 * y**1.3 * z * (1 + 0.05 * rnd.random()) for z in c] for y in b] for x in a])
        for _ in range(trial % 4):
            vals[rnd.randrange(4), rnd.randrange(3), rnd.randrange(2)] = np.nan
        for grid in (LogGrid([a, b, c], vals, fill=False), LogGrid([a, b], vals[:, :, 0], fill=False)):
            ndim = len(grid._ax)
            for axis in range(ndim):
                for fixed in ([rnd.uniform(0.5, 60.0) for _ in range(ndim - 1)],
                              [float(grid._ax[d][rnd.randrange(len(grid._ax[d]))]) for d in range(ndim) if d != axis]):
                    want = _curve_points_by_at(grid, axis, fixed)
                    got = grid.curve_along(axis, fixed)
                    assert (got.lx, got.ly) == (Curve(*want).lx, Curve(*want).ly)
    tables = build_tables("h100_sxm")
    assert tables is not None
    for dtype, t in tables.gemm.items():
        for n, k in ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (128256, 4096), (1000, 3000)):
            want = Curve(*_curve_points_by_at(t.grid, 0, [float(n), float(k)]))
            got = t.grid.curve_along(0, [float(n), float(k)])
            assert (got.lx, got.ly) == (want.lx, want.ly), (dtype, n, k)
    for table in (*tables.context_attention.values(), *tables.generation_attention.values()):
        for grid in table.grids.values():
            for batch in (1.0, 3.0, 64.0, 1000.0):
                want = Curve(*_curve_points_by_at(grid, 1, [batch]))
                got = grid.curve_along(1, [batch])
                assert (got.lx, got.ly) == (want.lx, want.ly)


_PICKLE_CHILD = r"""
import pickle, sys
sys.path.insert(0, sys.argv[1])
from simcore.perf.interp import Curve
c = Curve([1, 4, 16, 64, 256], [3.0, 5.5, 20.0, 71.0, 260.0])
print(pickle.dumps(c, protocol=4).hex(), type(c).__module__, repr([c(x) for x in (0.5, 2, 7.3, 64, 1000)]))
"""


def test_a_curve_pickles_to_the_same_bytes_compiled_and_interpreted_and_back() -> None:
    """The table cache (simcore/perf/tables.py) pickles curves, and one cache serves compiled and
    ``SHADOWSIM_PURE_PYTHON=1`` processes: `Curve.__reduce__` names the module-level ``_curve_from_logs`` (a
    compiled extension type would otherwise pickle through Cython's own ``__pyx_unpickle_Curve``, which the .py
    does not have). Both builds give the same bytes, the same values, and load each other's pickles."""
    import os
    import pickle
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    out = {}
    for pure in (False, True):
        env = {k: v for k, v in os.environ.items() if k != "SHADOWSIM_PURE_PYTHON"}
        if pure:
            env["SHADOWSIM_PURE_PYTHON"] = "1"
        run = subprocess.run([sys.executable, "-c", _PICKLE_CHILD, str(repo)], env=env, cwd=repo,
                             capture_output=True, text=True, check=True, timeout=120)
        out[pure] = run.stdout.split(" ", 2)
    assert out[False][0] == out[True][0]  # the same pickle bytes
    assert out[False][2] == out[True][2]  # the same values, repr for repr
    back = pickle.loads(bytes.fromhex(out[True][0]))
    assert isinstance(back, Curve) and back.n == 5
    assert back.lx == Curve([1, 4, 16, 64, 256], [3.0, 5.5, 20.0, 71.0, 260.0]).lx
    assert repr([back(x) for x in (0.5, 2, 7.3, 64, 1000)]) == out[False][2].strip()
