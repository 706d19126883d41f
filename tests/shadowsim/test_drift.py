"""Drift detection: rolling MAPE windows in event time, online calibration factors, and the verdict."""
from __future__ import annotations

import pytest

from shadowsim.shadow.drift import ErrorWindow, OnlineCalibrator, ape, decide


def test_ape_is_relative_to_the_actual_and_undefined_for_zero() -> None:
    assert ape(1.5, 1.0) == pytest.approx(0.5)
    assert ape(0.5, 1.0) == pytest.approx(0.5)
    assert ape(1.0, 0.0) is None


def test_window_keeps_only_the_last_window_s_of_event_time() -> None:
    w = ErrorWindow(window_s=10.0)
    w.add(100.0, 0.1)
    w.add(105.0, 0.3)
    assert w.mape() == pytest.approx(0.2)
    w.add(111.0, 0.5)
    w.expire(111.0)  # 100 is now older than 111 - 10
    assert len(w) == 2
    assert w.mape() == pytest.approx(0.4)
    w.expire(200.0)
    assert len(w) == 0 and w.mape() == 0.0


def test_window_snapshot_round_trip_is_exact() -> None:
    w = ErrorWindow(30.0)
    for i in range(7):
        w.add(float(i), 0.1 * i + 1e-9)
    w2 = ErrorWindow.restore(30.0, w.snapshot())
    assert w2.mape() == w.mape() and len(w2) == 7


def test_calibrator_starts_at_the_first_ratio_then_follows_with_an_ewma() -> None:
    c = OnlineCalibrator(halflife_steps=1.0, bounds=(0.5, 2.0))  # alpha = 0.5
    c.observe("decode", 0.012, 0.010)
    assert c.factors["decode"] == pytest.approx(1.2)
    c.observe("decode", 0.016, 0.010)
    assert c.factors["decode"] == pytest.approx(1.4)
    c.observe("decode", 1.0, 0.010)  # ×100 is clamped to the bound 2.0
    assert c.factors["decode"] == pytest.approx(1.7)
    assert c.factors["prefill"] == 1.0 and c.counts == {"prefill": 0, "decode": 3}


def test_verdict_separates_model_drift_from_performance_drift() -> None:
    thresholds = {"ttft": 0.3, "tpot": 0.2}
    quiet = decide({"ttft": 0.1, "tpot": 0.05}, {"ttft": 20, "tpot": 20}, thresholds, 10,
                   {"decode": 1.02}, {"decode": 50}, {"decode": 1.0}, band=0.15)
    assert not quiet.model and not quiet.performance and quiet.explanation == "ok"
    model = decide({"ttft": 0.5, "tpot": 0.05}, {"ttft": 20, "tpot": 20}, thresholds, 10,
                   {"decode": 1.02}, {"decode": 50}, {"decode": 1.0}, band=0.15)
    assert model.model and not model.performance and model.over_threshold == ("ttft",)
    assert model.explanation.startswith("model drift")
    perf = decide({"ttft": 0.5, "tpot": 0.4}, {"ttft": 20, "tpot": 20}, thresholds, 10,
                  {"decode": 1.5}, {"decode": 50}, {"decode": 1.0}, band=0.15)
    assert perf.model and perf.performance and perf.explanation.startswith("performance drift")


def test_no_verdict_on_too_few_samples() -> None:
    v = decide({"ttft": 0.9}, {"ttft": 3}, {"ttft": 0.3}, 10, {"decode": 1.6}, {"decode": 2}, {"decode": 1.0}, 0.15)
    assert not v.model and not v.performance
