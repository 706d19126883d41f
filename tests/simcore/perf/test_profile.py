"""Calibration profiles: versioned, content-hashed, refused when edited by hand."""
from __future__ import annotations

import json

import pytest

from simcore.errors import UserError
from simcore.perf.calibrate import RatioFit
from simcore.perf.profile import CalibrationProfile, default_profile


def test_hash_covers_factors_not_labels() -> None:
    a = CalibrationProfile()
    assert a.profile_hash == CalibrationProfile(name="other", source="elsewhere").profile_hash
    assert a.profile_hash != CalibrationProfile(gpu_per_req_s=1e-5).profile_hash
    assert a.profile_hash != CalibrationProfile(op_scale={"gemm": 1.1}).profile_hash
    assert a.scale("gemm") == 1.0 and CalibrationProfile(op_scale={"gemm": 1.1}).scale("gemm") == 1.1


def test_save_load_roundtrip_and_tamper_check(tmp_path) -> None:
    p = tmp_path / "prof.json"
    prof = CalibrationProfile(name="x", cpu_base_s=1e-3, roofline={"mem_eff": 0.7})
    prof.save(p)
    data = json.loads(p.read_text())
    assert data["profile_hash"] == prof.profile_hash
    assert CalibrationProfile.load(p) == prof
    data["cpu_base_s"] = 2e-3
    p.write_text(json.dumps(data))
    with pytest.raises(UserError, match="edited by hand"):
        CalibrationProfile.load(p)
    with pytest.raises(UserError, match="no profile file"):
        CalibrationProfile.load(tmp_path / "missing.json")


def test_shipped_profile_is_valid_and_physical() -> None:
    prof = default_profile()
    assert prof.name == "default"
    eff = prof.roofline
    assert 0.5 < eff["gemm_compute_eff"] < 0.9 and 0.5 < eff["mem_eff"] < 0.95
    assert 0 < prof.gpu_per_req_s < 1e-4


def test_ratio_fit_is_incremental_least_squares() -> None:
    pairs = [(1.0, 1.2), (2.0, 2.3), (4.0, 4.9)]
    f = RatioFit()
    for p, m in pairs:
        f.add(p, m)
    expected = sum(p * m for p, m in pairs) / sum(p * p for p, _ in pairs)
    assert f.k == pytest.approx(expected)
    again = RatioFit.from_stat(f.stat())
    again.add(8.0, 9.6)
    assert again.n == 4 and again.k == pytest.approx((expected * 21 + 76.8) / 85)
    assert RatioFit().k == 1.0  # no data: no correction
