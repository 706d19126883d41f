"""Host-side serial stages beside the GPU loop: the output path (detokenizer → tokenizer manager → SSE) and the
tokenizer in front of the scheduler (settings ``output_path_s_per_*`` and ``tokenizer_s_per_*``).

Latency model ``serverkit.LAT``: a GPU step is 10 ms + 0.1 ms per prefilled token, no CPU time. The runs below use
``disable_overlap_schedule`` so that a batch's tokens leave the scheduler exactly at its GPU end; every time in
the assertions follows from that by hand.
"""
from __future__ import annotations


import pytest

from simcore.perf.base import LinearLatencyModel
from simcore.settings import ServerSettings, resolve

from serverkit import run, req, snapshot_and_resume
from test_server import _workload

FOUR = [req(f"r{i}", 0.0, 100, 5) for i in range(4)]  # one 400-token prefill (50 ms), then 10 ms decode steps


def test_slow_output_path_sets_the_client_visible_step_period() -> None:
    # 1 ms + 5 ms × 4 streams = 21 ms per step > the 10 ms GPU step: tokens queue in the output path.
    # prefill ends at 50 ms → first tokens at 71; decode steps end at 60, 70, 80, 90 ms but each waits for
    # the previous one's output work: 92, 113, 134, 155 ms.
    res = run(FOUR, disable_overlap_schedule=True, output_path_s_per_step=0.001, output_path_s_per_token=0.005)
    base = run(FOUR, disable_overlap_schedule=True)
    for i in range(4):
        r = res.records[f"r{i}"]
        assert r.first_token_s == pytest.approx(0.071)
        assert r.finish_s == pytest.approx(0.155)
        assert r.tpot_s == pytest.approx(0.021)
        assert base.records[f"r{i}"].finish_s == pytest.approx(0.090)
    # the scheduler never waits for the output path: the GPU timeline is unchanged
    assert [(s.start_s, s.end_s) for s in res.steps] == [(s.start_s, s.end_s) for s in base.steps]


def test_fast_output_path_only_adds_its_own_latency() -> None:
    # 1 ms + 0.5 ms × 4 = 3 ms per step, under the 10 ms step: every token is exactly 3 ms later
    res = run(FOUR, disable_overlap_schedule=True, output_path_s_per_step=0.001, output_path_s_per_token=0.0005)
    r = res.records["r0"]
    assert (r.first_token_s, r.finish_s, r.tpot_s) == pytest.approx((0.053, 0.093, 0.010))


def test_stream_interval_divides_the_per_token_cost_of_decode_rows() -> None:
    # first tokens are always sent: 1 + 4 × 5 = 21 ms (71 ms); decode steps cost 1 + 4 × 5 / 2 = 11 ms each:
    # 82, 93, 104, 115 ms
    res = run(FOUR, disable_overlap_schedule=True, stream_interval=2, output_path_s_per_step=0.001,
              output_path_s_per_token=0.005)
    r = res.records["r3"]
    assert (r.first_token_s, r.finish_s) == pytest.approx((0.071, 0.115))


def test_serial_tokenizer_spreads_a_burst() -> None:
    # 2 ms + 0.01 ms × 100 tokens = 3 ms per request: a, b, c reach the scheduler at 3, 6, 9 ms.
    # a prefills alone (3 → 23 ms); b and c wait for that step and prefill together (23 → 53 ms).
    burst = [req(x, 0.0, 100, 2) for x in "abc"]
    res = run(burst, disable_overlap_schedule=True, tokenizer_s_per_request=0.002, tokenizer_s_per_token=1e-5)
    rec = res.records
    assert rec["a"].first_token_s == pytest.approx(0.023)
    assert rec["b"].first_token_s == pytest.approx(0.053)
    assert rec["c"].first_token_s == pytest.approx(0.053)
    assert rec["c"].ttft_s == pytest.approx(0.053)  # TTFT counts the tokenizer queue (created_time, §1)
    assert [s.shape.extend_lens for s in res.steps if s.shape.mode == "prefill"] == [(100,), (100, 100)]


STAGES = dict(output_path_s_per_step=0.0005, output_path_s_per_token=0.0004, tokenizer_s_per_request=0.004,
              tokenizer_s_per_token=2e-6)


@pytest.mark.parametrize("overlap", [True, False])
def test_fast_path_equals_step_by_step_with_host_stages(overlap: bool) -> None:
    kw = dict(cap=2500, chunked_prefill_size=512, disable_overlap_schedule=not overlap,
              lat=LinearLatencyModel(cpu_s=0.001), check=False, **STAGES)
    fast = run(_workload(), fast=True, **kw)
    slow = run(_workload(), fast=False, **kw)
    plain = run(_workload(), fast=True, **{k: v for k, v in kw.items() if k not in STAGES})
    recs = sorted(fast.server.records, key=lambda r: r.rid)
    assert recs == sorted(slow.server.records, key=lambda r: r.rid)
    assert recs != sorted(plain.server.records, key=lambda r: r.rid)  # the stages do change the run
    # ITL bookkeeping still adds up: one gap per token after the first, summing to finish − first token
    srv = fast.server
    assert sum(v * w for v, w in zip(srv.itl_vals, srv.itl_w)) == pytest.approx(
        sum(r.finish_s - r.first_token_s for r in srv.records))


@pytest.mark.parametrize("cut_s", [0.3, 1.6])
def test_snapshot_restore_keeps_the_host_stage_queues(cut_s: float) -> None:
    s = resolve(ServerSettings(chunked_prefill_size=512, **STAGES), 80 * 1024**3)
    r = snapshot_and_resume(s, _workload(), cut_s)
    assert r.snapshot["out_free"] > 0 and r.snapshot["tok_free"] > 0
    assert r.resumed_records == r.whole_records
    assert len(r.resumed_records) == 120

