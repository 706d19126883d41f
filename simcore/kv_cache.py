"""The KV token pool plus the radix tree: the memory API the scheduler codes against.

Every count is in tokens (KV slots). The pool's ``capacity`` (= ``max_total_num_tokens``) splits into

- ``free``: unallocated slots (SGLang ``allocator.available_size()``);
- ``evictable``: tree tokens no running request locks (cached, counted as free by admission, §8.3.4);
- ``protected``: tree tokens locked by running requests (their matched/inserted prefixes);
- ``private``: slots allocated to requests and not (yet) in the tree: extend tokens before their checkpoint,
  decode tokens, the partial last page.

``free + evictable + protected + private == capacity`` always. ``used = private + protected`` is SGLang's
``num_used`` (§4.6): ``token_usage = used / capacity``.

Request lifecycle, as SGLang 0.5.x (§3.3–3.5):

1. ``m = kv.match(key, input_len, now)``: prefix (capped at ``input_len - 1``); the caller locks ``m.node`` with
   :meth:`lock` when it admits the request.
2. ``kv.alloc(n)`` for the extend tokens (page multiples when ``page_size > 1``); evicts LRU leaves lazily.
3. after each prefill chunk: ``node = kv.cache_unfinished(key, done_tokens, node, now)`` (lock moves).
4. decode: ``kv.alloc(...)`` per new page/token; generated tokens stay private.
5. finish: ``kv.cache_finished(key, input_len + output_len - 1, node, now, kv_tokens=held)``;
   retraction/abort without checkpoint: ``kv.release(node, held)``.

``held`` (the request's ``kv_tokens``) is its matched prefix plus everything it allocated.
"""
from __future__ import annotations

from typing import Any, Sequence

from simcore.radix_cache import MatchResult, RadixCache, TreeNode


class KVCache:
    """Token pool of ``capacity_tokens`` slots with a :class:`RadixCache` on top."""

    def __init__(self, capacity_tokens: int, page_size: int = 1, key_unit: int = 1,
                 disable_radix: bool = False) -> None:
        if capacity_tokens < 1:
            raise ValueError(f"capacity_tokens must be >= 1, got {capacity_tokens}")
        self.capacity = capacity_tokens
        self.page_size = page_size
        self.key_unit = key_unit
        self.disable_radix = disable_radix
        self.tree = RadixCache(page_size=page_size, key_unit=key_unit, disable=disable_radix)
        self.free = capacity_tokens
        self.private = 0
        self.evicted_total = 0  # tokens ever evicted (for sglang:evicted_tokens_total-like views)

    # ---- views ----------------------------------------------------------------------------------------
    @property
    def evictable(self) -> int:
        return self.tree.evictable_size

    @property
    def protected(self) -> int:
        return self.tree.protected_size

    @property
    def used(self) -> int:
        """SGLang's ``num_used``: private KV of requests plus locked tree nodes (§4.6)."""
        return self.private + self.tree.protected_size

    def available(self) -> int:
        """``free + evictable``: what admission may count on (§8.3.4)."""
        return self.free + self.tree.evictable_size

    def ceil_page(self, n: int) -> int:
        """``n`` tokens rounded up to whole pages."""
        p = self.page_size
        return -(-n // p) * p

    def floor_page(self, n: int) -> int:
        return n - n % self.page_size

    @property
    def root(self) -> TreeNode:
        return self.tree.root

    def node_by_id(self, nid: int) -> TreeNode:
        return self.tree.node_by_id(nid)

    # ---- operations -----------------------------------------------------------------------------------
    def match(self, req_key: Sequence[int] | None, input_len: int, now: float) -> MatchResult:
        """Cached prefix of a request, capped at ``input_len - 1`` tokens (at least one token is recomputed)."""
        if req_key is None:
            return MatchResult(0, self.tree.root)
        return self.tree.match_prefix(req_key, input_len - 1, now)

    def match_full(self, req_key: Sequence[int] | None, fill_len: int, now: float) -> MatchResult:
        """Cached prefix of the request's whole fill, no ``len − 1`` cap: the match a scheduling pass sorts by
        (0.5.23 ``calc_priority`` → ``match_kv_cache`` without ``max_prefix_len``, mem_cache/common.py line 221)."""
        if req_key is None:
            return MatchResult(0, self.tree.root)
        return self.tree.match_prefix(req_key, fill_len, now)

    def touch(self, req_key: Sequence[int] | None, fill_len: int, now: float) -> None:
        """``touch_prefix`` (§2.4): refresh the LRU stamps along the cached prefix of the request's whole fill
        (prompt + outputs; no ``−1`` cap, unlike :meth:`match`). Changes nothing else."""
        if req_key is not None:
            self.tree.match_prefix(req_key, fill_len, now)

    def lock(self, node: TreeNode) -> None:
        self.tree.inc_lock_ref(node)

    def unlock(self, node: TreeNode) -> None:
        self.tree.dec_lock_ref(node)

    def evict(self, num_tokens: int) -> int:
        """Evict at least ``num_tokens`` from the tree if possible; the freed slots return to ``free``."""
        freed = self.tree.evict(num_tokens)
        self.free += freed
        self.evicted_total += freed
        return freed

    def alloc(self, n: int) -> bool:
        """Take ``n`` slots for a request. Evicts LRU leaves only if ``free < n``; False (nothing taken) if short."""
        if n <= 0:
            return True
        if self.free < n:
            self.evict(n - self.free)
            if self.free < n:
                return False
        self.free -= n
        self.private += n
        return True

    def free_tokens(self, n: int) -> None:
        """Give back ``n`` private slots (retraction, abort, over-allocation)."""
        if n < 0 or n > self.private:
            raise ValueError(f"free_tokens({n}) with {self.private} private tokens allocated")
        self.private -= n
        self.free += n

    def _checkpoint(self, key: Sequence[int] | None, num_tokens: int, old_node: TreeNode, now: float,
                    finished: bool) -> TreeNode:
        """Insert the first ``num_tokens`` (page-floored) of a request that holds ``old_node`` locked.

        Its private copies of tokens already in the tree are freed; the rest move from private into the tree.
        Returns the request's new last node (not yet locked); tokens past it stay private.

        Key-less KV (no key at all, or, at finish, the tokens past the key's whole elements: generated tokens, a
        partial last block) goes in as never-matched unique nodes. Before finish a keyed request's tokens past its
        whole elements stay private: the next chunk may complete the element, and a unique node there would hide
        the rest of the prompt from matching.
        """
        prot = old_node.end
        target = self.floor_page(num_tokens)
        if self.disable_radix or target <= prot:
            return old_node
        node, dup = old_node, prot
        if key is not None and not old_node.synthetic:
            dup, node = self.tree.insert(key, target, now, old_node)  # old_node's path spells key's prefix
            if node.end < prot:  # key shorter than the locked path: keep what the request holds
                node, dup = old_node, prot
        if node.end < target and (finished or key is None):
            node = self.tree.extend_unique(node, target - node.end, now)
        # tokens [prot, node.end) leave the request's private set: the duplicates are freed, the rest are tree now
        self.private -= node.end - prot
        self.free += dup - prot
        return node

    def cache_unfinished(self, key: Sequence[int] | None, num_tokens: int, old_node: TreeNode,
                         now: float) -> TreeNode:
        """After a prefill chunk: checkpoint ``num_tokens``; the lock moves to the returned node."""
        node = self._checkpoint(key, num_tokens, old_node, now, finished=False)
        if node is not old_node:
            self.tree.move_lock(old_node, node)
        return node

    def cache_finished(self, key: Sequence[int] | None, num_tokens: int, old_node: TreeNode, now: float,
                       kv_tokens: int | None = None) -> None:
        """At finish: checkpoint ``num_tokens`` (prompt + output - 1), free the rest of the request's slots, unlock.

        ``kv_tokens`` is everything the request holds (matched prefix + allocated); default ``num_tokens``.
        """
        held = num_tokens if kv_tokens is None else kv_tokens
        node = self._checkpoint(key, min(num_tokens, held), old_node, now, finished=True)
        self.free_tokens(max(0, held - max(node.end, old_node.end)))
        self.tree.dec_lock_ref(old_node)

    def release(self, old_node: TreeNode, kv_tokens: int) -> None:
        """Retraction/abort without checkpoint: free the private slots, unlock the prefix."""
        self.free_tokens(max(0, kv_tokens - old_node.end))
        self.tree.dec_lock_ref(old_node)

    # ---- snapshot -------------------------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "page_size": self.page_size, "key_unit": self.key_unit,
                "disable_radix": self.disable_radix, "free": self.free, "private": self.private,
                "evicted_total": self.evicted_total, "tree": self.tree.to_state()}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> "KVCache":
        kv = cls(d["capacity"], d["page_size"], d["key_unit"], d["disable_radix"])
        kv.free, kv.private, kv.evicted_total = d["free"], d["private"], d["evicted_total"]
        kv.tree = RadixCache.from_state(d["tree"])
        return kv

    def check_invariants(self) -> None:
        """Raise AssertionError unless the pool adds up: nothing negative, nothing over-committed."""
        self.tree.check_invariants()
        assert self.free >= 0 and self.private >= 0, (self.free, self.private)
        total = self.free + self.private + self.tree.total_size
        assert total == self.capacity, f"free+private+tree = {total} != capacity {self.capacity}"
