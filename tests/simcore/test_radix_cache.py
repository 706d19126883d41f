"""The radix prefix cache (SGLang RadixAttention, sglang-internals.md §3).

The tree maps key prefixes to cached KV. These tests pin the rules the simulator's numbers depend on: matches are
page-aligned and capped by the caller, inserts report what was already cached, locks protect whole paths, and
eviction takes unlocked leaves least-recently-used first, whole nodes at a time.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.radix_cache import RadixCache


def test_empty_tree_matches_nothing() -> None:
    c = RadixCache()
    m = c.match_prefix((1, 2, 3), 10, now=0.0)
    assert m.prefix_len == 0 and m.node is c.root
    assert (c.total_size, c.evictable_size, c.protected_size) == (0, 0, 0)


def test_insert_then_match_longest_prefix_and_cap() -> None:
    c = RadixCache()
    assert c.insert((1, 2, 3, 4, 5), 5, now=0.0)[0] == 0  # nothing was cached before
    assert c.match_prefix((1, 2, 3, 9), 100, now=1.0).prefix_len == 3
    # the caller caps at input_len - 1: a fully cached 5-token prompt matches 4
    assert c.match_prefix((1, 2, 3, 4, 5), 4, now=2.0).prefix_len == 4
    assert c.total_size == 5 and c.evictable_size == 5


def test_match_splits_node_and_keeps_child_identity() -> None:
    c = RadixCache()
    _, leaf = c.insert((1, 2, 3, 4), 4, now=0.0)
    m = c.match_prefix((1, 2, 7), 10, now=1.0)
    assert m.prefix_len == 2
    assert m.node is not leaf and leaf.parent is m.node  # split: new parent [1,2], old node keeps [3,4]
    assert leaf.key == (3, 4) and leaf.end == 4 and c.node_by_id(leaf.id) is leaf
    assert c.total_size == 4 and c.num_nodes == 2
    c.check_invariants()


def test_insert_reports_duplicates() -> None:
    c = RadixCache()
    c.insert((1, 2, 3), 3, now=0.0)
    dup, node = c.insert((1, 2, 3, 4, 5, 6), 6, now=1.0)
    assert dup == 3 and node.end == 6 and c.total_size == 6
    dup, _ = c.insert((1, 2, 3, 4, 5, 6), 6, now=2.0)
    assert dup == 6 and c.total_size == 6
    # num_tokens limits the insert
    dup, node = c.insert((1, 2, 8, 8), 3, now=3.0)
    assert (dup, node.end, c.total_size) == (2, 3, 7)


def test_page_alignment_floors_matches_and_inserts() -> None:
    c = RadixCache(page_size=4)
    dup, node = c.insert(tuple(range(10)), 10, now=0.0)
    assert node.end == 8 and c.total_size == 8  # the partial last page is not cached
    assert c.match_prefix(tuple(range(7)) + (99,), 100, now=1.0).prefix_len == 4
    assert c.match_prefix(tuple(range(10)), 9, now=2.0).prefix_len == 8
    assert c.match_prefix(tuple(range(10)), 7, now=3.0).prefix_len == 4  # cap 7 → floored to a page
    c.check_invariants()


def test_block_keys_match_whole_blocks_only() -> None:
    c = RadixCache(page_size=1, key_unit=512)
    dup, node = c.insert((10, 11, 12), 3 * 512, now=0.0)
    assert node.end == 1536 and c.total_size == 1536
    assert c.match_prefix((10, 11, 99), 10_000, now=1.0).prefix_len == 1024
    # a cap inside a block drops that block: 1000 tokens → 1 whole block
    assert c.match_prefix((10, 11, 12), 1000, now=2.0).prefix_len == 512
    # a partial last block (1100 tokens = 2 blocks + 76) inserts the whole blocks only
    c2 = RadixCache(key_unit=512)
    assert c2.insert((1, 2, 3), 1100, now=0.0)[1].end == 1024


def test_block_keys_with_multi_block_pages() -> None:
    c = RadixCache(page_size=64, key_unit=16)  # 4 blocks per page
    _, node = c.insert(tuple(range(10)), 160, now=0.0)
    assert node.end == 128  # 10 blocks = 160 tokens → 2 whole pages
    with pytest.raises(ValueError):
        RadixCache(page_size=48, key_unit=32)


def test_locks_move_tokens_between_evictable_and_protected() -> None:
    c = RadixCache()
    _, a = c.insert((1, 2, 3, 4), 4, now=0.0)
    m = c.match_prefix((1, 2, 9), 10, now=1.0)  # splits into [1,2] + [3,4]
    c.inc_lock_ref(a)
    assert (c.protected_size, c.evictable_size) == (4, 0)
    c.inc_lock_ref(m.node)  # second holder of the [1,2] part
    c.dec_lock_ref(a)
    assert (c.protected_size, c.evictable_size) == (2, 2)
    c.dec_lock_ref(m.node)
    assert (c.protected_size, c.evictable_size) == (0, 4)
    with pytest.raises(RuntimeError):
        c.dec_lock_ref(m.node)


def test_evict_lru_leaves_first_whole_nodes() -> None:
    c = RadixCache()
    _, a = c.insert((1, 1, 1), 3, now=0.0)
    _, b = c.insert((2, 2, 2, 2), 4, now=1.0)
    _, d = c.insert((3, 3), 2, now=2.0)
    c.match_prefix((1, 1, 1), 10, now=3.0)  # a becomes the most recent
    assert c.eviction_order() == [b.id, d.id, a.id]
    assert c.evict(1) == 4  # the whole LRU leaf b goes, overshooting
    assert c.evict(3) == 2 + 3
    assert c.total_size == 0 and c.evict(5) == 0


def test_evict_parent_after_children_and_never_locked() -> None:
    c = RadixCache()
    c.insert((1, 2, 3), 3, now=0.0)
    _, leaf = c.insert((1, 2, 4), 3, now=1.0)  # [1,2] → {[3], [4]}
    c.inc_lock_ref(leaf)
    assert c.evict(100) == 1  # only [3] is an unlocked leaf; [1,2] is protected by the lock on [4]
    assert c.total_size == 3 and c.protected_size == 3
    c.dec_lock_ref(leaf)
    assert c.evict(100) == 3 and c.total_size == 0
    c.check_invariants()


def test_same_time_ties_break_by_operation_order() -> None:
    c = RadixCache()
    _, a = c.insert((1,), 1, now=5.0)
    _, b = c.insert((2,), 1, now=5.0)
    assert c.eviction_order() == [a.id, b.id]


def test_unique_nodes_are_never_matched() -> None:
    c = RadixCache()
    _, n = c.insert((1, 2), 2, now=0.0)
    u = c.extend_unique(n, 5, now=1.0)
    assert u.end == 7 and u.synthetic and c.total_size == 7
    assert c.match_prefix((1, 2, 3, 4, 5), 10, now=2.0).prefix_len == 2
    assert c.evict(1) == 5  # the unique tail is the only leaf
    c.check_invariants()


def test_disabled_cache_stores_nothing() -> None:
    c = RadixCache(disable=True)
    assert c.insert((1, 2, 3), 3, now=0.0) == (0, c.root)
    assert c.match_prefix((1, 2, 3), 3, now=0.0).prefix_len == 0 and c.total_size == 0


# ---- properties ---------------------------------------------------------------------------------------------
keys = st.lists(st.integers(0, 2), min_size=1, max_size=12).map(tuple)
ops = st.lists(st.tuples(st.integers(0, 4), keys, st.integers(0, 20)), max_size=60)


def _apply(c: RadixCache, op: tuple[int, tuple[int, ...], int], locks: list[int], t: float) -> object:
    kind, key, n = op
    if kind == 0:
        d, node = c.insert(key, n, t)
        return ("ins", d, node.end)
    if kind == 1:
        m = c.match_prefix(key, n, t)
        return ("match", m.prefix_len)
    if kind == 2:
        m = c.match_prefix(key, n, t)
        c.inc_lock_ref(m.node)
        locks.append(m.node.id)
        return ("lock", m.node.id)
    if kind == 3 and locks:
        c.dec_lock_ref(c.node_by_id(locks.pop(n % len(locks))))
        return ("unlock",)
    return ("evict", c.evict(n))


@settings(max_examples=150, deadline=None)
@given(ops=ops, page=st.sampled_from([1, 2, 3]))
def test_property_counters_locks_and_eviction(ops: list, page: int) -> None:
    c = RadixCache(page_size=page)
    locks: list[int] = []
    for i, op in enumerate(ops):
        before = c.total_size
        locked = {nid: c.node_by_id(nid).end for nid in locks}
        out = _apply(c, op, locks, float(i))
        c.check_invariants()
        for nid, end in locked.items():  # locked nodes (and so their paths) survive everything
            assert c.node_by_id(nid).end == end
        if out[0] == "evict":
            assert c.total_size == before - out[1]
        if out[0] == "match":
            assert out[1] % page == 0 and out[1] <= max(op[2], 0)


@settings(max_examples=100, deadline=None)
@given(ops=ops, cut=st.integers(0, 60), page=st.sampled_from([1, 2]))
def test_property_snapshot_round_trip(ops: list, cut: int, page: int) -> None:
    a = RadixCache(page_size=page)
    la: list[int] = []
    cut = min(cut, len(ops))
    for i, op in enumerate(ops[:cut]):
        _apply(a, op, la, float(i))
    b = RadixCache.from_state(json.loads(json.dumps(a.to_state())))
    lb = list(la)
    assert b.to_state() == a.to_state()
    for i, op in enumerate(ops[cut:], start=cut):
        assert _apply(a, op, la, float(i)) == _apply(b, op, lb, float(i))
        assert a.eviction_order() == b.eviction_order()
    assert a.to_state() == b.to_state()


def test_repeated_matches_do_not_grow_the_eviction_heap() -> None:
    """A scheduler re-matches waiting requests every pass; stale LRU entries must not pile up."""
    c = RadixCache()
    for k in range(50):
        c.insert((k, 1, 2), 3, now=float(k))
    for t in range(20_000):
        c.match_prefix((t % 50, 1, 2), 3, now=100.0 + t)
    assert len(c._heap) <= 4 * c.num_nodes + 70
    # the order still follows the last touches: keys 0..49 were touched in turn, so (0, 1, 2) is the oldest
    assert c.evict(1) == 3
    assert c.match_prefix((0, 1, 2), 3, now=1e9).prefix_len == 0
    assert c.match_prefix((1, 1, 2), 3, now=1e9).prefix_len == 3


@settings(max_examples=200, deadline=None)
@given(seq=st.lists(st.tuples(st.booleans(), keys, st.integers(0, 14)), max_size=40),
       page=st.sampled_from([1, 2, 3]))
def test_property_match_equals_brute_force_longest_prefix(seq: list, page: int) -> None:
    """Without eviction, a match is the longest page-aligned common prefix with anything inserted so far."""
    c = RadixCache(page_size=page)
    stored: list[tuple[int, ...]] = []
    for i, (is_insert, key, n) in enumerate(seq):
        if is_insert:
            m = min(n, len(key)) // page * page
            dup, node = c.insert(key, n, float(i))
            assert node.end == m
            best_before = max((_lcp(key[:m], s) for s in stored), default=0) // page * page
            assert dup == best_before
            stored.append(key[:m])
        else:
            cap = min(n, len(key)) // page * page
            want = max((_lcp(key[:cap], s) for s in stored), default=0) // page * page
            assert c.match_prefix(key, n, float(i)).prefix_len == want
        c.check_invariants()
    assert c.total_size == _trie_size(stored, page)


def _lcp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _trie_size(keys: list[tuple[int, ...]], page: int) -> int:
    """Distinct page-aligned prefixes × page = tokens a radix tree of these (page-aligned) keys holds."""
    return page * len({k[:i] for k in keys for i in range(page, len(k) + 1, page)})


# SGLang 0.5.23 mem_cache/radix_cache.py::_match_prefix_helper (line 660) and ::_insert_helper (line 728) set
# child.last_access_time = access_time *before* _split_node (line 677) cuts it, so both halves of a split
# node carry the new access time. The tail therefore outlives an older unrelated leaf under eviction.
# (The oracle's real_checks against SGLang's RadixCache: after evicting 4 tokens the first prompt still matches 8.)
@pytest.mark.parametrize("via_insert", [False, True])
def test_split_refreshes_the_unmatched_tail(via_insert: bool) -> None:
    c = RadixCache()
    c.insert((1, 2, 3, 4, 5, 6, 7, 8), 8, now=0.0)
    c.insert((20, 21, 22, 23), 4, now=1.0)
    if via_insert:
        c.insert((1, 2, 3, 4, 30, 31), 6, now=2.0)   # splits [1..8] at 4, adds [30, 31]
    else:
        c.match_prefix((1, 2, 3, 4, 99), 5, now=2.0)  # splits [1..8] at 4
    assert c.evict(4) == 4  # the least recently used leaf is [20..23], not the tail [5..8] stamped at t=2
    assert c.match_prefix((1, 2, 3, 4, 5, 6, 7, 8), 8, now=3.0).prefix_len == 8
    assert c.match_prefix((20, 21, 22, 23), 4, now=3.0).prefix_len == 0
    c.check_invariants()


def test_move_lock_is_inc_then_dec() -> None:
    """``move_lock(old, new)`` (a checkpoint moving a request's lock down its path) leaves the tree exactly as
    ``inc_lock_ref(new); dec_lock_ref(old)``: counts, sizes and the eviction order, on and off the path."""
    import random

    rnd = random.Random(3)
    for trial in range(40):
        a, b = RadixCache(1, 4), RadixCache(1, 4)
        keys = [tuple(rnd.randrange(3) for _ in range(rnd.randrange(1, 9))) for _ in range(12)]
        for i, k in enumerate(keys):
            for c in (a, b):
                c.insert(k, 4 * len(k), float(i))
        k_old = keys[rnd.randrange(len(keys))]
        k_new = k_old + tuple(rnd.randrange(3) for _ in range(3)) if trial % 2 else keys[rnd.randrange(len(keys))]
        pair = []
        for c in (a, b):
            old = c.match_prefix(k_old, 4 * len(k_old), 50.0).node
            c.inc_lock_ref(old)
            c.insert(k_new, 4 * len(k_new), 51.0)
            new = c.match_prefix(k_new, 4 * len(k_new), 52.0).node
            pair.append((old, new))
        a.move_lock(*pair[0])
        b.inc_lock_ref(pair[1][1])
        b.dec_lock_ref(pair[1][0])
        assert a.to_state() == b.to_state()
        assert (a.evictable_size, a.protected_size) == (b.evictable_size, b.protected_size)
        assert a.eviction_order() == b.eviction_order()
        a.check_invariants()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 12), st.integers(0, 12)), min_size=1, max_size=25),
       st.sampled_from([(1, 1), (2, 1), (1, 4), (4, 2)]))
def test_property_insert_from_the_locked_node_equals_the_walk_from_the_root(ops: list, unit_page: tuple) -> None:
    """``insert(key, n, now, start)`` with ``start`` the node a request holds after matching or inserting that key
    (what ``KVCache._checkpoint`` passes: the request's locked node) leaves the tree exactly as the walk from the
    root does: same result, same nodes, locks, LRU stamps and eviction order. Requests share prefixes (a few
    stems) so inserts split nodes and evictions remove some between steps."""
    key_unit, page = unit_page
    trees = [RadixCache(page_size=page, key_unit=key_unit) for _ in range(2)]
    held: list[tuple[tuple[int, ...], list]] = []  # (key, [node in tree 0, node in tree 1])
    for step, (stem, length, extra) in enumerate(ops):
        key = tuple([100 + stem] * 2 + [stem * 1000 + i for i in range(length)])
        now = float(step)
        nodes = []
        for c in trees:
            node = c.match_prefix(key, len(key) * key_unit, now).node
            c.inc_lock_ref(node)
            nodes.append(node)
        held.append((key, nodes))
        # checkpoint a held request further along its key: hinted in tree 1, from the root in tree 0
        k, ns = held[step % len(held)]
        n_tok = min(len(k), extra + 1) * key_unit
        if n_tok > ns[0].end:
            r0 = trees[0].insert(k, n_tok, now + 0.5)
            r1 = trees[1].insert(k, n_tok, now + 0.5, ns[1])
            assert (r0[0], r0[1].id) == (r1[0], r1[1].id)
            for c, old, new in zip(trees, ns, (r0[1], r1[1])):
                c.move_lock(old, new)
            ns[:] = [r0[1], r1[1]]
        if step % 4 == 3:  # let a request go, then evict a little
            k, ns = held.pop(0)
            for c, node in zip(trees, ns):
                c.dec_lock_ref(node)
                c.evict(2 * key_unit)
        assert trees[0].to_state() == trees[1].to_state()
        assert trees[0].eviction_order() == trees[1].eviction_order()
        for c in trees:
            c.check_invariants()
