"""The SimPy server: SGLang's scheduler loop with concrete, hand-computed numbers.

All tests use the latency model of ``serverkit.LAT``: a GPU step takes 10 ms plus 0.1 ms per prefilled token,
no CPU time, unless a test says otherwise. Times in the assertions follow from that by hand.
"""
from __future__ import annotations

import json

import pytest
import simpy

from simcore.perf.base import LinearLatencyModel
from simcore.server import Server
from simcore.settings import ServerSettings, resolve

from serverkit import LAT, mixed_workload, run, req, snapshot_and_resume


def test_single_request_timeline_without_overlap() -> None:
    # prefill 100 tokens: 10 + 10 ms; then two decode steps of 10 ms
    r = run([req("a", 0.0, 100, 3)], disable_overlap_schedule=True).records["a"]
    assert r.first_token_s == pytest.approx(0.020)
    assert r.finish_s == pytest.approx(0.040)
    assert r.ttft_s == pytest.approx(0.020)
    assert r.tpot_s == pytest.approx(0.010)
    assert (r.output_len, r.cached_tokens, r.num_retractions) == (3, 0, 0)


def test_overlap_hides_cpu_time_behind_gpu() -> None:
    lat = LinearLatencyModel(base_s=0.010, per_extend_token_s=0.0, per_decode_req_s=0.0, per_kv_token_s=0.0,
                             cpu_s=0.002)
    off = run([req("a", 0.0, 100, 3)], lat=lat, disable_overlap_schedule=True).records["a"]
    # serial: each iteration costs cpu + gpu = 12 ms
    assert (off.first_token_s, off.finish_s) == pytest.approx((0.012, 0.036))
    on = run([req("a", 0.0, 100, 3)], lat=lat).records["a"]
    # overlap: GPU busy back to back after the first 2 ms CPU pass: 2 + 10 + 10 + 10 = 32 ms to the last token;
    # the first token leaves once the prefill's GPU work (12 ms) and the next CPU pass (2 ms) are done
    assert (on.first_token_s, on.finish_s) == pytest.approx((0.014, 0.032))


def test_eos_finish_costs_one_extra_decode_row_under_overlap() -> None:
    length = run([req("a", 0.0, 100, 3)])                  # max_new = 3 → finishes by length
    eos = run([req("a", 0.0, 100, 3, max_new=50)])         # stops by EOS at 3 tokens
    assert [s.shape.mode for s in length.steps] == ["prefill", "decode", "decode"]
    assert [s.shape.mode for s in eos.steps] == ["prefill", "decode", "decode", "decode"]
    assert eos.records["a"].finish_s == pytest.approx(length.records["a"].finish_s)
    serial = run([req("a", 0.0, 100, 3, max_new=50)], disable_overlap_schedule=True)
    assert len(serial.steps) == 3  # no extra row without overlap


def test_long_prompt_chunks_stall_all_decodes() -> None:
    # a decoding, then a 10k-token prompt with chunked_prefill_size 4096: 3 prefill steps back to back
    res = run([req("a", 0.0, 100, 200), req("b", 0.05, 10_000, 5)], chunked_prefill_size=4096)
    modes = [(s.shape.mode, s.shape.extend_lens, s.shape.prefix_lens) for s in res.steps]
    i = modes.index(("prefill", (4096,), (0,)))
    assert modes[i + 1] == ("prefill", (4096,), (4096,))
    assert modes[i + 2] == ("prefill", (1808,), (8192,))
    assert res.steps[i - 1].shape.mode == "decode" and res.steps[i + 3].shape.num_decode == 2
    assert all(s.shape.num_decode == 0 for s in res.steps[i:i + 3])  # decode starved for all three
    b = res.records["b"]
    assert b.first_token_s == pytest.approx(res.steps[i + 2].end_s)


def test_mixed_chunk_lets_decodes_ride_along() -> None:
    res = run([req("a", 0.0, 100, 200), req("b", 0.05, 10_000, 5)], chunked_prefill_size=4096,
              enable_mixed_chunk=True)
    chunks = [s for s in res.steps if s.shape.extend_lens and s.shape.extend_lens[0] > 1000]
    assert [s.shape.num_decode for s in chunks] == [1, 1, 1]
    assert [s.shape.extend_lens for s in chunks] == [(4095,), (4095,), (1810,)]  # chunk budget − 1 decode row


def test_fully_cached_prompt_still_extends_one_token() -> None:
    key = list(range(100))
    res = run([req("a", 0.0, 100, 2, key=key), req("b", 1.0, 100, 2, key=key)])
    b_step = [s for s in res.steps if s.start_s >= 1.0][0]
    assert b_step.shape.extend_lens == (1,) and b_step.shape.prefix_lens == (99,)
    assert res.records["b"].cached_tokens == 99
    assert res.records["a"].cached_tokens == 0


def test_page_size_floors_matches() -> None:
    key = list(range(100))
    res = run([req("a", 0.0, 100, 2, key=key), req("b", 1.0, 100, 2, key=key)], page_size=16)
    assert res.records["b"].cached_tokens == 96  # 99 floored to whole pages


def test_arrivals_wait_for_the_next_iteration() -> None:
    # a's prefill runs 0 → 0.11 s; b arrives at 0.05 s and is seen only when the next iteration starts
    res = run([req("a", 0.0, 1000, 2), req("b", 0.05, 100, 2)], disable_overlap_schedule=True)
    assert res.steps[1].start_s == pytest.approx(0.11)
    assert res.steps[1].shape.extend_lens == (100,)
    assert res.records["b"].queue_time_s == pytest.approx(0.06)


def test_head_of_line_blocking() -> None:
    # a runs; x (too big for what is left) heads the queue; y would fit but must wait behind x
    # a holds 300+ tokens and reserves 0.7 × its ~295 remaining outputs: at most ~490 of 1000 left for x (610)
    reqs = [req("a", 0.0, 300, 300), req("x", 0.05, 600, 10), req("y", 0.06, 50, 10)]
    res = run(reqs, cap=1000)
    rec = res.records
    assert rec["y"].first_token_s > rec["a"].finish_s
    assert rec["x"].first_token_s <= rec["y"].first_token_s
    lof = run(reqs, cap=1000, schedule_policy="lof").records  # x (max_new 10) and y tie; a still blocks
    assert lof["y"].first_token_s > lof["a"].finish_s


def test_batch_is_full_latch_stops_prefill_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    import simcore.server as server_mod

    built: list[float] = []
    real = server_mod.PrefillAdder

    class Counting(real):  # type: ignore[misc, valid-type]
        def __init__(self, *a, **kw):  # type: ignore[no-untyped-def]
            super().__init__(*a, **kw)
            built.append(0)

    monkeypatch.setattr(server_mod, "PrefillAdder", Counting)
    res = run([req("a", 0.0, 300, 300), req("x", 0.05, 600, 10)], cap=1000)
    decode_steps = sum(1 for s in res.steps if s.shape.mode == "decode")
    # one adder for a, one failing attempt for x (NO_TOKEN → latch), one after a finished: not one per step
    assert len(built) == 3 and decode_steps > 100


def test_max_running_requests_caps_the_batch() -> None:
    reqs = [req(f"r{i}", 0.0, 50, 20) for i in range(5)]
    res = run(reqs, max_running_requests=2)
    assert max(s.num_running for s in res.steps) == 2
    assert max(s.shape.num_decode for s in res.steps) == 2
    rec = res.records
    assert rec["r2"].first_token_s >= min(rec["r0"].finish_s, rec["r1"].finish_s)


def test_plain_dp_does_not_divide_the_request_slots() -> None:
    # --dp-size 2 without DP attention: each replica is a whole server whose ModelRunner has dp_size 1 (sglang
    # 0.5.9 model_runner.py: "self.dp_size = server_args.dp_size if server_args.enable_dp_attention else 1"), so
    # --max-running-requests 2 gives it 2 slots, not 2 // 2
    reqs = [req(f"r{i}", 0.0, 50, 20) for i in range(5)]
    res = run(reqs, max_running_requests=2, dp_size=2)
    assert res.server.max_running == 2
    assert max(s.num_running for s in res.steps) == 2


def test_cuda_graph_padding_and_eager_above_max() -> None:
    reqs = [req(f"r{i}", 0.0, 20, 5) for i in range(5)]
    graph = run(reqs)
    assert {s.shape.cuda_graph_bs for s in graph.steps if s.shape.mode == "decode"} == {8}  # 5 → 8
    eager = run(reqs, cuda_graph_max_bs=4)
    assert {s.shape.cuda_graph_bs for s in eager.steps if s.shape.mode == "decode"} == {None}
    off = run(reqs, disable_cuda_graph=True)
    assert {s.shape.cuda_graph_bs for s in off.steps if s.shape.mode == "decode"} == {None}


def test_retraction_picks_fewest_outputs_and_requeues_at_tail() -> None:
    # low reservation ratio: three 100+400 requests admitted into a 1000-token pool; decode runs out of memory
    reqs = [req("a", 0.0, 100, 400), req("b", 0.5, 100, 400), req("c", 1.0, 100, 400)]
    res = run(reqs, cap=1000, init_new_token_ratio=0.05)
    i, first = next((i, s) for i, s in enumerate(res.steps) if s.retracted)
    assert first.retracted == ("c",)  # the fewest outputs
    rec = res.records
    assert rec["c"].num_retractions >= 1 and rec["a"].num_retractions == 0
    assert all(r.output_len == 400 for r in rec.values())
    # the ratio jumps to (Σ outputs + 20·n) / (Σ max_new + 1) of the survivors: far above its decayed value
    assert res.steps[i - 1].new_token_ratio < 0.05 < first.new_token_ratio <= 1.0
    assert res.server.num_retractions == sum(r.num_retractions for r in rec.values())


def test_retraction_tie_breaks_on_longest_input() -> None:
    # c first; short and long enter together later, so they tie on outputs when memory runs out
    reqs = [req("c", 0.0, 100, 400), req("short", 0.5, 100, 400), req("long", 0.5, 150, 400)]
    res = run(reqs, cap=1300, init_new_token_ratio=0.05)
    first = next(s for s in res.steps if s.retracted)
    assert first.retracted[0] == "long"


def test_new_token_ratio_decays_per_decode_step_and_resets_on_idle() -> None:
    res = run([req("a", 0.0, 10, 11), req("b", 5.0, 10, 2)])
    ratios = [s.new_token_ratio for s in res.steps]
    # prefill at 0.7, then 10 decode steps decay it by (0.7 − 0.098)/600 each
    assert ratios[0] == pytest.approx(0.7)
    assert ratios[10] == pytest.approx(0.7 - 10 * 0.602 / 600)
    assert ratios[11] == pytest.approx(0.7)  # idle in between: reset


def test_cached_tokens_and_hit_rate() -> None:
    shared = list(range(64))
    reqs = [req("a", 0.0, 100, 2, key=shared + list(range(1000, 1036))),
            req("b", 1.0, 80, 2, key=shared + list(range(2000, 2016)))]
    rec = run(reqs).records
    assert (rec["a"].cached_tokens, rec["b"].cached_tokens) == (0, 64)


def test_prompt_larger_than_pool_is_aborted() -> None:
    res = run([req("big", 0.0, 2000, 5), req("ok", 0.0, 100, 5)], cap=1000)
    assert res.records["big"].aborted and not res.records["ok"].aborted


@pytest.mark.parametrize("version,page,aborted", [("0.5.9", 4, False), ("0.5.23", 1, False), ("0.5.23", 4, True)])
def test_a_prompt_near_the_pool_size_fits_unless_the_page_reservation_tips_it(version: str, page: int,
                                                                             aborted: bool) -> None:
    # pool 700: max_new 157 is clipped to max_req_len − input − 1 = 699 − 600 − 1 = 98, so prompt + reservation
    # = 698. NO_TOKEN needs total ≥ 700 (§2.5): only 0.5.23's +page_size per request (4) gets there (702).
    res = run([req("a", 0.0, 600, 150, max_new=157, key=list(range(600)))], cap=700, page_size=page,
              sglang_version=version, chunked_prefill_size=256)
    rec = res.records["a"]
    assert (rec.aborted, rec.output_len) == (aborted, 0 if aborted else 98)


_workload = mixed_workload


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("policy", ["fcfs", "lpm", "dfs-weight", "lof", "random"])
def test_fast_path_equals_step_by_step(overlap: bool, policy: str) -> None:
    kw = dict(cap=2500, chunked_prefill_size=512, schedule_policy=policy, disable_overlap_schedule=not overlap,
              lat=LinearLatencyModel(cpu_s=0.001), check=False)
    fast = run(_workload(), fast=True, **kw)
    slow = run(_workload(), fast=False, **kw)
    assert fast.server.num_retractions > 0  # the workload exercises retraction
    # ITL bookkeeping survives retractions: one gap per token after the first, summing to finish − first token
    srv = fast.server
    assert sum(srv.itl_w) == sum(r.output_len - 1 for r in srv.records)
    total = sum(v * w for v, w in zip(srv.itl_vals, srv.itl_w))
    assert total == pytest.approx(sum(r.finish_s - r.first_token_s for r in srv.records))
    assert sorted(fast.server.records, key=lambda r: r.rid) == sorted(slow.server.records, key=lambda r: r.rid)
    assert [(s.start_s, s.shape) for s in fast.steps] == [(s.start_s, s.shape) for s in slow.steps]


@pytest.mark.parametrize("cut_s", [0.3, 1.0, 2.55])
def test_snapshot_restore_continues_exactly(cut_s: float) -> None:
    s = resolve(ServerSettings(chunked_prefill_size=512, schedule_policy="lpm"), 80 * 1024**3)
    r = snapshot_and_resume(s, _workload(), cut_s)
    assert r.resumed_records == r.whole_records
    assert len(r.resumed_records) == 120


def test_same_seed_same_result_random_policy() -> None:
    a = run(_workload(), cap=2500, schedule_policy="random", seed=5, check=False).server.records
    b = run(_workload(), cap=2500, schedule_policy="random", seed=5, check=False).server.records
    c = run(_workload(), cap=2500, schedule_policy="random", seed=6, check=False).server.records
    assert a == b
    assert a != c


def test_tokenize_and_detokenize_delays() -> None:
    base = run([req("a", 0.0, 100, 3)], disable_overlap_schedule=True).records["a"]
    slow = run([req("a", 0.0, 100, 3)], disable_overlap_schedule=True,
               server_kw={"tokenize_s": 0.005, "detokenize_s": 0.001}).records["a"]
    assert slow.first_token_s == pytest.approx(base.first_token_s + 0.006)
    assert slow.finish_s == pytest.approx(base.finish_s + 0.006)


def test_disabled_radix_cache_shares_nothing() -> None:
    key = list(range(100))
    res = run([req("a", 0.0, 100, 2, key=key), req("b", 1.0, 100, 2, key=key)], disable_radix_cache=True,
              schedule_policy="lpm")
    assert res.records["b"].cached_tokens == 0
    assert res.steps[-2].shape.extend_lens == (100,)  # b recomputes its whole prompt


def test_only_one_chunked_request_at_a_time() -> None:
    res = run([req("a", 0.0, 6000, 2), req("b", 0.0, 6000, 2)], chunked_prefill_size=4096)
    shapes = [s.shape for s in res.steps if s.shape.extend_lens]
    # a is chunked (4096, then 1904); b only joins with what is left of the second chunk's budget
    assert [x.extend_lens for x in shapes[:2]] == [(4096,), (1904, 2192)]
    assert [x.prefix_lens for x in shapes[:2]] == [(0,), (4096, 0)]
    assert shapes[2].extend_lens == (3808,) and shapes[2].prefix_lens == (2192,)


def test_abort_of_an_oversized_request_is_signalled_at_its_time() -> None:
    fast = run([req("ok", 0.0, 100, 50), req("big", 0.0, 2000, 5)], cap=1000, fast=True)
    slow = run([req("ok", 0.0, 100, 50), req("big", 0.0, 2000, 5)], cap=1000, fast=False)
    assert fast.records["big"].aborted and fast.records == slow.records


def test_snapshot_while_idle_and_with_future_submission() -> None:
    s = resolve(ServerSettings(), 80 * 1024**3)
    reqs = [req("a", 0.0, 100, 5), req("b", 5.0, 100, 5)]

    def whole() -> list:
        env = simpy.Environment()
        srv = Server(env, s, 10_000, LAT)
        for r in reqs:
            srv.submit(r)  # b submitted ahead of its arrival
        env.run()
        return srv.records

    env = simpy.Environment()
    srv = Server(env, s, 10_000, LAT)
    srv.submit(reqs[0])
    env.run(until=2.0)
    assert srv.idle
    snap = json.loads(json.dumps(srv.snapshot()))
    env2 = simpy.Environment(initial_time=2.0)
    srv2 = Server.restore(env2, snap, s, LAT)
    srv2.submit(reqs[1])
    env2.run()
    assert srv.records + srv2.records == whole()
    assert srv2.records[0].first_token_s == pytest.approx(5.0 + 0.02)


def test_snapshot_keeps_finishes_not_yet_signalled() -> None:
    # with a 50 ms detokenizer delay, a's finish is known at 0.04 s but reaches the client at 0.09 s
    s = resolve(ServerSettings(disable_overlap_schedule=True), 80 * 1024**3)
    env = simpy.Environment()
    srv = Server(env, s, 10_000, LAT, detokenize_s=0.05)
    srv.submit(req("a", 0.0, 100, 3))
    env.run(until=0.06)
    assert [r.rid for r in srv.records] == ["a"] and srv.deferred
    snap = json.loads(json.dumps(srv.snapshot()))
    env2 = simpy.Environment(initial_time=0.06)
    got: list = []
    srv2 = Server.restore(env2, snap, s, LAT, on_finish=got.append)
    ev = srv2.events["a"]
    env2.run()
    assert ev.triggered and ev.value.finish_s == pytest.approx(0.09)
    assert [r.rid for r in got] == ["a"] and not srv2.deferred


def test_fast_path_equals_step_by_step_with_delays() -> None:
    kw = dict(cap=2500, chunked_prefill_size=512, lat=LinearLatencyModel(cpu_s=0.001), check=False,
              server_kw={"tokenize_s": 0.003, "detokenize_s": 0.002})
    fast = run(_workload(), fast=True, **kw)
    slow = run(_workload(), fast=False, **kw)
    assert sorted(fast.server.records, key=lambda r: r.rid) == sorted(slow.server.records, key=lambda r: r.rid)


@pytest.mark.parametrize("version", ["0.4.10", "0.5.9", "0.5.23"])
def test_running_requests_reserve_only_their_remaining_outputs_in_every_version(version: str) -> None:
    # §2.5: the adder's offset is Σ min(max_new − len(output_ids), 4096) × ratio over the running batch, in every
    # version (only the *candidate's* max_new ignores its outputs in 0.4). Ratio pinned at 1.0 (floor factor 1).
    # a (100 + 500 outputs) decodes from ~20 ms, one token per 10 ms; at 3.0 s it holds ~100 + 298 tokens and
    # reserves ~500 − 298 = 202, so b (300 + 10) fits in 1000 − 398 − 202 = 400. Reserving a's whole 500 would
    # leave ~102 and b would wait for a to finish (~5 s).
    reqs = [req("a", 0.0, 100, 500), req("b", 3.0, 300, 10)]
    rec = run(reqs, cap=1000, sglang_version=version, init_new_token_ratio=1.0,
              min_new_token_ratio_factor=1.0).records
    assert rec["b"].queue_time_s < 0.02
    assert rec["b"].first_token_s < 3.1 and rec["a"].finish_s > 5.0


def test_prompt_at_the_maximum_input_length_is_aborted_as_a_one_token_prefill() -> None:
    # 0.5.23: max_req_input_len = min(context − 1, pool − 1) − 5 (managers/tp_worker.py lines 568-572);
    # Scheduler.handle_generate_request → validate_input_length (managers/utils.py lines 259-289) refuses a prompt
    # of at least that length, and set_finish_with_abort (schedule_batch.py lines 2221-2238) turns it into the
    # one-token prompt [0]: it takes one prefill row, reserves nothing, finishes aborted with its first token.
    # (oracle scenario long-prompt-abort: 696 steps equal to SGLang's.) Context 1,000 → max input 994.
    r = run([req("long", 0.0, 994, 50, key=range(994)), req("ok", 0.0, 993, 1, key=range(10_000, 10_993))],
            context_length=1000, sglang_version="0.5.23", chunked_prefill_size=8192)
    first = r.steps[0].shape
    assert first.extend_lens == (1, 993)          # the refused prompt passes as one token
    rec = r.records["long"]
    assert rec.aborted and rec.input_len == 994 and rec.output_len == 1 and rec.cached_tokens == 0
    assert not r.records["ok"].aborted
    assert rec.finish_s == pytest.approx(r.steps[0].end_s)
    assert r.server.reqs == {} and r.server.kv.used == 0


def test_retracted_requests_outputs_become_matchable_by_itself_only() -> None:
    # SGLang's fill after a retraction is origin_input_ids + output_ids (real tokens): the checkpoint after its
    # re-prefill (0.5.23 mem_cache/common.py::checkpoint_kv_cache, lines 271-280) puts the generated tokens in the
    # tree, so a second retraction re-matches prompt + those outputs (oracle scenario priority-preemption: step 479
    # re-admits q0022 with prefix 1,040 = prompt + 54 outputs, not 986).
    from simcore.kv_cache import KVCache
    from simcore.request import RequestSpec
    from simcore.server_state import Req

    launch_counter = [0]
    a = Req(RequestSpec("a", 0.0, 8, 50, 50, key=tuple(range(8))), 10_000, launch_counter)
    b = Req(RequestSpec("b", 0.0, 8, 50, 50, key=tuple(range(8))), 10_000, launch_counter)  # same prompt
    a.out_len_base, b.out_len_base = 5, 5
    a.key_outputs(-(1 << 32))
    b.key_outputs(-(2 << 32))
    assert a.key[:8] == tuple(range(8)) and len(a.key) == 13 and all(x < 0 for x in a.key[8:])
    assert set(a.key[8:]).isdisjoint(b.key[8:])
    kv = KVCache(1000)
    node = kv.match(a.key, a.fill_len, 0.0).node
    kv.lock(node)
    assert kv.alloc(13)
    node = kv.cache_unfinished(a.key, 13, node, 1.0)  # a's re-prefill checkpoint: prompt + its 5 outputs
    assert kv.match(a.key, 100, 2.0).prefix_len == 13
    assert kv.match(b.key, 100, 2.0).prefix_len == 8  # b shares the prompt, not a's outputs
    a.out_len_base = 9
    a.key_outputs(-(7 << 32))  # a second retraction keeps the same elements and extends them
    assert len(a.key) == 17 and kv.match(a.key, 100, 3.0).prefix_len == 13  # the first 5 outputs still match


@pytest.mark.parametrize("field,value", [("page_size", 16), ("disable_radix_cache", True)])
def test_restore_under_another_page_size_or_radix_mode_is_refused(field: str, value: object) -> None:
    """A snapshot's KV accounting is in its own page size: restored with another one, every later page rounding
    disagrees with what the requests hold and the pool's private count runs negative steps later (fuzzing found
    ``free_tokens(34) with -127 private tokens allocated``). The restore says so at once instead."""
    s = resolve(ServerSettings(chunked_prefill_size=512), 80 * 1024**3)
    env = simpy.Environment()
    srv = Server(env, s, 10_000, LAT)
    for i in range(4):
        srv.submit(req(f"r{i}", 0.01 * i, 300 + 50 * i, 30))
    env.run(until=0.05)
    srv.check_invariants()
    snap = json.loads(json.dumps(srv.snapshot()))
    other = s.model_copy(update={field: value})
    with pytest.raises(ValueError, match=f"snapshot taken with {field}=.* cannot be restored with {field}="):
        Server.restore(simpy.Environment(initial_time=0.05), snap, other, LAT)
    again = Server.restore(simpy.Environment(initial_time=0.05), snap, s, LAT)  # its own settings: fine
    again.check_invariants()
