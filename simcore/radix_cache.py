"""RadixAttention prefix cache: a radix tree of cached KV, matched by token ids or block hashes.

Semantics follow SGLang's ``mem_cache/radix_cache.py::RadixCache`` (sglang-internals.md §3):

- **Keys.** A key is a sequence of ints. With ``key_unit == 1`` each element is one token id; with ``key_unit > 1``
  each element is a block hash standing for ``key_unit`` tokens (Mooncake: 512) and is matched only whole.
- **Granularity.** Matches and inserts are floored to whole pages (``page_size`` tokens) and whole key elements
  (§3.3, §3.8). In element units the tree works in steps of ``g`` elements: ``g = page_size`` for token keys,
  ``g = page_size // key_unit`` (at least 1) for block keys.
- **Children** are keyed by their first element (``g == 1``) or by the tuple of their first ``g`` elements, as
  SGLang's ``child_key(page_size)``.
- **LRU stamps** are ``(now, tick)``: ``now`` is the simulated time passed in, ``tick`` a per-cache counter bumped
  once per operation, so ties break deterministically (UnifiedTreeCore uses a counter too, §3.6). A match or
  insert that splits a node stamps the whole node first, so the unmatched tail is refreshed too (SGLang's
  ``_match_prefix_helper``/``_insert_helper`` set ``child.last_access_time`` before ``_split_node``).
- **Locks** (``lock_ref``) run along the path to the root; ``evictable_size`` counts unlocked tree tokens and
  ``protected_size`` locked ones, both maintained incrementally.
- **Eviction** is lazy (the caller evicts only when an allocation falls short), removes whole unlocked leaves,
  least recently used first, from a heap with lazy invalidation.
- **Synthetic (unique) nodes** hold KV whose content is unknown (random prompts, generated tokens): they carry a
  token count and no key, hang under a child key no real key can equal, and so are evictable but never matched.

All sizes are in tokens (KV slots). Nothing here allocates memory: the pool is :class:`simcore.kv_cache.KVCache`.
"""
from __future__ import annotations

import heapq
from heapq import heappop, heappush
from typing import Any, Sequence

from simcore.written_dataclass import DataclassFields, frozen_error

_object_setattr = object.__setattr__

_SYN = "syn"  # tag of synthetic child keys: ("syn", uid) never equals an int or a tuple of ints


class TreeNode:
    """One node of the radix tree. ``end`` is the token position where this node's KV ends (path length)."""

    __slots__ = ("id", "parent", "children", "key", "ntok", "end", "ckey", "lock_ref", "last_access", "tick")

    def __init__(self, nid: int, parent: "TreeNode | None", key: tuple[int, ...], ntok: int, ckey: Any) -> None:
        self.id = nid
        self.parent = parent
        self.children: dict[Any, TreeNode] = {}
        self.key = key  # () for synthetic nodes and the root
        self.ntok = ntok
        self.end = (parent.end if parent is not None else 0) + ntok
        self.ckey = ckey  # this node's key in parent.children
        self.lock_ref = 0
        self.last_access = 0.0
        self.tick = 0

    @property
    def synthetic(self) -> bool:
        return isinstance(self.ckey, tuple) and len(self.ckey) == 2 and self.ckey[0] == _SYN

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"TreeNode(id={self.id}, ntok={self.ntok}, end={self.end}, lock={self.lock_ref})"


def _node(nid: int, parent: TreeNode, key: tuple[int, ...], ntok: int, ckey: Any) -> TreeNode:
    """``TreeNode(nid, parent, key, ntok, ckey)`` without the call of its ``__init__`` (compiled: the type's
    allocation and the struct fields set directly, no argument parsing): the same fields, the same values."""
    node = TreeNode.__new__(TreeNode)
    node.id = nid
    node.parent = parent
    node.children = {}
    node.key = key
    node.ntok = ntok
    node.end = parent.end + ntok
    node.ckey = ckey
    node.lock_ref = 0
    node.last_access = 0.0
    node.tick = 0
    return node


class MatchResult:
    """Longest cached prefix: ``prefix_len`` tokens, ending at ``node`` (the root when nothing matched)."""

    __slots__ = ("prefix_len", "node")
    __match_args__ = ("prefix_len", "node")
    __dataclass_fields__ = DataclassFields(frozen=True)

    prefix_len: int
    node: TreeNode

    def __init__(self, prefix_len: int, node: TreeNode) -> None:
        _object_setattr(self, "prefix_len", prefix_len)
        _object_setattr(self, "node", node)

    def __repr__(self) -> str:
        return (self.__class__.__qualname__
                + f"(prefix_len={self.prefix_len!r}, node={self.node!r})")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return ((self.prefix_len, self.node)
                    == (other.prefix_len, other.node))  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.prefix_len, self.node))

    def __setattr__(self, name: str, value: Any) -> None:
        if type(self) is MatchResult or name in _MATCHRESULT_FIELDS:
            raise frozen_error(f"cannot assign to field {name!r}")
        super(MatchResult, self).__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if type(self) is MatchResult or name in _MATCHRESULT_FIELDS:
            raise frozen_error(f"cannot delete field {name!r}")
        super(MatchResult, self).__delattr__(name)

    def __getstate__(self) -> list[Any]:
        return [self.prefix_len, self.node]

    def __setstate__(self, state: list[Any]) -> None:
        for name, value in zip(_MATCHRESULT_FIELDS, state):
            _object_setattr(self, name, value)


_MATCHRESULT_FIELDS = MatchResult.__match_args__


def _common_prefix(a: tuple[int, ...], off: int, b: tuple[int, ...]) -> int:
    """Length of the common prefix of ``a[off:]`` and ``b``, by slice compares (C speed, no per-token loop)."""
    n = min(len(b), len(a) - off)
    if a[off:off + n] == b[:n]:
        return n
    lo, hi = 0, n  # a[off:off+lo] == b[:lo]; the first hi elements differ somewhere
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[off + lo:off + mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class RadixCache:
    """The prefix tree. See the module docstring for the rules; all counts are tokens."""

    def __init__(self, page_size: int = 1, key_unit: int = 1, disable: bool = False) -> None:
        if page_size < 1 or key_unit < 1:
            raise ValueError("page_size and key_unit must be >= 1")
        if key_unit > 1 and key_unit % page_size and page_size % key_unit:
            raise ValueError(f"key_unit {key_unit} and page_size {page_size}: one must divide the other")
        self.page_size = page_size
        self.key_unit = key_unit
        self.disable = disable
        # step in key elements: matches/inserts advance by whole g-element groups (a page or more)
        self.g = page_size if key_unit == 1 else max(1, page_size // key_unit)
        self._next_id = 1
        self._tick = 0
        self._next_uid = 0
        self.root = TreeNode(0, None, (), 0, None)
        self.root.lock_ref = 1  # the root is never evicted
        self._nodes: dict[int, TreeNode] = {0: self.root}
        self._heap: list[tuple[float, int, int]] = []  # (last_access, tick, node id) of evictable leaves, lazily
        self.evictable_size = 0
        self.protected_size = 0

    # ---- sizes ----------------------------------------------------------------------------------------
    @property
    def total_size(self) -> int:
        """Tokens held by the tree."""
        return self.evictable_size + self.protected_size

    @property
    def num_nodes(self) -> int:
        return len(self._nodes) - 1

    def node_by_id(self, nid: int) -> TreeNode:
        return self._nodes[nid]

    # ---- internals ------------------------------------------------------------------------------------
    def _stamp(self, now: float) -> tuple[float, int]:
        self._tick += 1
        return now, self._tick

    def _push(self, node: TreeNode) -> None:
        """Record ``node`` (an unlocked leaf) as an eviction candidate under its current stamp."""
        heap = self._heap
        heappush(heap, (node.last_access, node.tick, node.id))
        if len(heap) > 4 * len(self._nodes) + 64:
            self._compact()

    def _compact(self) -> None:
        # stale entries (touched again, locked, split away, evicted) pile up when nothing is evicted for long;
        # dropping them keeps the heap O(nodes) at amortized O(1) per push
        self._heap = list({e for e in self._heap if self._valid(e) is not None})
        heapq.heapify(self._heap)

    def _touch(self, node: TreeNode, stamp: tuple[float, int]) -> None:
        node.last_access, node.tick = stamp
        if not node.children and node.lock_ref == 0 and node is not self.root:
            self._push(node)

    def _child_key(self, key: tuple[int, ...], pos: int) -> Any:
        return key[pos] if self.g == 1 else key[pos:pos + self.g]

    def _new_node(self, parent: TreeNode, key: tuple[int, ...], ntok: int, ckey: Any,
                  stamp: tuple[float, int]) -> TreeNode:
        node = _node(self._next_id, parent, key, ntok, ckey)
        self._next_id += 1
        self._nodes[node.id] = node
        parent.children[ckey] = node
        self.evictable_size += ntok  # new nodes are unlocked
        self._touch(node, stamp)
        return node

    def _split(self, child: TreeNode, k: int) -> TreeNode:
        """Split ``child`` after ``k`` key elements; the new parent takes the front and inherits the lock count.

        The child keeps its id, so locks held by requests on it stay valid (SGLang does the same).
        """
        parent = child.parent
        assert parent is not None and 0 < k < len(child.key)
        front_tok = k * self.key_unit
        new = _node(self._next_id, parent, child.key[:k], front_tok, child.ckey)
        self._next_id += 1
        self._nodes[new.id] = new
        new.lock_ref = child.lock_ref
        new.last_access, new.tick = child.last_access, child.tick
        parent.children[child.ckey] = new
        child.key = child.key[k:]
        child.ntok -= front_tok
        child.parent = new
        child.ckey = self._child_key(child.key, 0)
        new.children[child.ckey] = child
        return new

    def _max_elems(self, key_len: int, max_tokens: int) -> int:
        n = min(key_len, max(0, max_tokens) // self.key_unit)
        return n - n % self.g

    def _begin_walk(self, key: Sequence[int], max_tokens: int,
                    now: float) -> tuple[tuple[int, ...], int, tuple[float, int]]:
        """The start both walks share: ``key`` cut to at most ``max_tokens`` (whole pages of key elements), its
        length in elements, and a fresh LRU stamp, with which the root is touched."""
        if type(key) is not tuple:
            key = tuple(key)
        n = len(key)
        if max_tokens < 0:
            max_tokens = 0
        cap = max_tokens // self.key_unit
        if cap < n:
            n = cap
        n -= n % self.g  # _max_elems, inlined
        self._tick += 1
        stamp = (now, self._tick)
        root = self.root
        root.last_access, root.tick = stamp
        return (key if n == len(key) else key[:n]), n, stamp

    # ---- match / insert -------------------------------------------------------------------------------
    def match_prefix(self, key: Sequence[int], max_prefix_len: int, now: float) -> MatchResult:
        """Longest cached prefix of ``key``, page-aligned, at most ``max_prefix_len`` tokens; touches the path."""
        node = self.match_node(key, max_prefix_len, now)
        return MatchResult(node.end, node)

    def match_node(self, key: Sequence[int], max_prefix_len: int, now: float) -> TreeNode:
        """:meth:`match_prefix` without the result object: the last node of the matched path (its ``end`` is the
        prefix length; the root when nothing matched)."""
        if self.disable or not key:
            return self.root
        key, n, stamp = self._begin_walk(key, max_prefix_len, now)
        node = self.root
        pos = 0
        g = self.g
        while pos < n:
            child = node.children.get(key[pos] if g == 1 else key[pos:pos + g])
            if child is None:
                break
            ckey = child.key
            k = _common_prefix(key, pos, ckey)
            k -= k % g
            if k == 0:
                break
            if k < len(ckey):
                # SGLang stamps the child before splitting it: the unmatched tail keeps this access time too
                self._touch(child, stamp)
                child = self._split(child, k)
            child.last_access, child.tick = stamp  # _touch, inlined (a child is never the root)
            if not child.children and child.lock_ref == 0:
                self._push(child)
            pos += k
            node = child
        return node

    def insert(self, key: Sequence[int], num_tokens: int, now: float,
               start: TreeNode | None = None) -> tuple[int, TreeNode]:
        """Make the first ``num_tokens`` (floored to page and key unit) of ``key`` present.

        Returns (tokens among them that were already in the tree, the last node of the path).

        ``start``: a node whose path from the root is known to spell a prefix of ``key`` (the node a request
        holds locked after matching or inserting this very key). The walk then stamps that path without
        comparing keys and goes on from ``start``: the same stamps, splits and nodes as the walk from the
        root (no split can fall inside a path that ``key`` covers whole), only cheaper. Ignored when the
        (cut) key ends before ``start``.
        """
        if self.disable or not key:
            return 0, self.root
        key, n, stamp = self._begin_walk(key, num_tokens, now)
        node = self.root
        pos = 0
        g = self.g
        unit = self.key_unit
        if start is not None and start is not node and start.end <= n * unit:
            # the path root → start, stamped as the walk would stamp it (leaves among it enter the heap)
            node = start
            while node is not self.root:
                node.last_access, node.tick = stamp
                if not node.children and node.lock_ref == 0:
                    self._push(node)
                node = node.parent  # type: ignore[assignment]
            node = start
            pos = start.end // unit
        while pos < n:
            ck = key[pos] if g == 1 else key[pos:pos + g]
            child = node.children.get(ck)
            if child is None:
                node = self._new_node(node, key[pos:], (n - pos) * unit, ck, stamp)
                return pos * unit, node
            ckey = child.key
            k = _common_prefix(key, pos, ckey)
            k -= k % g
            if k < len(ckey):
                self._touch(child, stamp)  # as in match_prefix: the tail is stamped before the split
                child = self._split(child, k)
            child.last_access, child.tick = stamp  # _touch, inlined (a child is never the root)
            if not child.children and child.lock_ref == 0:
                self._push(child)
            pos += k
            node = child
        return n * unit, node

    def extend_unique(self, node: TreeNode, num_tokens: int, now: float) -> TreeNode:
        """Append ``num_tokens`` of never-matchable KV below ``node`` (content unknown); returns the new node."""
        if self.disable or num_tokens <= 0:
            return node
        self._next_uid += 1
        return self._new_node(node, (), num_tokens, (_SYN, self._next_uid), self._stamp(now))

    # ---- locks ----------------------------------------------------------------------------------------
    def inc_lock_ref(self, node: TreeNode) -> None:
        """Lock the path from ``node`` to the root (one more holder)."""
        while node is not self.root:
            if node.lock_ref == 0:
                self.evictable_size -= node.ntok
                self.protected_size += node.ntok
            node.lock_ref += 1
            node = node.parent  # type: ignore[assignment]

    def move_lock(self, old: TreeNode, new: TreeNode) -> None:
        """``inc_lock_ref(new)`` then ``dec_lock_ref(old)``, walking only the part of ``new``'s path below ``old``
        when ``old`` is on it (a checkpoint extends the path): the nodes from ``old`` up keep their count (one more,
        one less, never reaching 0, so nothing enters the heap), so the result is the same."""
        root = self.root
        node = new
        below: list[TreeNode] = []
        while node is not old and node is not root:
            below.append(node)
            node = node.parent  # type: ignore[assignment]
        if node is not old:  # old is not an ancestor of new
            self.inc_lock_ref(new)
            self.dec_lock_ref(old)
            return
        for n in below:
            if n.lock_ref == 0:
                self.evictable_size -= n.ntok
                self.protected_size += n.ntok
            n.lock_ref += 1

    def dec_lock_ref(self, node: TreeNode) -> None:
        """Release one lock on the path; nodes reaching 0 become evictable (leaves enter the heap)."""
        while node is not self.root:
            if node.lock_ref <= 0:
                raise RuntimeError(f"dec_lock_ref on unlocked node {node.id}")
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self.evictable_size += node.ntok
                self.protected_size -= node.ntok
                if not node.children:
                    self._push(node)
            node = node.parent  # type: ignore[assignment]

    # ---- eviction -------------------------------------------------------------------------------------
    def _valid(self, entry: tuple[float, int, int]) -> TreeNode | None:
        node = self._nodes.get(entry[2])
        if node is None or node.children or node.lock_ref or node.tick != entry[1] or node is self.root:
            return None
        return node

    def evict(self, num_tokens: int) -> int:
        """Evict unlocked leaves, least recently used first, whole nodes, until ``num_tokens`` are freed.

        Returns tokens freed (may overshoot by part of the last node; less when nothing more is evictable).
        """
        freed = 0
        heap = self._heap
        nodes = self._nodes
        root = self.root
        while freed < num_tokens and heap:
            entry = heappop(heap)
            node = nodes.get(entry[2])  # _valid, inlined
            if node is None or node.children or node.lock_ref or node.tick != entry[1] or node is root:
                continue
            parent = node.parent
            assert parent is not None
            del parent.children[node.ckey]
            del nodes[node.id]
            freed += node.ntok
            self.evictable_size -= node.ntok
            if parent is not root and not parent.children and parent.lock_ref == 0:
                self._push(parent)
                heap = self._heap  # _push may have compacted it into a new list
        return freed

    def eviction_order(self) -> list[int]:
        """Ids of the currently evictable leaves in the order ``evict`` would take them (for tests and views)."""
        return [e[2] for e in sorted(set(self._heap)) if self._valid(e) is not None]

    # ---- snapshot -------------------------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        """Plain JSON-able state; :meth:`from_state` rebuilds a cache that behaves identically."""
        nodes = []
        stack = [self.root]
        while stack:  # parents before children, deterministic order (children dict order)
            node = stack.pop()
            if node is not self.root:
                nodes.append({
                    "id": node.id, "parent": node.parent.id,  # type: ignore[union-attr]
                    "key": list(node.key), "ntok": node.ntok,
                    "uid": node.ckey[1] if node.synthetic else None,
                    "lock_ref": node.lock_ref, "last_access": node.last_access, "tick": node.tick,
                })
            stack.extend(reversed(list(node.children.values())))
        return {
            "page_size": self.page_size, "key_unit": self.key_unit, "disable": self.disable,
            "next_id": self._next_id, "tick": self._tick, "next_uid": self._next_uid,
            "root": {"last_access": self.root.last_access, "tick": self.root.tick},
            "nodes": nodes,
        }

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> "RadixCache":
        cache = cls(d["page_size"], d["key_unit"], d["disable"])
        cache._next_id, cache._tick, cache._next_uid = d["next_id"], d["tick"], d["next_uid"]
        cache.root.last_access, cache.root.tick = d["root"]["last_access"], d["root"]["tick"]
        for nd in d["nodes"]:
            parent = cache._nodes[nd["parent"]]
            key = tuple(nd["key"])
            ckey = (_SYN, nd["uid"]) if nd["uid"] is not None else cache._child_key(key, 0)
            node = TreeNode(nd["id"], parent, key, nd["ntok"], ckey)
            node.lock_ref, node.last_access, node.tick = nd["lock_ref"], nd["last_access"], nd["tick"]
            parent.children[ckey] = node
            cache._nodes[node.id] = node
            if node.lock_ref:
                cache.protected_size += node.ntok
            else:
                cache.evictable_size += node.ntok
        for node in cache._nodes.values():
            if node is not cache.root and not node.children and node.lock_ref == 0:
                cache._heap.append((node.last_access, node.tick, node.id))
        heapq.heapify(cache._heap)
        return cache

    # ---- checks ---------------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Recount everything from the nodes and compare with the incremental counters (raises AssertionError)."""
        ev = pr = 0
        for node in self._nodes.values():
            if node is self.root:
                continue
            p = node.parent
            assert p is not None and p.children.get(node.ckey) is node, f"node {node.id} detached"
            assert node.end == p.end + node.ntok, f"node {node.id} end"
            assert node.ntok > 0 and node.ntok % self.page_size == 0 or node.synthetic, f"node {node.id} size"
            assert node.lock_ref >= 0 and (node.lock_ref <= p.lock_ref or p is self.root), f"lock order {node.id}"
            if not node.synthetic:
                assert node.ntok == len(node.key) * self.key_unit
            if node.lock_ref:
                pr += node.ntok
            else:
                ev += node.ntok
        assert (ev, pr) == (self.evictable_size, self.protected_size), (ev, pr, self.evictable_size,
                                                                         self.protected_size)
