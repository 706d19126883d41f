"""Acceptance: end-to-end accuracy on real SGLang measurements (Qwen3-32B, H100 SXM, TP1–8, 84 runs).

`shadowsim validate ../shared/data/validation/sglang_qwen3_32b_h100.csv` with the shipped profile (settings
that are not tuned per row or per model) must give TPOT MAPE ≤ 10% and TTFT MAPE ≤ 20%.
"""
from __future__ import annotations

from shadowsim.commands.validate import read_rows
from simcore.perf.validation import validate


def test_qwen3_32b_h100_file(shared_dir) -> None:
    rows = read_rows(shared_dir / "data" / "validation" / "sglang_qwen3_32b_h100.csv")
    out = validate(rows)
    assert out["skipped"] == []
    s = out["summary"]
    assert s["tpot"]["n"] == s["ttft"]["n"] == 84
    assert s["tpot"]["mape"] <= 10.0
    assert s["ttft"]["mape"] <= 20.0
