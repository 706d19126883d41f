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
