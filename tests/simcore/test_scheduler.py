"""SGLang's scheduling decisions in isolation (sglang-internals.md §2.4–2.7).

The scheduler picks *which* waiting requests enter the next prefill batch. Three things decide it: the queue
order of the policy (FCFS, LPM, DFS-weight, LOF, random), the PrefillAdder's budgets, and ``new_token_ratio``,
the share of each running request's remaining ``max_new_tokens`` that admission keeps in reserve.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from simcore.scheduler import (AddResult, NewTokenRatio, PrefillAdder, active_policy, order_waiting,
                               retraction_order)
from simcore.radix_cache import RadixCache
from simcore.settings import ServerSettings


@dataclass
class FakeReq:
    rid: str
    input_len: int
    max_new: int = 100
    prefix_len: int = 0
    key: tuple[int, ...] | None = None
    key_unit: int = 1
    ignore_eos: bool = False
    last_node: Any = None
    out: int = 0
    matched: list[int] = field(default_factory=list)

    @property
    def out_len(self) -> int:
        return self.out

    @property
    def fill_len(self) -> int:
        return self.input_len + self.out


# ---- new_token_ratio -------------------------------------------------------------------------------------
def test_new_token_ratio_start_decay_floor_reset() -> None:
    r = NewTokenRatio(ServerSettings())
    assert r.current == pytest.approx(0.7)
    assert r.min == pytest.approx(0.098)
    assert r.decay == pytest.approx((0.7 - 0.098) / 600)
    r.decay_step()
    assert r.current == pytest.approx(0.7 - 0.0010033333)
    for _ in range(700):
        r.decay_step()
    assert r.current == pytest.approx(0.098)  # floor after 600 steps
    r.reset()
    assert r.current == pytest.approx(0.7)


def test_min_new_token_ratio_factor_above_one_clamps_and_grows() -> None:
    # 0.5.23 new_token_ratio_tracker.py::NewTokenRatioTracker.from_config (lines 21-32): min = min(init × factor,
    # 1.0), decay = (init − min) / steps — negative when min > init — and decay_step = max(current − decay, min)
    # (line 35): the ratio jumps to the floor and then creeps up until the next idle reset.
    r = NewTokenRatio(ServerSettings(min_new_token_ratio_factor=2.0))
    assert r.min == pytest.approx(1.0)              # 0.7 × 2 clamped to 1.0
    assert r.decay == pytest.approx((0.7 - 1.0) / 600)
    r.decay_step()
    assert r.current == pytest.approx(1.0)
    r.decay_step()
    assert r.current == pytest.approx(1.0 + 0.3 / 600)
    r = NewTokenRatio(ServerSettings(min_new_token_ratio_factor=1.2))
    assert r.min == pytest.approx(0.84)             # below 1: not clamped


def test_new_token_ratio_conservativeness_scales_start() -> None:
    r = NewTokenRatio(ServerSettings(schedule_conservativeness=0.3))
    assert r.current == pytest.approx(0.21)
    assert r.min == pytest.approx(0.21 * 0.14)


def test_ratio_after_retraction() -> None:
    # (Σ outputs + 20·n) / (Σ max_new + 1): two requests with 50 and 30 outputs, max_new 200 each
    assert NewTokenRatio.after_retract([50, 30], [200, 200], 20) == pytest.approx((80 + 40) / 401)
    assert NewTokenRatio.after_retract([500], [100], 20) == 1.0  # capped at 1


# ---- queue order -------------------------------------------------------------------------------------------
def _waiting(prefixes: list[int]) -> list[FakeReq]:
    return [FakeReq(f"r{i}", 1000, prefix_len=0, matched=[p]) for i, p in enumerate(prefixes)]


def _match(r: FakeReq) -> None:
    r.prefix_len = r.matched[0]


def test_fcfs_keeps_arrival_order() -> None:
    w = _waiting([5, 500, 50])
    order_waiting(w, ServerSettings(schedule_policy="fcfs"), np.random.default_rng(0), _match)
    assert [r.rid for r in w] == ["r0", "r1", "r2"]
    assert [r.prefix_len for r in w] == [0, 0, 0]  # FCFS does no prefix matching


def test_lpm_sorts_by_longest_prefix_up_to_128_waiting() -> None:
    w = _waiting([5, 500, 50, 500])
    pol = order_waiting(w, ServerSettings(schedule_policy="lpm"), np.random.default_rng(0), _match)
    assert pol == "lpm"
    assert [r.rid for r in w] == ["r1", "r3", "r2", "r0"]  # stable among equal prefixes


def test_lpm_falls_back_to_fcfs_above_128_waiting() -> None:
    prefixes = list(range(129))  # longest prefix last
    w = _waiting(prefixes)
    pol = order_waiting(w, ServerSettings(schedule_policy="lpm"), np.random.default_rng(0), _match)
    assert pol == "fcfs"
    assert [r.rid for r in w][:3] == ["r0", "r1", "r2"]
    w = _waiting(prefixes[:128])
    assert order_waiting(w, ServerSettings(schedule_policy="lpm"), np.random.default_rng(0), _match) == "lpm"
    assert w[0].rid == "r127"


def test_cache_aware_policy_without_cache_is_fcfs() -> None:
    assert active_policy(ServerSettings(schedule_policy="lpm", disable_radix_cache=True), 3) == "fcfs"
    assert active_policy(ServerSettings(schedule_policy="dfs-weight", disable_radix_cache=True), 3) == "fcfs"
    assert active_policy(ServerSettings(schedule_policy="dfs-weight"), 500) == "dfs-weight"  # no fallback


def test_lpm_deprioritises_in_batch_duplicates() -> None:
    # three uncached requests share a 64-token prefix: only the first of the group goes first
    shared = tuple(range(64))
    w = [FakeReq("a", 100, key=shared + (1000,)), FakeReq("b", 100, key=shared + (2000,)),
         FakeReq("c", 100, key=(7,) * 40), FakeReq("d", 100, key=shared + (3000,))]
    order_waiting(w, ServerSettings(schedule_policy="lpm"), np.random.default_rng(0), lambda r: None)
    assert [r.rid for r in w] == ["a", "c", "b", "d"]


def test_lof_longest_output_first() -> None:
    w = [FakeReq("a", 10, max_new=5), FakeReq("b", 10, max_new=50), FakeReq("c", 10, max_new=50)]
    order_waiting(w, ServerSettings(schedule_policy="lof"), np.random.default_rng(0), _match)
    assert [r.rid for r in w] == ["b", "c", "a"]


def test_random_policy_uses_injected_seed() -> None:
    def order(seed: int) -> list[str]:
        w = [FakeReq(f"r{i}", 10) for i in range(10)]
        order_waiting(w, ServerSettings(schedule_policy="random"), np.random.default_rng(seed), _match)
        return [r.rid for r in w]

    assert order(1) == order(1)
    assert order(1) != order(2)
    assert sorted(order(1)) == sorted(f"r{i}" for i in range(10))


def _tree_match(tree: RadixCache):
    """The scheduling pass's match against a real tree (whole fill, no len − 1 cap)."""
    def match(r: FakeReq) -> None:
        m = tree.match_prefix(r.key, r.fill_len, now=5.0)
        r.prefix_len, r.last_node = m.prefix_len, m.node
    return match


def test_dfs_weight_groups_by_heaviest_subtree() -> None:
    # matched prefixes: two requests under block 1, three under block 2 → block-2 group first
    tree = RadixCache(key_unit=512)
    tree.insert((1,), 512, now=0.0)
    tree.insert((2,), 512, now=1.0)
    w = [FakeReq("x1", 2000, key=(1, 10), key_unit=512), FakeReq("y1", 2000, key=(2, 20), key_unit=512),
         FakeReq("none", 2000, key=(9,), key_unit=512), FakeReq("x2", 2000, key=(1, 11), key_unit=512),
         FakeReq("y2", 2000, key=(2, 21), key_unit=512), FakeReq("y3", 2000, key=(2, 22), key_unit=512)]
    order_waiting(w, ServerSettings(schedule_policy="dfs-weight"), np.random.default_rng(0), _tree_match(tree))
    assert [r.rid for r in w] == ["y1", "y2", "y3", "x1", "x2", "none"]


def test_dfs_weight_ties_follow_the_trees_child_order() -> None:
    # SGLang 0.5.23 mem_cache/base_prefix_cache.py::_dfs_weight_order (lines 347-387) walks the real tree:
    # children are sorted stably by -weight, so equal weights keep node.children's (insertion) order, not the
    # queue's. Tree: [1]*8 inserted before [2]*8; queue has the request on [2]*8 first → [1]*8's request goes first.
    tree = RadixCache()
    tree.insert((1,) * 8, 8, now=0.0)
    tree.insert((2,) * 8, 8, now=1.0)
    w = [FakeReq("onY", 9, key=(2,) * 8 + (5,)), FakeReq("onX", 9, key=(1,) * 8 + (5,))]
    order_waiting(w, ServerSettings(schedule_policy="dfs-weight"), np.random.default_rng(0), _tree_match(tree))
    assert [r.rid for r in w] == ["onX", "onY"]
    # a heavier subtree still goes first whatever the child order
    w = [FakeReq("x1", 9, key=(1,) * 8 + (5,)), FakeReq("y1", 9, key=(2,) * 8 + (5,)),
         FakeReq("y2", 9, key=(2,) * 8 + (6,)), FakeReq("none", 5, key=(9,) * 5)]
    order_waiting(w, ServerSettings(schedule_policy="dfs-weight"), np.random.default_rng(0), _tree_match(tree))
    assert [r.rid for r in w] == ["y1", "y2", "x1", "none"]


def test_lpm_sort_key_is_the_uncapped_hit_capped_at_len_minus_one() -> None:
    # 0.5.23 schedule_policy.py::_sort_by_longest_prefix (line 441) sorts by num_matched_prefix_tokens, which
    # mem_cache/common.py::match_kv_cache (line 261) sets to min(device_prefix_len, len − 1) of a match without
    # max_prefix_len. Page 16: A (64 tokens, fully cached) → min(64, 63) = 63; B (128 tokens, 48 cached) → 48.
    tree = RadixCache(page_size=16)
    a = tuple(range(64))
    b = tuple(range(1000, 1048)) + (9,) * 80
    tree.insert(a, 64, now=0.0)
    tree.insert(b, 48, now=1.0)
    w = [FakeReq("B", len(b), key=b), FakeReq("A", len(a), key=a)]
    order_waiting(w, ServerSettings(schedule_policy="lpm", page_size=16), np.random.default_rng(0),
                  _tree_match(tree))
    assert [r.rid for r in w] == ["A", "B"]
    assert [r.prefix_len for r in w] == [64, 48]  # the pass keeps the whole page-aligned hit


def test_lpm_deprioritises_a_second_identical_32_token_prompt() -> None:
    # 0.5.23 schedule_policy.py::_compute_prefix_matches (lines 346-396): the waiting-queue tree is matched with the
    # whole prompt (no len − 1 cap), so an identical 32-token prompt matches 32 ≥ the threshold 32 → deprioritised.
    p32 = tuple(range(500, 532))
    w = [FakeReq("x", 32, key=p32), FakeReq("y", 32, key=p32), FakeReq("z", 10, key=(7,) * 10)]
    order_waiting(w, ServerSettings(schedule_policy="lpm"), np.random.default_rng(0), _tree_match(RadixCache()))
    assert [r.rid for r in w] == ["x", "z", "y"]


# ---- retraction -------------------------------------------------------------------------------------------
def test_retraction_picks_fewest_outputs_then_longest_input() -> None:
    running = [FakeReq("a", 100, out=30), FakeReq("b", 500, out=10), FakeReq("c", 900, out=10),
               FakeReq("d", 50, out=5)]
    assert [r.rid for r in retraction_order(running)] == ["d", "c", "b", "a"]


# ---- PrefillAdder -------------------------------------------------------------------------------------------
class Pool:
    """available() = free + evictable; a lock removes the candidate's prefix from evictable."""

    def __init__(self, free: int, evictable: int = 0) -> None:
        self.free, self.evictable, self.locked = free, evictable, 0

    def available(self) -> int:
        return self.free + self.evictable - self.locked

    def lock(self, node: Any) -> None:
        self.locked += node or 0

    def unlock(self, node: Any) -> None:
        self.locked -= node or 0


def _adder(settings: ServerSettings, pool: Pool, reservation: float = 0.0, ratio: float = 0.7,
           mixed: int = 0) -> PrefillAdder:
    return PrefillAdder(settings, pool.available, pool.lock, pool.unlock, reservation, ratio, mixed)


def test_no_token_when_prompt_plus_max_new_reaches_remaining() -> None:
    s = ServerSettings(chunked_prefill_size=8192)
    pool = Pool(free=1000)
    a = _adder(s, pool)
    assert a.add_one_req(FakeReq("a", 600, max_new=300)) == AddResult.CONTINUE  # 900 < 1000
    assert a.rem_total == pytest.approx(100)
    assert a.add_one_req(FakeReq("b", 50, max_new=50)) == AddResult.NO_TOKEN  # 100 >= 100
    assert [r.rid for r in a.can_run] == ["a"]


def test_running_requests_reserve_ratio_times_remaining() -> None:
    s = ServerSettings(chunked_prefill_size=8192)
    pool = Pool(free=1000)
    # running reservation 0.5 × 1000 = 500 → a 400+200 request no longer fits
    assert _adder(s, pool, reservation=500.0).add_one_req(FakeReq("a", 400, max_new=200)) == AddResult.NO_TOKEN
    assert _adder(s, pool, reservation=300.0).add_one_req(FakeReq("a", 400, max_new=200)) == AddResult.CONTINUE


def test_evictable_cache_counts_as_room_but_not_own_prefix() -> None:
    s = ServerSettings(chunked_prefill_size=8192)
    # 200 free + 800 evictable; the candidate's own 300-token prefix is locked while checked
    pool = Pool(free=200, evictable=800)
    req = FakeReq("a", 900, max_new=100, prefix_len=300, last_node=300)
    a = _adder(s, pool)
    # extend 600 + 100 = 700 < 1000 - 300 = 700? no: 700 >= 700 → NO_TOKEN
    assert a.add_one_req(req) == AddResult.NO_TOKEN
    req2 = FakeReq("b", 890, max_new=100, prefix_len=300, last_node=300)
    assert _adder(s, Pool(200, 800)).add_one_req(req2) == AddResult.CONTINUE


def test_max_new_reservation_clipped_at_4096() -> None:
    s = ServerSettings(chunked_prefill_size=100000)
    pool = Pool(free=20000)
    a = _adder(s, pool)
    assert a.add_one_req(FakeReq("a", 1000, max_new=100000)) == AddResult.CONTINUE
    assert a.total_offset == pytest.approx(1000 + 4096)


def test_chunking_truncates_to_chunk_budget() -> None:
    s = ServerSettings(chunked_prefill_size=4096)
    a = _adder(s, Pool(free=100000))
    assert a.add_one_req(FakeReq("long", 10000)) == AddResult.OTHER  # chunk budget used up
    assert a.new_chunked is not None and a.extend[id(a.new_chunked)] == 4096
    assert a.total_offset == pytest.approx(4096)  # no max_new reservation for a non-final chunk


def test_first_request_admitted_above_max_prefill_tokens_without_chunking() -> None:
    s = ServerSettings(chunked_prefill_size=-1, max_prefill_tokens=1000)
    a = _adder(s, Pool(free=100000))
    assert a.add_one_req(FakeReq("big", 5000)) == AddResult.OTHER  # admitted, budget now exhausted
    assert [r.rid for r in a.can_run] == ["big"]
    a = _adder(s, Pool(free=100000))
    assert a.add_one_req(FakeReq("small", 600)) == AddResult.CONTINUE
    assert a.add_one_req(FakeReq("next", 600)) == AddResult.OTHER  # 600 >= remaining 400: not admitted
    assert [r.rid for r in a.can_run] == ["small"]


def test_page_overhead_only_in_0_5_23() -> None:
    for version, offset in (("0.5.9", 100 + 10), ("0.5.23", 100 + 10 + 16)):
        s = ServerSettings(sglang_version=version, page_size=16, chunked_prefill_size=8192)
        a = _adder(s, Pool(free=10000))
        a.add_one_req(FakeReq("a", 100, max_new=10))
        # extend 100 tokens → 112 (7 pages) in both; +page_size per request in 0.5.23
        assert a.total_offset == pytest.approx(offset + 12), version


def test_chunked_continuation_gets_at_least_the_chunk() -> None:
    s = ServerSettings(chunked_prefill_size=4096)
    req = FakeReq("c", 10000)
    a = _adder(s, Pool(free=100))  # budget = min(chunk, remaining room) = 100
    assert a.add_chunked_req(req, remaining=5000) is req
    assert a.extend[id(req)] == 100
    a = _adder(s, Pool(free=0))  # no room at all: the continuation must still progress by a full chunk
    assert a.add_chunked_req(req, remaining=5000) is req
    assert a.extend[id(req)] == 4096
    a = _adder(s, Pool(free=100000))
    assert a.add_chunked_req(req, remaining=3000) is None  # last chunk
    assert a.extend[id(req)] == 3000


def test_mixed_chunk_shrinks_chunk_budget_by_running_rows() -> None:
    s = ServerSettings(chunked_prefill_size=4096, enable_mixed_chunk=True)
    a = _adder(s, Pool(free=100000), mixed=96)
    a.add_one_req(FakeReq("long", 10000))
    assert a.extend[id(a.new_chunked)] == 4000


def test_last_chunk_of_a_continuation_reserves_the_whole_max_new() -> None:
    # §2.5 add_chunked_req: the last chunk reserves min(max_new, 4096) — outputs a retracted request already
    # generated are not subtracted there (unlike add_one_req): 100 extend + 400 reserved, not 100 + (400 − 300)
    s = ServerSettings(chunked_prefill_size=4096)
    a = _adder(s, Pool(free=100000))
    assert a.add_chunked_req(FakeReq("re", 1000, max_new=400, out=300), remaining=100) is None
    assert a.total_offset == pytest.approx(100 + 400)
    assert a.current_offset == pytest.approx(100)


# ---- 0.5.23 PrefillAdder rules checked against SGLang's own classes (oracle/, docs/fidelity.md) -------------
def test_retracted_request_reserves_max_new_without_subtracting_outputs_0_5_23() -> None:
    # 0.5.23 schedule_policy.py::add_one_req tests total_tokens with max(max_new − outputs, 0) (lines 1407-1411)
    # but _select_prefill_admission reserves min(max_new_tokens, CLIP) (line 1636, committed at 1685-1703).
    # A retracted request: 100 prompt + 400 outputs re-prefilled (extend 500), max_new 1000.
    s = ServerSettings(sglang_version="0.5.23", chunked_prefill_size=8192)
    a = _adder(s, Pool(free=1200))
    assert a.add_one_req(FakeReq("ret", 100, max_new=1000, out=400)) == AddResult.NO_TOKEN  # budget spent ...
    assert [r.rid for r in a.can_run] == ["ret"]                                          # ... but admitted
    assert a.total_offset == pytest.approx(500 + 1 + 1000)   # extend + page + the whole max_new
    assert a.current_offset == pytest.approx(500 + 1)
    a = _adder(s, Pool(free=1101))  # the admission test itself: 500 + 600 + 1 = 1101 is not < 1101
    assert a.add_one_req(FakeReq("ret", 100, max_new=1000, out=400)) == AddResult.NO_TOKEN and not a.can_run
    # 0.5.9 schedule_policy.py::add_one_req (lines 734-798): the same split, without the per-request page
    a = _adder(ServerSettings(sglang_version="0.5.9", chunked_prefill_size=8192), Pool(free=1200))
    a.add_one_req(FakeReq("ret", 100, max_new=1000, out=400))
    assert a.total_offset == pytest.approx(500 + 1000)


def test_chunked_continuation_cut_by_memory_is_not_page_aligned_0_5_23() -> None:
    # 0.5.23 schedule_policy.py::add_chunked_req (lines 1140-1222): the chunk is min(rem_chunk, remaining_total)
    # (PrefillBudget.available_chunk_tokens, prefill_budget.py line 142) with no page floor. Page 16, 512-token
    # chunks, 1,000 free with a running reservation of 700 → 300 tokens, not 288.
    req = FakeReq("c", 2000, max_new=300)
    s = ServerSettings(sglang_version="0.5.23", page_size=16, chunked_prefill_size=512)
    a = _adder(s, Pool(free=1000), reservation=700.0)
    assert a.add_chunked_req(req, remaining=1500) is req
    assert a.extend[id(req)] == 300
    a = _adder(s, Pool(free=100000))  # cut by the chunk budget: 512 (a page multiple anyway)
    assert a.add_chunked_req(req, remaining=1500) is req and a.extend[id(req)] == 512
    # 0.5.9 schedule_policy.py::add_chunked_req (lines 591-616) cuts the same way; 0.4 keeps a page floor
    s9 = ServerSettings(sglang_version="0.5.9", page_size=16, chunked_prefill_size=512)
    a = _adder(s9, Pool(free=1000), reservation=700.0)
    a.add_chunked_req(req, remaining=1500)
    assert a.extend[id(req)] == 300
    s4 = ServerSettings(sglang_version="0.4.10", page_size=16, chunked_prefill_size=512)
    a = _adder(s4, Pool(free=1000), reservation=700.0)
    a.add_chunked_req(req, remaining=1500)
    assert a.extend[id(req)] == 288


def test_ignore_eos_without_radix_cache_simulates_completions_0_5_23() -> None:
    # 0.5.23 schedule_policy.py::add_one_req (line 1401) hands ignore_eos requests to add_one_req_ignore_eos
    # (lines 1241-1383) when the tree is disabled. Pool 1000 with a running ignore_eos request (100 prompt,
    # 5 of 100 outputs, 105 slots held → 895 free, 95 reserved). Candidate: 400 prompt, max_new 500.
    # Full reservation: 400 + 500 + 1 = 901 >= 895 − 95 → NO_TOKEN. Simulated completions: states sorted by
    # tokens left [(95, 105), (500, 400)], cur_rem 895 − 401 = 494: 494 − 2·95 = 304 > 2, 494 + 105 − 500 = 99 > 1
    # → admitted (SGLang's own classes give the same, oracle real_checks).
    running = [FakeReq("R", 100, max_new=100, out=5, ignore_eos=True)]
    cand = FakeReq("N", 400, max_new=500, ignore_eos=True)
    s = ServerSettings(sglang_version="0.5.23", chunked_prefill_size=8192, disable_radix_cache=True)
    pool = Pool(free=895)
    a = PrefillAdder(s, pool.available, pool.lock, pool.unlock, 95.0, 0.7, running=lambda: running)
    assert a.add_one_req(cand) == AddResult.NO_TOKEN  # admitted; the reservation then exhausts the budget
    assert a.can_run == [cand] and a.extend[id(cand)] == 400
    assert a.total_offset == pytest.approx(95 + 400 + 1 + 500)
    # with the radix cache on, the same request goes through the full reservation and does not fit
    s_on = ServerSettings(sglang_version="0.5.23", chunked_prefill_size=8192)
    a = PrefillAdder(s_on, pool.available, pool.lock, pool.unlock, 95.0, 0.7, running=lambda: running)
    assert a.add_one_req(cand) == AddResult.NO_TOKEN and not a.can_run
    # the simulated completions refuse once the last request's remaining tokens do not fit with one to spare:
    # max_new 600 → 494 + 105 − 600 = −1 <= 1 → NO_TOKEN
    big = FakeReq("M", 400, max_new=600, ignore_eos=True)
    a = PrefillAdder(s, pool.available, pool.lock, pool.unlock, 95.0, 0.7, running=lambda: running)
    assert a.add_one_req(big) == AddResult.NO_TOKEN and not a.can_run


@pytest.mark.parametrize("factor", [0.14, 1.0, 2.0])
def test_decay_steps_is_decay_step_n_times(factor: float) -> None:
    """``decay_steps(n)`` (decode runs) walks the same floats as ``n`` calls of ``decay_step``, from the initial
    value, from a value set by a retraction, past the floor, and with a negative decay (factor above one)."""
    one, many = (NewTokenRatio(ServerSettings(min_new_token_ratio_factor=factor)) for _ in range(2))
    for start, steps in [(None, [1, 7, 250, 400, 3]), (0.31234, [5, 900]), (0.05, [2, 2])]:
        if start is not None:
            one.current = many.current = start
        for n in steps:
            for _ in range(n):
                one.decay_step()
            many.decay_steps(n)
            assert many.current == one.current
        one.reset()
        many.reset()
