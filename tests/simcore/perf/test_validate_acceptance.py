"""Acceptance: end-to-end accuracy on real SGLang measurements (Qwen3-32B, H100 SXM, TP1–8, 84 runs).

`shadowsim validate ../shared/data/validation/sglang_qwen3_32b_h100.csv` with the shipped profile and the default
benchmark protocol (settings that are not tuned per row or per model). Measured when written: TTFT MAPE 15.2%,
TPOT MAPE 4.6% over all 84 runs; TTFT 10.4% over the 78 TP2–8 runs. With the overlap loop's first-token wait for
the next eager launch (simcore.perf.launch_queue, issue 9): 14.95 / 4.71, TP2–8 10.15 / 3.96; issue 9's acceptance
is TTFT ≤ 15% and TPOT ≤ 5% on the whole file (a fixed seed gives these figures exactly). The six TP1 runs are ~77% off on TTFT
because the real server's KV pool was ~7.5k tokens where the default sizing gives 18.4k (docs/accuracy.md §3.4).
"""
from __future__ import annotations

from shadowsim.commands.validate import read_rows
from simcore.perf.validation import error_summary, validate


def test_qwen3_32b_h100_file(shared_dir) -> None:
    rows = read_rows(shared_dir / "data" / "validation" / "sglang_qwen3_32b_h100.csv")
    out = validate(rows)
    assert out["skipped"] == []
    s = out["summary"]
    assert s["tpot"]["n"] == s["ttft"]["n"] == 84
    assert s["tpot"]["mape"] <= 5.0
    assert s["ttft"]["mape"] <= 15.0
    multi_gpu = error_summary([r for r in out["_results"] if r.row.tp > 1])
    assert multi_gpu["ttft"]["n"] == 78
    assert multi_gpu["ttft"]["mape"] <= 11.5 and multi_gpu["ttft"]["median_ape"] <= 9.5
    assert multi_gpu["tpot"]["mape"] <= 5.0
