"""The KV token pool with its radix tree: the memory the scheduler admits, allocates and frees against.

A request's life: match its prefix (capped at input_len - 1), lock it, allocate its extend tokens, checkpoint each
prefill chunk into the tree, allocate decode tokens, and at finish put prompt + output[:-1] into the tree and unlock.
The properties at the end drive random request mixes through that life and check the pool is never
over-committed, locked prefixes are never evicted and every token is accounted for.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.kv_cache import KVCache
from simcore.radix_cache import TreeNode


def test_fresh_pool() -> None:
    kv = KVCache(100)
    assert (kv.capacity, kv.free, kv.used, kv.evictable, kv.available()) == (100, 100, 0, 0, 100)
    assert kv.match(None, 50, now=0.0).prefix_len == 0
    with pytest.raises(ValueError):
        KVCache(0)


def test_request_lifecycle_accounting() -> None:
    kv = KVCache(100)
    key = tuple(range(10))
    m = kv.match(key, 10, now=0.0)
    kv.lock(m.node)
    assert kv.alloc(10)
    assert (kv.free, kv.used, kv.private) == (90, 10, 10)
    node = kv.cache_unfinished(key, 10, m.node, now=1.0)  # prompt into the tree, locked
    assert (kv.private, kv.protected, kv.evictable, kv.used) == (0, 10, 0, 10)
    assert kv.alloc(4)  # 4 decode tokens, private
    kv.cache_finished(key, 10 + 5 - 1, node, now=2.0, kv_tokens=14)  # 5 outputs: the last has no KV
    assert (kv.free, kv.used, kv.evictable) == (86, 0, 14)  # prompt + 4 output tokens stay cached
    assert kv.available() == 100
    kv.check_invariants()
    # a second request with the same prompt reuses all but the last token
    assert kv.match(key, 10, now=3.0).prefix_len == 9


def test_duplicate_prefill_frees_the_second_copy() -> None:
    """Two requests computing the same uncached prompt in one batch (pitfall 10): dedup happens at insert."""
    kv = KVCache(100)
    key = (5, 6, 7, 8)
    nodes = []
    for _ in range(2):
        m = kv.match(key, 4, now=0.0)
        assert m.prefix_len == 0
        kv.lock(m.node)
        assert kv.alloc(4)
        nodes.append(m.node)
    assert kv.free == 92
    n1 = kv.cache_unfinished(key, 4, nodes[0], now=1.0)
    n2 = kv.cache_unfinished(key, 4, nodes[1], now=1.0)
    assert n1 is n2 and n1.lock_ref == 2
    assert (kv.free, kv.private, kv.protected) == (96, 0, 4)
    kv.check_invariants()


def test_alloc_evicts_lazily_only_when_short() -> None:
    kv = KVCache(10)
    for key, t in (((1, 1, 1, 1), 0.0), ((2, 2, 2, 2), 1.0)):
        m = kv.match(key, 4, now=t)
        assert kv.alloc(4)
        kv.cache_finished(key, 4, m.node, now=t)
    assert (kv.free, kv.evictable) == (2, 8)
    assert kv.alloc(2) and kv.evicted_total == 0  # fits in free: nothing evicted
    assert kv.alloc(3)  # short by 3: the LRU leaf (1,1,1,1) goes whole
    assert (kv.evicted_total, kv.free, kv.evictable) == (4, 1, 4)
    assert not kv.alloc(6)  # 1 free + 4 evictable < 6
    assert kv.private == 5
    kv.check_invariants()


def test_chunked_prefill_moves_the_lock() -> None:
    kv = KVCache(64, page_size=4)
    key = tuple(range(20))
    node = kv.match(key, 20, now=0.0).node
    kv.lock(node)
    held = 0
    for end in (8, 16, 20):
        need = kv.ceil_page(end) - held
        assert kv.alloc(need)
        held += need
        new = kv.cache_unfinished(key, end, node, now=float(end))
        assert new.end == kv.floor_page(end) and new.lock_ref == 1
        assert node is kv.root or node.lock_ref == 1  # the old node stays locked only as an ancestor
        node = new
    assert (kv.protected, kv.private) == (20, 0)
    assert kv.alloc(kv.ceil_page(21) - held)  # the first decode token opens a new page
    kv.cache_finished(key, 21, node, now=30.0, kv_tokens=24)  # 2 outputs; the partial page is freed
    assert (kv.private, kv.protected, kv.evictable, kv.free) == (0, 0, 20, 44)
    kv.check_invariants()


def test_chunk_ending_inside_a_block_keeps_the_prompt_matchable() -> None:
    """A chunk budget rarely ends on a 512-token block boundary; the partial block stays private until the next
    chunk completes it, so the whole prompt is still found by the next request with the same blocks."""
    kv = KVCache(10_000, key_unit=512)
    key = (1, 2, 3, 4)  # 2000 tokens: 3 whole blocks + 464
    node = kv.match(key, 2000, now=0.0).node
    assert kv.alloc(700)
    node = kv.cache_unfinished(key, 700, node, now=1.0)  # block 1 cached, 188 tokens private
    assert (node.end, kv.protected, kv.private) == (512, 512, 188)
    assert kv.alloc(1300)
    node = kv.cache_unfinished(key, 2000, node, now=2.0)
    assert (node.end, kv.protected, kv.private) == (1536, 1536, 464)
    kv.cache_finished(key, 2000 + 10 - 1, node, now=3.0, kv_tokens=2000)  # no decode slots allocated here
    # at finish the partial block goes in as a never-matched tail (prompt + output - 1 = 2009 → 2000 held)
    assert (kv.private, kv.evictable, kv.free) == (0, 2000, 8000)
    assert kv.match(key, 2000, now=4.0).prefix_len == 1536
    kv.check_invariants()


def test_unknown_content_is_cached_but_never_matched() -> None:
    kv = KVCache(50)
    m = kv.match(None, 8, now=0.0)
    assert kv.alloc(8)
    node = kv.cache_unfinished(None, 8, m.node, now=1.0)
    assert node.synthetic and kv.protected == 8
    kv.cache_finished(None, 8, node, now=2.0, kv_tokens=8)
    assert kv.evictable == 8 and kv.match(None, 8, now=3.0).prefix_len == 0
    assert kv.evict(1) == 8


def test_release_without_checkpoint() -> None:
    kv = KVCache(20)
    key = (1, 2, 3, 4)
    m = kv.match(key, 4, now=0.0)
    assert kv.alloc(4)
    node = kv.cache_unfinished(key, 4, m.node, now=0.0)
    assert kv.alloc(3)
    kv.release(node, kv_tokens=7)  # retraction: decode tokens freed, prompt stays cached unlocked
    assert (kv.private, kv.evictable, kv.free) == (0, 4, 16)


def test_disabled_radix_keeps_everything_private() -> None:
    kv = KVCache(20, disable_radix=True)
    key = (1, 2, 3)
    m = kv.match(key, 3, now=0.0)
    assert kv.alloc(3)
    node = kv.cache_unfinished(key, 3, m.node, now=0.0)
    assert node is kv.root and kv.private == 3
    kv.cache_finished(key, 3, node, now=1.0, kv_tokens=3)
    assert (kv.free, kv.evictable) == (20, 0)
    assert kv.match(key, 3, now=2.0).prefix_len == 0


# ---- a random request mix driven through the lifecycle -----------------------------------------------------------
@dataclass
class _Req:
    key: tuple[int, ...] | None
    input_len: int
    output_len: int
    node: TreeNode
    prefix: int
    held: int  # matched prefix + allocated slots
    done: int  # tokens whose KV exists (prompt progress, then prompt + outputs - 1)
    out: int = 0


class Driver:
    """Applies ops (kind, arg) to a KVCache the way the scheduler does; returns a comparable outcome per op."""

    def __init__(self, kv: KVCache, keys: list[tuple[int, ...] | None]) -> None:
        self.kv, self.keys = kv, keys
        self.running: list[_Req] = []

    def _prefill(self, r: _Req, now: float, chunk: int) -> str:
        kv = self.kv
        end = min(r.input_len, r.done + chunk)
        need = kv.ceil_page(end) - r.held
        if need > 0 and not kv.alloc(need):
            kv.release(r.node, r.held)
            self.running.remove(r)
            return "retract"
        r.held += max(need, 0)
        r.done = end
        r.node = kv.cache_unfinished(r.key, end, r.node, now)
        if end == r.input_len:
            r.out = 1
        return f"chunk{end}"

    def step(self, kind: int, arg: int, now: float) -> Any:
        kv = self.kv
        if kind == 0:  # arrival + admission
            key = self.keys[arg % len(self.keys)]
            ku = kv.key_unit  # block keys: the last block may be partial
            n_in = len(key) * ku - arg % ku if key is not None else 1 + arg % 9
            m = kv.match(key, n_in, now)
            kv.lock(m.node)
            r = _Req(key, n_in, 1 + arg % 4, m.node, m.prefix_len, m.prefix_len, m.prefix_len)
            self.running.append(r)
            return ("admit", m.prefix_len, self._prefill(r, now, 1 + arg % 7))
        if not self.running:
            return ("idle",)
        r = self.running[arg % len(self.running)]
        if kind == 1:
            if r.out == 0:
                return ("prefill", self._prefill(r, now, 1 + arg % 7))
            if r.out == r.output_len:
                kv.cache_finished(r.key, r.done, r.node, now, kv_tokens=r.held)
                self.running.remove(r)
                return ("finish",)
            need = kv.ceil_page(r.done + 1) - r.held
            if need > 0 and not kv.alloc(need):
                kv.release(r.node, r.held)
                self.running.remove(r)
                return ("retract-decode",)
            r.held += max(need, 0)
            r.done += 1
            r.out += 1
            return ("decode", r.done)
        if kind == 2:
            kv.release(r.node, r.held)
            self.running.remove(r)
            return ("abort",)
        return ("evict", kv.evict(arg))

    def check(self) -> None:
        kv = self.kv
        kv.check_invariants()
        assert kv.free + kv.evictable + kv.used == kv.capacity
        # every private token belongs to a running request
        assert sum(r.held - r.node.end for r in self.running) == kv.private
        for r in self.running:  # locked paths are alive
            assert kv.node_by_id(r.node.id) is r.node and r.node.lock_ref >= 1 or r.node is kv.root

    def to_state(self) -> list[dict[str, Any]]:
        return [{"key": list(r.key) if r.key is not None else None, "input_len": r.input_len,
                 "output_len": r.output_len, "node": r.node.id, "prefix": r.prefix, "held": r.held,
                 "done": r.done, "out": r.out} for r in self.running]

    @classmethod
    def from_state(cls, kv: KVCache, keys: list, reqs: list[dict[str, Any]]) -> "Driver":
        d = cls(kv, keys)
        for s in reqs:
            d.running.append(_Req(tuple(s["key"]) if s["key"] is not None else None, s["input_len"],
                                  s["output_len"], kv.node_by_id(s["node"]), s["prefix"], s["held"], s["done"],
                                  s["out"]))
        return d


key_pool = st.lists(st.one_of(st.none(), st.lists(st.integers(0, 2), min_size=1, max_size=10).map(tuple)),
                    min_size=1, max_size=6)
op_list = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 30)), max_size=80)


@settings(max_examples=250, deadline=None)
@given(keys=key_pool, ops=op_list, cap=st.integers(12, 60), page=st.sampled_from([1, 2, 4]),
       key_unit=st.sampled_from([1, 1, 4]))
def test_property_pool_never_overcommitted_locks_hold_tokens_conserved(keys, ops, cap, page, key_unit) -> None:
    kv = KVCache(cap - cap % page, page_size=page, key_unit=key_unit)
    d = Driver(kv, keys)
    for i, (kind, arg) in enumerate(ops):
        d.step(kind, arg, float(i))
        d.check()
    for r in list(d.running):  # drain: everything returns to free or evictable
        kv.release(r.node, r.held)
    d.running.clear()
    d.check()
    assert kv.used == 0 and kv.available() == kv.capacity


@settings(max_examples=100, deadline=None)
@given(keys=key_pool, ops=op_list, cut=st.integers(0, 80), key_unit=st.sampled_from([1, 4]))
def test_property_snapshot_round_trip(keys, ops, cut, key_unit) -> None:
    a = Driver(KVCache(30 if key_unit == 1 else 120, page_size=2, key_unit=key_unit), keys)
    cut = min(cut, len(ops))
    for i, (kind, arg) in enumerate(ops[:cut]):
        a.step(kind, arg, float(i))
    blob = json.loads(json.dumps({"kv": a.kv.to_state(), "reqs": a.to_state()}))
    b = Driver.from_state(KVCache.from_state(blob["kv"]), keys, blob["reqs"])
    for i, (kind, arg) in enumerate(ops[cut:], start=cut):
        assert a.step(kind, arg, float(i)) == b.step(kind, arg, float(i))
    assert a.kv.to_state() == b.kv.to_state() and a.to_state() == b.to_state()


def test_mooncake_infinite_pool_reaches_the_whole_block_ceiling(shared_dir) -> None:
    """Acceptance (issue 2): with an unbounded pool every reusable whole 512-token block is hit, so the hit rate
    sits just below the trace's prefix-reuse ceiling (the partial last blocks, 0.02 points) and never above."""
    from simcore.workload import prefix_reuse_ceiling
    from streams.traces import read_trace

    reqs = read_trace(shared_dir / "data/mooncake/conversation_trace.jsonl").requests
    kv = KVCache(10**9, key_unit=512)
    hit = total = 0
    for r in reqs:
        m = kv.match(r.key, r.input_len, r.arrival_s)
        kv.lock(m.node)
        assert kv.alloc(r.input_len - m.prefix_len)
        node = kv.cache_unfinished(r.key, r.input_len, m.node, r.arrival_s)
        assert kv.alloc(r.output_len - 1)
        done = r.input_len + r.output_len - 1
        kv.cache_finished(r.key, done, node, r.arrival_s, kv_tokens=done)
        hit += m.prefix_len
        total += r.input_len
    kv.check_invariants()
    ceiling = prefix_reuse_ceiling(reqs)
    assert ceiling - 0.001 < hit / total <= ceiling
    assert round(hit / total, 4) == 0.3734 and kv.used == 0 and kv.evicted_total == 0
