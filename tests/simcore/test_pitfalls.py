"""The fidelity pitfalls of sglang-internals.md §8.3, one test each, in the spec's order.

Every test runs the real server model (``serverkit.run``: GPU step = 10 ms + 0.1 ms per prefilled token, no CPU
time) and checks a number that a simulator without that behaviour would get wrong.
"""
from __future__ import annotations

import numpy as np
import pytest

from simcore.request import RequestSpec
from simcore.scheduler import PrefillAdder, order_waiting
from simcore.server_state import Req
from simcore.settings import ServerSettings

from serverkit import run, req


def test_1_prefill_first_multi_chunk_prefill_starves_decode() -> None:
    reqs = [req("a", 0.0, 100, 300), req("b", 0.05, 12_000, 5)]
    plain = run(reqs, chunked_prefill_size=4096)
    chunks = [s for s in plain.steps if s.shape.extend_lens and s.shape.extend_lens[0] > 1000]
    assert len(chunks) == 3 and all(s.shape.num_decode == 0 for s in chunks)
    gaps = np.diff([s.start_s for s in plain.steps])
    assert gaps.max() == pytest.approx(0.01 + 4096e-4)  # one chunk's forward between launches
    # a's inter-token gap spans all three chunks plus its own decode step: 2 × 419.6 + 390.8 + 10 ms
    assert max(plain.server.itl_vals) == pytest.approx(2 * 0.4196 + 0.3908 + 0.010)
    mixed = run(reqs, chunked_prefill_size=4096, enable_mixed_chunk=True)
    assert [s.shape.num_decode for s in mixed.steps if s.shape.extend_lens and s.shape.extend_lens[0] > 1000] \
        == [1, 1, 1]
    assert mixed.records["a"].finish_s < plain.records["a"].finish_s


def test_2_head_of_line_blocking_and_batch_is_full_latch() -> None:
    reqs = [req("a", 0.0, 300, 300), req("x", 0.05, 600, 10), req("y", 0.06, 50, 10)]
    res = run(reqs, cap=1000)
    rec = res.records
    assert rec["y"].first_token_s > rec["a"].finish_s  # y fits but waits behind x
    assert rec["x"].first_token_s == rec["y"].first_token_s  # both admitted in the batch after a finished


def test_3_at_least_one_token_is_recomputed() -> None:
    key = list(range(300))
    res = run([req("a", 0.0, 300, 2, key=key), req("b", 1.0, 300, 2, key=key)])
    later = [s for s in res.steps if s.start_s >= 1.0]
    assert later[0].shape.extend_lens == (1,) and later[0].shape.prefix_lens == (299,)


def test_4_evictable_cache_counts_as_free_and_eviction_is_lazy() -> None:
    ka, kb = list(range(600)), list(range(10_000, 10_700))
    seen: list[tuple[int, int, int]] = []

    def watch(step, srv) -> None:  # type: ignore[no-untyped-def]
        seen.append((srv.kv.free, srv.kv.evictable, srv.kv.evicted_total))

    res = run([req("a", 0.0, 600, 2, key=ka), req("b", 1.0, 700, 2, key=kb), req("c", 2.0, 600, 2, key=ka)],
              cap=1000, observe=watch)
    rec = res.records
    # b needs 702 of 1000 while a's 600 cached tokens sit in the tree: admitted at once, no queueing
    assert rec["b"].queue_time_s == pytest.approx(0.0)
    assert res.server.kv.evicted_total >= 300  # whole LRU leaves evicted only when b allocated
    # after a finished, nothing was evicted until b needed the room
    before_b = [s for s, st in zip(seen, res.steps) if st.start_s < 1.0]
    assert before_b[-1][2] == 0
    assert rec["c"].cached_tokens == 0  # a's prefix was the LRU leaf b evicted


def test_5_new_token_ratio_and_ignore_eos_reservation() -> None:
    # a: ignore_eos benchmark request with 500 outputs; b needs 430 tokens + 10 reserved
    reqs = [req("a", 0.0, 100, 500, ignore_eos=True), req("b", 0.05, 420, 10)]
    old = run(reqs, cap=1000, sglang_version="0.5.9").records     # a reserved at new_token_ratio 0.7
    new = run(reqs, cap=1000, sglang_version="0.5.23").records    # a reserved at 1.0
    assert old["b"].first_token_s < old["a"].finish_s
    assert new["b"].first_token_s > new["a"].finish_s
    ratios = [s.new_token_ratio for s in run([req("a", 0.0, 10, 601)]).steps]
    assert ratios[0] == pytest.approx(0.7) and ratios[-1] == pytest.approx(0.098)


def test_6_unlimited_max_new_tokens_is_clipped_to_context_then_4096() -> None:
    chat = Req(RequestSpec("c", 0.0, 1000, 50, None), max_req_len=131_071, launch_counter=[0])
    assert chat.max_new == 131_071 - 1000 - 1
    adder = PrefillAdder(ServerSettings(chunked_prefill_size=8192), lambda: 10**9, lambda n: None,
                         lambda n: None, 0.0, 0.7)
    assert adder.reserve_of(chat) == 4096
    completion = Req(RequestSpec("d", 0.0, 1000, 16, 16), max_req_len=131_071, launch_counter=[0])
    assert adder.reserve_of(completion) == 16


def test_7_retraction_victim_tail_of_queue_and_cached_reprefill() -> None:
    reqs = [req("a", 0.0, 100, 400, key=range(0, 100)), req("b", 0.5, 100, 400, key=range(1000, 1100)),
            req("c", 1.0, 100, 400, key=range(2000, 2100))]
    tails: list[str] = []

    def watch(step, srv) -> None:  # type: ignore[no-untyped-def]
        if step.retracted:
            tails.append(srv.waiting[-1].rid)

    res = run(reqs, cap=1300, init_new_token_ratio=0.05, observe=watch)
    first = next(s for s in res.steps if s.retracted)
    assert first.retracted == ("c",) and tails[0] == "c"
    # c comes back: prompt (100) is still cached, only its generated tokens are recomputed
    back = next(s for s in res.steps if s.start_s > first.start_s and s.shape.extend_lens)
    assert back.shape.prefix_lens == (100,)
    assert res.records["c"].cached_tokens == 0  # a retracted request does not count its hit again


def test_8_overlap_eos_extra_row_and_first_token_after_cpu_pass() -> None:
    from simcore.perf.base import LinearLatencyModel

    length = run([req("a", 0.0, 100, 3)])
    eos = run([req("a", 0.0, 100, 3, max_new=50)])
    assert len(eos.steps) == len(length.steps) + 1
    lat = LinearLatencyModel(base_s=0.010, per_extend_token_s=0.0, per_decode_req_s=0.0, per_kv_token_s=0.0,
                             cpu_s=0.015)  # CPU-bound: the next pass ends after the prefill's GPU work
    r = run([req("a", 0.0, 100, 3)], lat=lat).records["a"]
    # prefill launched at 15 ms, GPU done at 25 ms, emitted after the next 15 ms CPU pass: 40 ms
    assert r.first_token_s == pytest.approx(0.015 + 0.010 + 0.015)


def test_9_cuda_graph_padding_and_eager_decode_above_max_bs() -> None:
    reqs = [req(f"r{i}", 0.0, 20, 5) for i in range(20)]
    padded = {s.shape.num_decode: s.shape.cuda_graph_bs for s in run(reqs).steps if s.shape.mode == "decode"}
    assert padded[20] == 24
    eager = {s.shape.num_decode: s.shape.cuda_graph_bs
             for s in run(reqs, cuda_graph_max_bs=16).steps if s.shape.mode == "decode"}
    assert eager[20] is None


def test_10_fcfs_computes_shared_prefix_twice_lpm_does_not() -> None:
    shared = list(range(500))
    reqs = [req("s1", 0.0, 510, 2, key=shared + list(range(9000, 9010))),
            req("s2", 0.0, 510, 2, key=shared + list(range(9100, 9110))),
            req("u1", 0.0, 514, 2, key=list(range(5000, 5514)))]
    kw = dict(chunked_prefill_size=1024, disable_overlap_schedule=True)
    fcfs = run(reqs, **kw)
    assert fcfs.steps[0].shape.extend_lens[:2] == (510, 510)  # the 500 shared tokens computed twice
    lpm = run(reqs, schedule_policy="lpm", **kw)
    assert lpm.steps[0].shape.extend_lens == (510, 514)   # s2 deprioritised this pass
    assert lpm.records["s2"].cached_tokens == 500


def test_11_lpm_falls_back_to_fcfs_above_128_waiting() -> None:
    class W:
        def __init__(self, i: int) -> None:
            self.rid, self.prefix_len, self.max_new, self.key = f"w{i}", 0, 10, None
            self.key_unit, self.input_len, self.out_len, self.fill_len = 1, 200, 0, 200  # prefix < len

    def match(r: W) -> None:
        r.prefix_len = int(r.rid[1:])  # later requests have longer cached prefixes

    for n, first in ((128, "w127"), (129, "w0")):
        w = [W(i) for i in range(n)]
        order_waiting(w, ServerSettings(schedule_policy="lpm"), np.random.default_rng(0), match)
        assert w[0].rid == first


def test_12_page_alignment_of_matches_chunks_and_reservation() -> None:
    key = list(range(100))
    res = run([req("a", 0.0, 100, 2, key=key), req("b", 1.0, 100, 2, key=key)], page_size=16)
    assert res.records["b"].cached_tokens == 96
    chunked = run([req("c", 0.0, 300, 2)], page_size=16, chunked_prefill_size=100)
    # the first cut is page-aligned (96), continuations take min(chunk, room) as is: SGLang 0.5.23's real scheduler
    # gives [96, 100, 100, 4] for this request (add_chunked_req, schedule_policy.py lines 1140-1222; same in 0.5.9)
    assert [s.shape.extend_lens[0] for s in chunked.steps if s.shape.extend_lens] == [96, 100, 100, 4]


def test_13_every_forward_is_observed_not_sampled() -> None:
    res = run([req(f"r{i}", 0.01 * i, 50, 60) for i in range(5)])
    assert len(res.steps) == res.server.steps  # no 40-step log sampling here
    # every prefill row and every decode row is seen: 5 prompts, and 5 × (60 − 1) tokens after the first ones
    # (length finishes add no extra row, §8.3.8)
    assert sum(len(s.shape.extend_lens) for s in res.steps) == 5
    assert sum(s.shape.num_decode for s in res.steps) == 5 * 59


def test_14_warmup_request_leaves_its_prefix_in_the_cache() -> None:
    system = list(range(200))
    res = run([req("warmup", 0.0, 210, 1, key=system + list(range(7000, 7010))),
               req("real", 1.0, 250, 5, key=system + list(range(8000, 8050)))])
    assert res.records["real"].cached_tokens == 200


def test_15_arrivals_are_picked_up_only_at_iteration_boundaries() -> None:
    res = run([req("a", 0.0, 1000, 2), req("b", 0.05, 100, 2)], disable_overlap_schedule=True)
    assert res.steps[1].start_s == pytest.approx(0.11)  # b arrived at 0.05, waited for a's 110 ms prefill
