"""simcore.perf.decode_split: a run's decode steps against the prefill pauses between them, by hand."""
import pytest

from simcore.perf.base import BatchShape
from simcore.perf.decode_split import split_decode
from simcore.results import StepRecord


def _step(start_s: float, end_s: float, shape: BatchShape) -> StepRecord:
    return StepRecord(start_s, end_s, shape, num_running=0, num_waiting=0, kv_used=0, kv_capacity=1,
                      new_token_ratio=0.0)


def test_a_run_splits_into_its_decode_step_and_the_pause_each_decode_step_carries():
    # four decode steps of 10, 10, 12, 12 ms (2, 2, 4, 4 rows over 1000, 1000, 4000, 4000 KV tokens), one 30 ms
    # prefill and one 10 ms mixed step: decode step 44/4 = 11 ms, pause (30 + 10)/4 = 10 ms per decode step
    steps = [
        _step(0.000, 0.030, BatchShape(extend_lens=(500,), prefix_lens=(0,))),
        _step(0.030, 0.040, BatchShape(num_decode=2, decode_sum_kv=1000, cuda_graph_bs=2)),
        _step(0.040, 0.050, BatchShape(num_decode=2, decode_sum_kv=1000, cuda_graph_bs=2)),
        _step(0.050, 0.060, BatchShape(extend_lens=(100,), prefix_lens=(0,), num_decode=2, decode_sum_kv=1002)),
        _step(0.060, 0.072, BatchShape(num_decode=4, decode_sum_kv=4000, cuda_graph_bs=4)),
        _step(0.072, 0.084, BatchShape(num_decode=4, decode_sum_kv=4000, cuda_graph_bs=4)),
    ]
    split = split_decode(steps)
    assert split.decode_steps == 4
    assert split.decode_step_s == pytest.approx(0.011)
    assert split.pause_per_decode_step_s == pytest.approx(0.010)
    assert split.mean_batch == pytest.approx(3.0)  # (2 + 2 + 4 + 4) / 4
    assert split.mean_kv == pytest.approx(10000 / 12)  # KV tokens per decode row
    # a measured TPOT of 19 ms with these prefills implies a 9 ms decode step
    assert split.implied_decode_step_s(0.019) == pytest.approx(0.009)


def test_a_run_without_a_decode_step_is_refused():
    with pytest.raises(ValueError, match="no decode-only step"):
        split_decode([_step(0.0, 0.03, BatchShape(extend_lens=(500,), prefix_lens=(0,)))])


def test_on_a_b300_row_decode_step_plus_pause_is_the_simulated_tpot_and_observing_changes_nothing():
    # docs/accuracy.md §3.12 "B300: the decode step": the first-order split holds on a real row of the InferenceX
    # file (nvfp4 TP8/EP8, 1024 × 1024, C = 4, prompts ×5.16 on the server), and the observer leaves the run alone
    from pathlib import Path

    from shadowsim.commands.validate import read_rows
    from simcore.perf.validation import simulate_row

    path = Path(__file__).resolve().parents[3] / "validation" / "sglang_deepseek_inferencex.csv"
    row = next(r for r in read_rows(path) if r.id == "dsr1_b300_sglang_fp4_agg_1024x1024_c4_cfg718")
    steps: list = []
    observed = simulate_row(row, observer=steps.append)
    assert observed.predicted["tpot"] == pytest.approx(simulate_row(row).predicted["tpot"], rel=1e-9)
    split = split_decode(steps)
    assert 3.5 < split.mean_batch <= 4.0
    assert 5000 < split.mean_kv < 5600  # ~4.8k server prompt tokens + half of ~920 outputs
    tpot_ms = observed.predicted["tpot"]
    assert (split.decode_step_s + split.pause_per_decode_step_s) * 1e3 == pytest.approx(tpot_ms, rel=0.03)
