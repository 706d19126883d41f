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


def test_dfs_weight_groups_by_heaviest_subtree() -> None:
    # matched prefixes: two requests under block 1, three under block 2 → block-2 group first
    w = [FakeReq("x1", 2000, key=(1, 10), key_unit=512, prefix_len=512),
         FakeReq("y1", 2000, key=(2, 20), key_unit=512, prefix_len=512),
         FakeReq("none", 2000, key=(9,), key_unit=512, prefix_len=0),
         FakeReq("x2", 2000, key=(1, 11), key_unit=512, prefix_len=512),
         FakeReq("y2", 2000, key=(2, 21), key_unit=512, prefix_len=512),
         FakeReq("y3", 2000, key=(2, 22), key_unit=512, prefix_len=512)]
    order_waiting(w, ServerSettings(schedule_policy="dfs-weight"), np.random.default_rng(0), lambda r: None)
    assert [r.rid for r in w] == ["y1", "y2", "y3", "x1", "x2", "none"]


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
