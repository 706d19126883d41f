"""Per-slice error statistics (simcore/perf/slices.py) on hand-made results."""
from __future__ import annotations

import pytest

from simcore.perf.slices import all_slices, slice_summary
from simcore.perf.validation import RowResult


class _Row:
    def __init__(self, gpu: str, precision: str | None, tp: int, ep: int) -> None:
        self.gpu, self.precision, self.tp, self.ep = gpu, precision, tp, ep


def _res(row: _Row, ttft: float, tpot: float) -> RowResult:
    return RowResult(row, {}, {"ttft": ttft, "tpot": tpot, "throughput": None})


def test_slices_group_rows_and_average_their_errors() -> None:
    results = [_res(_Row("b200_sxm", "nvfp4", 8, 8), 10.0, 2.0), _res(_Row("b200_sxm", "fp8", 8, 1), 30.0, 4.0),
               _res(_Row("b300_sxm", "nvfp4", 4, 4), 50.0, 6.0)]
    by_gpu = slice_summary(results, "gpu")
    assert [(s["value"], s["rows"]) for s in by_gpu] == [("b200_sxm", 2), ("b300_sxm", 1)]
    assert by_gpu[0]["summary"]["ttft"]["mape"] == pytest.approx(20.0)
    by_ep = {s["value"]: s for s in slice_summary(results, "ep>1")}
    assert by_ep[True]["rows"] == 2 and by_ep[True]["summary"]["tpot"]["mape"] == pytest.approx(4.0)
    every = all_slices(results)
    assert every[0]["value"] == "all" and every[0]["summary"]["ttft"]["mape"] == pytest.approx(30.0)
    assert {s["slice"] for s in every} == {"all", "gpu", "precision", "tp", "ep", "ep>1"}
    assert [s["value"] for s in slice_summary(results, "precision")] == ["fp8", "nvfp4"]
