"""SGLang's scheduling decisions, as pure functions and small classes (sglang-internals.md §2.4–2.7).

Nothing here knows about SimPy or time: :class:`simcore.server.Server` owns the loop and calls into

- :func:`order_waiting` — ``SchedulePolicy.calc_priority``: the queue order of one scheduling pass
  (``fcfs``, ``lpm`` with its FCFS fallback above 128 waiting and in-batch prefix deprioritisation,
  ``dfs-weight``, ``lof``, ``random``);
- :class:`PrefillAdder` — admission budgets (``max_prefill_tokens``, ``chunked_prefill_size``, remaining tokens
  counting evictable cache, the reservation ``min(max_new − out, 4096) × new_token_ratio``, page overhead);
- :class:`NewTokenRatio` — start, decay, floor, reset, and the jump after a retraction;
- :func:`retraction_order` — which running request a decode-memory shortage retracts first;
- :func:`preemption_victims` — which running requests a much more urgent waiting request preempts (§2.9).

Requests are duck-typed (see :class:`SchedReq`): the server's request state exposes these attributes.
All counts are tokens.
"""
from __future__ import annotations

import sys
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol, Sequence

from simcore.kv_cache import KVCache
from simcore.settings import ServerSettings

if TYPE_CHECKING:
    import numpy as np

# In-batch prefix caching thresholds (env IN_BATCH_PREFIX_CACHING_CHECK/DEPRIORITIZE_THRESHOLD, §2.4).
IN_BATCH_CHECK_THRESHOLD = 32
IN_BATCH_DEPRIORITIZE_THRESHOLD = 32


class SchedReq(Protocol):
    """What the scheduling functions read from a request."""

    rid: str
    key: tuple[int, ...] | None
    key_unit: int
    input_len: int
    max_new: int           # max_new_tokens after clipping to the context
    ignore_eos: bool
    prefix_len: int        # tokens matched at the last match
    last_node: Any         # tree node of that match

    @property
    def fill_len(self) -> int: ...   # prompt + outputs generated so far (outputs only after a retraction)

    @property
    def out_len(self) -> int: ...    # outputs generated so far


class AddResult(Enum):
    CONTINUE = "continue"
    NO_TOKEN = "no_token"
    OTHER = "other"


# The members as module globals: reading ``AddResult.X`` goes through ``EnumType.__getattr__`` (Python 3.11), ≈ 1,000
# instructions a look-up, and the adder returns one per call
_CONTINUE = AddResult.CONTINUE
_NO_TOKEN = AddResult.NO_TOKEN
_OTHER = AddResult.OTHER


# ---- new_token_ratio ------------------------------------------------------------------------------------
class NewTokenRatio:
    """``NewTokenRatioTracker`` (§2.6): the share of ``max_new_tokens`` the adder reserves for running requests."""

    __slots__ = ("init", "min", "decay", "current", "_chains")

    def __init__(self, settings: ServerSettings) -> None:
        self.init = settings.initial_new_token_ratio
        self.min = settings.min_new_token_ratio
        self.decay = settings.new_token_ratio_decay
        self.current = self.init
        # value → (its chain of successive decays, its index there): the decay is a function of the value alone
        self._chains: dict[float, tuple[list[float], int]] = {}

    def decay_step(self) -> None:
        """Called once per decode step that did not retract."""
        self.current = max(self.current - self.decay, self.min)

    def decay_steps(self, n: int) -> None:
        """:meth:`decay_step` ``n`` times (the same floats), by table: the successive values from a start value are
        kept, up to the floor, so a decode run of ``n`` steps costs one look-up."""
        if n <= 0:
            return
        cur = self.current
        hit = self._chains.get(cur)
        if hit is None:
            chain: list[float] = [cur]
            hit = (chain, 0)
            self._chains[cur] = hit
        chain, i = hit
        j = i + n
        while len(chain) <= j:
            v = chain[-1]
            nxt = max(v - self.decay, self.min)
            if nxt == v:  # the floor: every further step is the identity
                j = len(chain) - 1
                break
            if len(self._chains) >= 100_000:  # (a pathological decay: keep the table bounded)
                self._chains.clear()
            self._chains.setdefault(nxt, (chain, len(chain)))
            chain.append(nxt)
        self.current = chain[j]

    def reset(self) -> None:
        """Scheduler.on_idle(): back to the initial value."""
        self.current = self.init

    @staticmethod
    def after_retract(out_lens: Sequence[int], max_news: Sequence[int], retract_decode_steps: int) -> float:
        """``estimate_new_token_ratio_after_retract`` over the requests that stay running."""
        n = len(out_lens)
        return min(1.0, (sum(out_lens) + retract_decode_steps * n) / (sum(max_news) + 1))


def priority_of(req: Any, sign: int) -> int:
    """The request's priority; one that gave none gets the least preferred value (§2.4: ``-sys.maxsize - 1``
    when higher values come first, ``sys.maxsize`` when low values do, i.e. ``sign`` = +1)."""
    p = req.spec.priority
    if p is None:
        return sys.maxsize if sign > 0 else -sys.maxsize - 1
    return p


# ---- queue ordering ---------------------------------------------------------------------------------------
def active_policy(settings: ServerSettings, num_waiting: int) -> str:
    """The policy of one pass: LPM falls back to FCFS above 128 waiting; cache-aware → FCFS without a cache."""
    return _pass_policy(settings.policy, settings.disable_radix_cache, settings.lpm_fallback_queue_len, num_waiting)


def _pass_policy(policy: str, disable_radix_cache: bool, lpm_fallback_queue_len: int, num_waiting: int) -> str:
    """`active_policy` from the settings' values (`order_waiting` reads them once per settings object)."""
    if policy in ("lpm", "dfs-weight") and disable_radix_cache:
        return "fcfs"
    if policy == "lpm" and num_waiting > lpm_fallback_queue_len:
        return "fcfs"
    return policy


def _key_tokens(req: SchedReq, elems: int) -> int:
    """Tokens covered by ``elems`` key elements of ``req`` (a partial last block counts its real length)."""
    return min(elems * req.key_unit, req.fill_len)


def _in_batch_deprioritised(waiting: Sequence[SchedReq]) -> set[int]:
    """Indices of requests deprioritised by in-batch prefix caching (§2.4, cache-aware policies).

    A request whose (uncapped) real-cache match is at most 32 tokens is matched against a simulated tree of the
    waiting requests seen so far in this pass; ≥ 32 matched tokens there → deprioritised, else it joins that tree.
    Both matches are over the whole fill, with no ``len − 1`` cap (0.5.23 ``SchedulePolicy._compute_prefix_matches``,
    schedule_policy.py lines 346-396: ``r.prefix_len`` from ``match_kv_cache`` without ``max_prefix_len``, and the
    waiting-queue tree's ``device_prefix_len``), so two identical 32-token prompts deprioritise the second.
    The simulated tree is a trie of key elements (dict of dicts).
    """
    trie: dict[Any, Any] = {}
    out: set[int] = set()
    for i, r in enumerate(waiting):
        if r.prefix_len > IN_BATCH_CHECK_THRESHOLD or not r.key:
            continue
        node, depth = trie, 0
        for k in r.key:
            nxt = node.get(k)
            if nxt is None:
                break
            node, depth = nxt, depth + 1
        if depth and _key_tokens(r, depth) >= IN_BATCH_DEPRIORITIZE_THRESHOLD:
            out.add(i)
            continue
        node = trie
        for k in r.key:
            node = node.setdefault(k, {})
    return out


def _dfs_weight_order(waiting: Sequence[SchedReq]) -> list[int]:
    """``_dfs_weight_order`` (0.5.23 mem_cache/base_prefix_cache.py lines 347-387) over the real radix tree.

    Each request sits at the node of its last match (``last_node``; the root when it matched nothing). A node's
    weight is the number of waiting requests in its subtree; the walk visits children heaviest first, ties in the
    tree's own child order (dict insertion order, as SGLang's ``node.children``), and emits a node's requests after
    its children (post-order). Nodes without waiting requests below them emit nothing, so only those with weight
    are walked.
    """
    at: dict[int, list[int]] = {}
    weight: dict[int, int] = {}
    root: Any = None
    for i, r in enumerate(waiting):
        node = r.last_node
        if node is None:  # matched nothing: it sits at the root
            at.setdefault(0, []).append(i)
            continue
        at.setdefault(id(node), []).append(i)
        while node is not None:
            weight[id(node)] = weight.get(id(node), 0) + 1
            root = node
            node = node.parent
    order: list[int] = []
    if root is not None:
        stack: list[tuple[Any, bool]] = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.extend(at.get(id(node), ()))
                continue
            stack.append((node, True))
            kids = [c for c in node.children.values() if id(c) in weight]
            kids.sort(key=lambda c: -weight[id(c)])  # stable: ties keep the tree's child order
            stack.extend((c, False) for c in reversed(kids))
    order.extend(at.get(0, ()))
    return order


# (settings, the values of it order_waiting reads): the last settings seen, one object swapped whole
_POLICY_SETTINGS: tuple[Any, tuple[Any, ...]] = (None, ())


def _policy_settings(settings: ServerSettings) -> tuple[Any, ...]:
    """(policy, disable_radix_cache, lpm_fallback_queue_len, enable_priority_scheduling) of ``settings``, read once
    per settings object (frozen; the server sorts its queue with the same one every pass)."""
    global _POLICY_SETTINGS
    hit = _POLICY_SETTINGS
    if hit[0] is settings:
        return hit[1]
    values = (settings.policy, settings.disable_radix_cache, settings.lpm_fallback_queue_len,
              settings.enable_priority_scheduling)
    _POLICY_SETTINGS = (settings, values)
    return values


def order_waiting(waiting: list[Any], settings: ServerSettings, rng: np.random.Generator,
                  match: Callable[[Any], None]) -> str:
    """Sort ``waiting`` in place for one pass, as ``calc_priority`` does; returns the active policy.

    ``match(req)`` refreshes ``req.prefix_len``/``req.last_node`` against the real tree (touching LRU) over the
    whole fill, without the ``len − 1`` cap of admission; it is called for every waiting request under
    cache-aware policies only.
    """
    policy, no_radix, fallback_len, priority = _policy_settings(settings)
    pol = _pass_policy(policy, no_radix, fallback_len, len(waiting))
    if priority and pol in ("fcfs", "lof"):
        # §2.4/§2.9: priority first (sign −1: higher value first), then wait-queue entry time (fcfs) or
        # −max_new (lof; stable sort keeps queue order among equals)
        sign = settings.priority_sign
        if pol == "fcfs":
            waiting.sort(key=lambda r: (priority_of(r, sign) * sign, r.wait_entry_s))
        else:
            waiting.sort(key=lambda r: (priority_of(r, sign) * sign, -r.max_new))
        return pol
    if pol == "fcfs":
        return pol
    if pol == "lof":
        waiting.sort(key=lambda r: -r.max_new)  # stable: FCFS among equals
        return pol
    if pol == "random":
        perm = rng.permutation(len(waiting))
        waiting[:] = [waiting[i] for i in perm]
        return pol
    for r in waiting:
        match(r)  # uncapped: the whole fill, page-aligned (calc_priority's match_kv_cache has no max_prefix_len)
    if pol == "lpm":
        dep = _in_batch_deprioritised(waiting)
        inf = float("inf")
        # _sort_by_longest_prefix sorts by num_matched_prefix_tokens = min(full hit, len − 1) (common.py line 261)
        keyed = [(inf if i in dep else -min(r.prefix_len, r.fill_len - 1), i) for i, r in enumerate(waiting)]
        keyed.sort()
        waiting[:] = [waiting[i] for _, i in keyed]
    elif pol == "dfs-weight":
        order = _dfs_weight_order(waiting)
        waiting[:] = [waiting[i] for i in order]
    return pol


# ---- retraction -------------------------------------------------------------------------------------------
def retraction_order(running: Sequence[SchedReq]) -> list[SchedReq]:
    """Requests in the order ``retract_decode`` pops them: fewest outputs first, then longest input (§2.7)."""
    return sorted(running, key=lambda r: (r.out_len, -r.input_len))


# ---- priority preemption ----------------------------------------------------------------------------------
def preemption_victims(req: Any, running: Sequence[Any], need_tokens: float, settings: ServerSettings,
                       offset: Callable[[Any], float]) -> list[Any]:
    """``PrefillAdder.preempt_to_schedule`` (§2.9): the running requests to release for ``req``, or [] if none.

    Candidates in order: least preferred priority first, then the most recent wait-queue entry. A candidate is
    preemptible while ``(req.priority − its priority) × (−sign) > threshold``; the walk stops at the first that
    is not. Victims accumulate until their reserved tokens (``offset``) cover ``need_tokens`` (= the
    candidate's ``fill − prefix + min(max_new, CLIP) − rem_total``); if they cannot, nothing is preempted.
    """
    sign = settings.priority_sign
    thr = settings.priority_scheduling_preemption_threshold
    order = sorted(running, key=lambda r: (priority_of(r, sign) * -sign, -r.wait_entry_s))
    victims: list[Any] = []
    need = need_tokens
    mine = priority_of(req, sign)
    for r in order:
        if (mine - priority_of(r, sign)) * -sign <= thr:
            break
        victims.append(r)
        need -= offset(r)
        if need <= 0:
            break
    if not victims or need > 0:
        return []
    return victims


# ---- PrefillAdder -----------------------------------------------------------------------------------------
# (settings, the values of it every PrefillAdder reads): the last settings seen, one object swapped whole
_ADDER_SETTINGS: tuple[Any, tuple[Any, ...]] = (None, ())


def _adder_settings(settings: ServerSettings) -> tuple[Any, ...]:
    """(page_size, clip_max_new_tokens_estimation, prefill_max_requests, chunking_enabled, disable_radix_cache,
    max_prefill_tokens, chunked_prefill_size) of ``settings``, read once per settings object: a ServerSettings is
    frozen, and the server builds an adder per scheduling pass from the same one (≈ 300 instructions an attribute
    read otherwise, ``chunking_enabled`` a property)."""
    global _ADDER_SETTINGS
    hit = _ADDER_SETTINGS
    if hit[0] is settings:
        return hit[1]
    values = (settings.page_size, settings.clip_max_new_tokens_estimation, settings.prefill_max_requests,
              settings.chunking_enabled, settings.disable_radix_cache, settings.max_prefill_tokens,
              settings.chunked_prefill_size)
    _ADDER_SETTINGS = (settings, values)
    return values


class PrefillAdder:
    """Admission of one prefill batch (§2.5). Call :meth:`add_chunked_req` first, then :meth:`add_one_req` per
    waiting request in policy order until it returns something other than CONTINUE.

    ``available()`` is free + evictable tokens of the pool *now* (it shrinks while the adder holds a temporary
    lock on the candidate's prefix); ``lock``/``unlock`` take and drop that temporary lock. An admitted request's
    prefix is locked for good (``inc_lock_ref(req.last_node)``, released by the server at finish/retraction), so
    later candidates no longer count it as evictable.
    """

    def __init__(self, settings: ServerSettings, available: Callable[[], int], lock: Callable[[Any], None],
                 unlock: Callable[[Any], None], running_reservation: float, new_token_ratio: float,
                 num_mixed_decode_tokens: int = 0, family: str | None = None,
                 running: Callable[[], Iterable[SchedReq]] | None = None, pool: KVCache | None = None) -> None:
        self.settings = settings
        (self.page, self.clip, self.max_requests, self.chunking, self.no_radix, max_prefill,
         chunk_size) = _adder_settings(settings)
        self.family = family or settings.family  # callers pass it: settings.family parses a version string
        self.v0523 = self.family == "0.5.23"
        self.v04 = self.family == "0.4"
        self.overhead = self.page if self.v0523 else 0
        self.ratio = new_token_ratio
        self._available = available
        self._lock, self._unlock = lock, unlock
        # ``pool``: the KVCache whose available/lock/unlock these are (the server passes it, and None for the three
        # callables): the adder then calls KVCache.available and the tree's inc_lock_ref/dec_lock_ref itself, the
        # functions those bound methods run (C calls when compiled, no bound method built per pass)
        self._kv = pool
        self.total_offset = float(num_mixed_decode_tokens) + running_reservation
        self.current_offset = float(num_mixed_decode_tokens)
        self.rem_input = max_prefill - num_mixed_decode_tokens
        self.rem_chunk: int | None = chunk_size - num_mixed_decode_tokens if self.chunking else None
        self.can_run: list[Any] = []
        self.extend: dict[int, int] = {}  # id(req) → tokens to compute this step
        self.new_chunked: Any = None
        self.log_hit_tokens = 0
        self.log_input_tokens = 0
        self._running = running          # the running batch's requests (add_one_req_ignore_eos reads them)
        self._req_states: list[tuple[float, int]] | None = None

    def _avail(self) -> int:
        """``available()``: free + evictable tokens of the pool now."""
        kv = self._kv
        if kv is not None:
            return kv.available()
        return self._available()

    # -- budgets --
    @property
    def rem_total(self) -> float:
        return self._avail() - self.total_offset

    @property
    def cur_rem(self) -> float:
        return self._avail() - self.current_offset

    def _ceil_page(self, n: int) -> int:
        return -(-n // self.page) * self.page

    def budget_state(self) -> AddResult:
        avail = self._avail()  # rem_total and cur_rem, one look at the pool
        if avail - self.total_offset <= 0 or avail - self.current_offset <= 0:
            return _NO_TOKEN
        rem_chunk = self.rem_chunk
        if self.rem_input <= 0 or (rem_chunk is not None and rem_chunk <= 0):
            return _OTHER
        return _CONTINUE

    def _update(self, prefix_len: int, extend_len: int, max_new: int) -> None:
        page = self.page
        ext = -(-extend_len // page) * page
        self.total_offset += ext + self.overhead + max_new
        self.current_offset += ext + self.overhead
        self.rem_input -= ext
        if self.rem_chunk is not None:
            self.rem_chunk -= ext
        self.log_hit_tokens += prefix_len
        self.log_input_tokens += extend_len if self.v0523 else ext

    def reserve_of(self, req: SchedReq) -> int:
        """``min(max(max_new − out, 0), CLIP)`` (0.4 ignores the outputs already generated)."""
        if self.v04:
            return min(req.max_new, self.clip)
        return min(max(req.max_new - req.out_len, 0), self.clip)

    # -- continuation of the in-flight chunked request --
    def add_chunked_req(self, req: SchedReq, remaining: int) -> Any:
        """Next chunk of ``req`` (``remaining`` tokens still to compute). Returns req if still unfinished."""
        budget = min(self.rem_chunk if self.rem_chunk is not None else remaining, int(self.rem_total))
        if budget <= 0:  # the continuation must make progress
            budget = self.rem_chunk if self.rem_chunk is not None else remaining
        truncated = remaining > budget
        new_len = min(remaining, budget)
        if truncated and self.v04:
            new_len = max(self.page, new_len // self.page * self.page)
        # 0.5.x takes min(rem_chunk, remaining memory) as it is, not page-aligned (0.5.23 schedule_policy.py::
        # add_chunked_req lines 1140-1222 with PrefillBudget.available_chunk_tokens, prefill_budget.py line 142;
        # 0.5.9 schedule_policy.py lines 591-616)
        self.can_run.append(req)
        self.extend[id(req)] = new_len
        # the last chunk reserves min(max_new, CLIP) in every version: outputs are not subtracted here (§2.5)
        self._update(0, new_len, 0 if truncated else min(req.max_new, self.clip))
        return req if truncated else None

    # -- a waiting request --
    def add_one_req(self, req: SchedReq) -> AddResult:
        """Try to admit ``req`` whose ``prefix_len``/``last_node`` were just refreshed by a match."""
        cap = self.max_requests
        if cap is not None and len(self.can_run) >= cap:  # §2.11 (the in-flight chunk counts too)
            return _OTHER
        v04 = self.v04
        if not v04 and req.ignore_eos and self.no_radix:
            return self.add_one_req_ignore_eos(req)
        max_new = self.reserve_of(req)
        # the admission test subtracts the outputs already generated (a retracted request's), the reservation
        # does not: it charges min(max_new_tokens, CLIP) (0.5.23 _select_prefill_admission, schedule_policy.py
        # lines 1636, 1685-1703; 0.5.9 add_one_req, lines 791-798)
        reserve = min(req.max_new, self.clip) if not v04 else max_new
        prefix_len = req.prefix_len
        extend = req.fill_len - prefix_len
        total_tokens = extend + max_new + self.overhead
        node = req.last_node
        kv = self._kv
        # for the test; kept (not released) when admitted: its prefix stays locked
        if kv is not None:
            kv.tree.inc_lock_ref(node)  # what kv.lock(node) runs
        else:
            self._lock(node)
        admitted = False
        try:
            page = self.page
            input_tokens = -(-extend // page) * page
            if total_tokens >= self._avail() - self.total_offset:  # rem_total
                return _NO_TOKEN
            check_input = (not self.chunking) if self.v0523 else True
            if check_input and self.can_run and input_tokens >= self.rem_input:
                return _OTHER
            rem_chunk = self.rem_chunk
            if rem_chunk is None or input_tokens <= rem_chunk:
                admitted = True  # SGLang locks again and releases the test lock: the same one lock, kept here
                self.can_run.append(req)
                self.extend[id(req)] = extend
                self._update(prefix_len, extend, reserve)
            else:
                if v04:
                    trunc = rem_chunk - page + 1
                else:
                    trunc = rem_chunk // page * page
                end = (prefix_len + trunc) // page * page
                trunc = end - prefix_len
                if trunc <= 0:
                    return _OTHER
                admitted = True
                self.can_run.append(req)
                self.extend[id(req)] = trunc
                self.new_chunked = req
                self._update(prefix_len, trunc, 0)
        finally:
            if not admitted:
                if kv is not None:
                    kv.tree.dec_lock_ref(node)  # what kv.unlock(node) runs
                else:
                    self._unlock(node)
        return self.budget_state()

    # -- ignore_eos requests without a radix cache (0.5.23) --
    def _req_state(self, r: SchedReq) -> tuple[float, int] | None:
        """(tokens left, tokens occupied) of ``add_req_state``: max_new (unclipped) × ratio − outputs."""
        ratio = 1.0 if r.ignore_eos else self.ratio
        left = r.max_new * ratio - r.out_len
        return None if left <= 0 else (left, r.input_len + r.out_len)

    def add_one_req_ignore_eos(self, req: SchedReq) -> AddResult:
        """``PrefillAdder.add_one_req_ignore_eos`` (0.5.23 schedule_policy.py lines 1241-1383, 0.5.9 lines
        632-716), taken by ``add_one_req`` for an ignore_eos request when the radix cache is disabled (0.5.23 line
        1401, 0.5.9 line 731).

        Instead of reserving every running request's remaining tokens, it simulates completions: the running,
        admitted and candidate requests sorted by tokens left; walking them shortest first, the ``bs`` requests
        still running must each fit their remaining tokens in the free memory plus what the finished ones
        released, with one token to spare each (IGNORE_EOS_RESERVE_TOKENS).
        """
        extend = req.fill_len - req.prefix_len
        paged_input = self._ceil_page(extend) + self.overhead
        if paged_input > min(self.cur_rem, self.rem_total):  # PrefillBudget.can_allocate_prefill
            return _NO_TOKEN
        if self._req_states is None:
            states = [self._req_state(req)]
            states += [self._req_state(r) for r in (self._running() if self._running is not None else ())]
            states += [self._req_state(r) for r in self.can_run]
            self._req_states = sorted((x for x in states if x is not None), key=lambda x: x[0])
        else:
            st = self._req_state(req)
            if st is not None:  # SGLang's insertion loop, quirk included (no match → before the last entry)
                i = 0
                for i in range(len(self._req_states)):
                    if st[0] <= self._req_states[i][0]:
                        break
                self._req_states.insert(i, st)
        cur_rem = self.cur_rem - paged_input
        freed = 0
        n = len(self._req_states)
        for i, (left, occupied) in enumerate(self._req_states):
            bs = n - i
            if cur_rem + freed - left * bs <= bs:
                return _NO_TOKEN
            freed += occupied
        if self.rem_chunk is None or extend <= self.rem_chunk:
            self.can_run.append(req)
            self.extend[id(req)] = extend
            self._update(0, extend, min(req.max_new, self.clip))
        else:
            if self.rem_chunk <= 0:
                return _OTHER
            trunc = self.rem_chunk  # not page-aligned on this path
            self.can_run.append(req)
            self.extend[id(req)] = trunc
            self.new_chunked = req
            self._update(0, trunc, 0)
        return self.budget_state()
