"""Fitting: roofline efficiencies measured on the tables, and the end-to-end per-request grid fit."""
from __future__ import annotations

import pytest

from simcore.gpus import load_gpu
from simcore.perf.calibrate import fit_e2e, fit_roofline, measure_efficiencies, roofline_gemm_error, split_holdout
from simcore.perf.profile import CalibrationProfile


def test_measured_efficiencies_are_physical() -> None:
    e = measure_efficiencies(load_gpu("h100_sxm"))
    assert 0.6 < e["gemm_compute_eff"] < 0.85  # large bf16 GEMMs reach ~72% of 989 TFLOP/s
    assert 0.6 < e["mem_eff"] < 0.9
    assert 1e-6 < e["gemm_floor_s"] < 1e-5 and 1e-6 < e["attn_floor_s"] < 3e-5
    assert 0.3 < e["attn_compute_eff"] < 0.8 and 0.3 < e["comm_eff"] < 1.0


def test_roofline_fitted_on_some_gpus_predicts_another() -> None:
    eff = fit_roofline(["h100_sxm", "a100_sxm"])
    err = roofline_gemm_error("h200_sxm", eff)  # H200 not used in the fit
    assert err["n"] > 30000 and err["median_ape"] < 20.0


def test_split_holdout_is_deterministic() -> None:
    fit, hold = split_holdout(list(range(9)), 3)
    assert hold == [2, 5, 8] and fit == [0, 1, 3, 4, 6, 7]
    assert split_holdout([1, 2], 1) == ([1, 2], [])


def test_fit_e2e_picks_the_grid_minimum() -> None:
    # A fake validator whose TPOT error is |v − 1e-5| scaled: the fit must land on 1e-5.
    def fake(rows, profile):
        e = abs(profile.gpu_per_req_s - 1e-5) * 1e6
        return {"summary": {"tpot": {"mape": e}, "ttft": {"mape": 10.0}}}
    prof, report = fit_e2e(["r"], CalibrationProfile(), validate_fn=fake, grid=(0.0, 5e-6, 1e-5, 2e-5))
    assert prof.gpu_per_req_s == pytest.approx(1e-5)
    assert [r["gpu_per_req_s"] for r in report] == [0.0, 5e-6, 1e-5, 2e-5]


def test_calibrate_cli_writes_a_loadable_profile(tmp_path, capsys) -> None:
    from shadowsim.cli import main

    out = tmp_path / "p.json"
    assert main(["calibrate", "--neutral", "--from-tables", "h100", "--cpu-base-s", "0.002", "--name", "t",
                 "--out", str(out), "--json"]) == 0
    prof = CalibrationProfile.load(out)
    assert prof.name == "t" and prof.cpu_base_s == 0.002 and prof.source == "tables:h100_sxm"
    assert prof.roofline["gemm_compute_eff"] == pytest.approx(measure_efficiencies(load_gpu("h100"))["gemm_compute_eff"],
                                                             rel=1e-3)
    assert main(["calibrate"]) == 2
    assert "nothing to fit" in capsys.readouterr().err
    assert main(["calibrate", "--from-tables", "h20"]) == 2
    assert "no measured tables for h20" in capsys.readouterr().err
