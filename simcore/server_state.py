"""The server's per-request and per-batch state, and their JSON-able snapshots (used by simcore.server).

A request's output count is lazy while it decodes: ``out_len = out_len_base + (G − launches_base)`` with ``G`` the
server's decode-launch counter (``launch_counter[0]``, one cell shared by the server and all its requests), so one
decode step does not touch every running request.
"""
from __future__ import annotations

import heapq
from typing import Any, Callable

from simcore.frozen_new import frozen_new
from simcore.kv_cache import KVCache
from simcore.perf.base import BatchShape
from simcore.request import RequestSpec

_REQ_FIELDS = ("out_len_base", "launches_base", "in_decoding", "ver", "state", "prefix_len", "held", "extend_end", "fill_target",
               "cached_tokens", "admitted_once", "stain", "num_retractions", "ingest_s", "wait_entry_s",
               "queue_time_s", "first_token_s", "last_emit_s", "last_bid", "dropped_bid", "res_group", "in_dec",
               "abort_error", "out_key_base", "out_key_len")


class Req:
    """Scheduler state of one request. ``state``: wait → prefill → run → finishing → done (wait again on
    retraction). ``held``: KV positions the request holds (matched prefix + allocated), valid outside ``run``."""

    __slots__ = ("spec", "rid", "key", "key_unit", "input_len", "output_len", "max_new", "ignore_eos", "eos",
                 "launch_counter", "node", "last_node") + _REQ_FIELDS

    def __init__(self, spec: RequestSpec, max_req_len: int, launch_counter: list[int]) -> None:
        self.spec = spec
        self.rid = spec.rid
        self.key = spec.key
        self.key_unit = spec.key_unit
        self.input_len = spec.input_len
        # max_new_tokens: None (chat API) is clipped to the context (Scheduler.init_req_max_new_tokens)
        cap = max(1, max_req_len - spec.input_len - 1)
        self.max_new = min(spec.max_new_tokens, cap) if spec.max_new_tokens is not None else cap
        self.ignore_eos = spec.ignore_eos
        out = spec.output_len if not spec.ignore_eos else self.max_new
        self.output_len = max(1, min(out, self.max_new))
        # finishes by EOS/stop (seen one step late under overlap) unless it runs into max_new_tokens
        self.eos = self.output_len < self.max_new
        self.launch_counter = launch_counter
        self.node: Any = None
        self.last_node: Any = None
        self.out_len_base = 0
        self.launches_base = 0
        self.in_decoding = False
        self.ver = 0
        self.state = "wait"
        self.prefix_len = 0
        self.held = 0
        self.extend_end = 0
        self.fill_target = 0
        self.cached_tokens = 0
        self.admitted_once = False
        self.stain = False
        self.num_retractions = 0
        self.ingest_s = spec.arrival_s
        self.wait_entry_s = spec.arrival_s
        self.queue_time_s = 0.0
        self.first_token_s: float | None = None
        self.last_emit_s = 0.0
        self.last_bid = 0
        self.dropped_bid = 0
        self.res_group = -1   # ReservationSum group while in the running batch, else -1
        self.in_dec = False
        self.abort_error: str | None = None  # set when SGLang refuses the prompt at ingest (abort_for_length)
        self.out_key_base: int | None = None  # key elements of its own outputs, once retracted (key_outputs)
        self.out_key_len = 0

    @classmethod
    def from_spec(cls, spec: RequestSpec, max_req_len: int, launch_counter: list[int]) -> "Req":
        return cls(spec, max_req_len, launch_counter)

    def abort_for_length(self, max_input_len: int) -> None:
        """A prompt at or above ``max_req_input_len`` (= max_req_len − 5, 0.5.23 tp_worker.py line 572): the
        scheduler's ``validate_input_length`` (managers/utils.py lines 259-289) refuses it and
        ``set_finish_with_abort`` (schedule_batch.py lines 2221-2238) shrinks the prompt to the single token 0 so
        the request passes the queue as a 1-token prefill, reserving no new tokens (``init_req_max_new_tokens``
        already clipped max_new_tokens to 0, scheduler.py lines 2693-2716), and finishes aborted when that
        prefill's result is processed (``update_finish_state``, schedule_batch.py line 2011)."""
        self.abort_error = (f"Input length ({self.input_len} tokens) exceeds the maximum allowed length "
                            f"({max_input_len} tokens). Use a shorter input or enable --allow-auto-truncate.")
        self._shrink_aborted()

    def key_outputs(self, base: int) -> None:
        """At a retraction: extend the key over the outputs generated so far, as elements unique to this request
        (``base``, ``base − 1``, … — negative, so never a prompt token). SGLang's fill is prompt + output ids, so
        the checkpoint after the re-prefill puts those generated tokens in the tree (checkpoint_kv_cache,
        0.5.23 mem_cache/common.py lines 271-280) and a second retraction matches them again; no other request
        can match them. Token keys only (a block-hash key has no per-token elements)."""
        if self.spec.key is None or self.key_unit != 1 or self.abort_error is not None:
            return
        if self.out_key_base is None:
            self.out_key_base = base
        self.out_key_len = self.out_len
        self.key = self.spec.key[: self.input_len] + output_key(self.out_key_base, self.out_key_len)

    def _shrink_aborted(self) -> None:
        self.input_len = 1
        self.key = (0,) if self.key is not None and self.key_unit == 1 else None
        self.max_new = 0
        self.output_len = 1
        self.eos = False

    @property
    def out_len(self) -> int:
        """Output tokens launched so far."""
        return self.out_len_base + (self.launch_counter[0] - self.launches_base) if self.in_decoding else self.out_len_base

    @property
    def fill_len(self) -> int:
        """Prompt plus generated tokens: what a (re-)prefill computes."""
        return self.input_len + self.out_len

    def last_bid_in(self, b: "Batch") -> bool:
        """Whether ``b`` (the latest launched batch) computed a token of this request."""
        if self.last_bid == b.bid:
            return True
        return b.g_after is not None and self.launches_base < b.g_after


def output_key(base: int, n: int) -> tuple[int, ...]:
    """``n`` key elements standing for a request's own generated tokens (see :meth:`Req.key_outputs`)."""
    return tuple(range(base, base - n, -1))


_EMPTY: Any = ()
_NO_SHAPE = BatchShape()
SHAPE_FIELDS: tuple[str, ...] = BatchShape.__match_args__  # (frozen_new)


class Batch:
    """One launched forward pass and what applying its result does."""

    __slots__ = ("bid", "kind", "_shape", "dec_rows", "dec_sum_kv", "dec_graph", "gpu_end", "emit_s",
                 "prefill_done", "finishers", "n_emit", "newcomers", "g_after", "retracted")

    def __init__(self, bid: int, kind: str) -> None:
        self.bid = bid
        self.kind = kind
        # the shape, set by the server when the batch is built; a plain decode batch sets only its three numbers
        # (``set_decode``) and its BatchShape is made when something asks for it (pricing reads the numbers)
        self._shape: BatchShape | None = _NO_SHAPE
        self.dec_rows = 0
        self.dec_sum_kv = 0
        self.dec_graph: int | None = None
        self.gpu_end = 0.0
        self.emit_s = 0.0                       # when its tokens reach the client (before detokenize_s)
        # lists start as a shared empty tuple and are replaced by a list on first use (most decode steps
        # have none of them; this keeps a decode step allocation-free)
        self.prefill_done: list[Req] = _EMPTY   # requests whose prompt completes here (first/next token)
        self.finishers: list[Req] = _EMPTY      # requests whose last token is computed here
        self.n_emit = 0                         # decode rows that emit a token
        self.newcomers: list[Req] = _EMPTY      # decode rows emitting their first decode token since joining
        self.g_after: int | None = None     # decode-launch counter after this batch (None: no decode rows)
        self.retracted: tuple[str, ...] = ()

    @property
    def shape(self) -> BatchShape:
        sh = self._shape
        if sh is None:
            sh = self._shape = frozen_new(BatchShape, SHAPE_FIELDS, ((), (), self.dec_rows, self.dec_sum_kv, (),
                                                                   self.dec_graph))
        return sh

    @shape.setter
    def shape(self, sh: BatchShape) -> None:
        self._shape = sh
        self.dec_rows, self.dec_sum_kv, self.dec_graph = sh.num_decode, sh.decode_sum_kv, sh.cuda_graph_bs

    def set_decode(self, rows: int, sum_kv: int, graph_bs: int | None) -> None:
        """A decode-only shape: ``rows`` rows over ``sum_kv`` KV tokens, CUDA graph ``graph_bs`` (None: eager)."""
        self._shape = None
        self.dec_rows = rows
        self.dec_sum_kv = sum_kv
        self.dec_graph = graph_bs

    def drop(self, r: Req) -> None:
        """``r`` was retracted while this batch was in flight: its token is discarded."""
        if r in self.prefill_done:
            self.prefill_done.remove(r)
        else:
            self.n_emit -= 1
            r.dropped_bid = self.bid


def req_to_state(r: Req) -> dict[str, Any]:
    s = r.spec
    d: dict[str, Any] = {
        "spec": {"rid": s.rid, "arrival_s": s.arrival_s, "input_len": s.input_len, "output_len": s.output_len,
                 "max_new_tokens": s.max_new_tokens, "key": list(s.key) if s.key is not None else None,
                 "key_unit": s.key_unit, "ignore_eos": s.ignore_eos, "priority": s.priority},
        "max_new": r.max_new, "output_len": r.output_len, "eos": r.eos,
        "node": r.node.id if r.node is not None else None,
    }
    for f in _REQ_FIELDS:
        d[f] = getattr(r, f)
    return d


def req_from_state(d: dict[str, Any], launch_counter: list[int], kv: KVCache) -> Req:
    sd = dict(d["spec"])
    sd["key"] = tuple(sd["key"]) if sd["key"] is not None else None
    r = Req(RequestSpec(**sd), 2, launch_counter)
    r.max_new, r.output_len, r.eos = d["max_new"], d["output_len"], d["eos"]
    for f in _REQ_FIELDS:
        setattr(r, f, d.get(f) if f == "abort_error" else d[f])  # snapshots before abort_error have none
    if r.out_key_base is not None and r.spec.key is not None:
        r.key = r.spec.key[: r.input_len] + output_key(r.out_key_base, r.out_key_len)
    if r.abort_error is not None:
        r._shrink_aborted()
        r.max_new, r.output_len, r.eos = d["max_new"], d["output_len"], d["eos"]
    r.node = kv.node_by_id(d["node"]) if d["node"] is not None else None
    r.last_node = kv.root
    return r


def batch_to_state(b: Batch | None) -> dict[str, Any] | None:
    if b is None:
        return None
    sh = b.shape
    return {"bid": b.bid, "kind": b.kind, "gpu_end": b.gpu_end, "emit_s": b.emit_s,
            "shape": [list(sh.extend_lens), list(sh.prefix_lens), sh.num_decode, sh.decode_sum_kv,
                      list(sh.decode_kv_lens), sh.cuda_graph_bs],
            "prefill_done": [r.rid for r in b.prefill_done], "finishers": [r.rid for r in b.finishers],
            "n_emit": b.n_emit, "newcomers": [r.rid for r in b.newcomers], "g_after": b.g_after,
            "retracted": list(b.retracted)}


def batch_from_state(d: dict[str, Any] | None, get: Callable[[str], Req | None]) -> Batch | None:
    if d is None:
        return None
    b = Batch(d["bid"], d["kind"])
    e, p, nd, sk, dk, cg = d["shape"]
    b.shape = BatchShape(tuple(e), tuple(p), nd, sk, tuple(dk), cg)
    b.gpu_end = d["gpu_end"]
    b.emit_s = d["emit_s"]
    def reqs(rids: list[str]) -> list[Req]:
        return [r for r in (get(x) for x in rids) if r is not None]

    b.prefill_done = reqs(d["prefill_done"])
    b.finishers = reqs(d["finishers"])
    b.n_emit = d["n_emit"]
    b.newcomers = reqs(d["newcomers"])
    b.g_after = d["g_after"]
    b.retracted = tuple(d["retracted"])
    return b


class ReservationSum:
    """``Σ min(max(max_new − out, 0), CLIP)`` over the running batch, kept in O(1) per decode step (§2.5).

    Every version subtracts the outputs already generated here (0.4's ``min(max_new, CLIP)`` is the *candidate's*
    reservation in ``PrefillAdder.reserve_of``, not the running batch's). Two groups: requests reserved at ``new_token_ratio`` (group 0) and, in 0.5.23, ``ignore_eos`` requests reserved
    at 1.0 (group 1). A decoding request's term is CLIP until ``max_new − out`` drops to CLIP, then falls by one
    per decode step; a heap of those transition points moves requests into the falling set.
    """

    __slots__ = ("clip", "sums", "ndec", "heap", "seq")

    def __init__(self, clip: int) -> None:
        self.clip = clip
        self.sums = [0, 0]
        self.ndec = [0, 0]
        self.heap: list[tuple[int, int, str, int]] = []
        self.seq = 0

    def left(self, r: Req) -> int:
        return min(max(r.max_new - r.out_len, 0), self.clip)

    def value(self, ratio: float) -> float:
        return self.sums[0] * ratio + self.sums[1]

    def add(self, r: Req, group: int, decoding: bool) -> None:
        """``r`` enters the running batch (``decoding``: its term changes with G)."""
        r.res_group = group
        self.sums[group] += self.left(r)
        r.in_dec = False
        if not decoding:
            return
        G = r.launch_counter[0]
        t = r.max_new - r.out_len_base + r.launches_base - self.clip  # G from which each step lowers the term
        if G >= t:
            r.in_dec = True
            self.ndec[group] += 1
        else:
            self.seq += 1
            heapq.heappush(self.heap, (t, self.seq, r.rid, r.ver))

    def remove(self, r: Req) -> None:
        """``r`` leaves the running batch; call before its lazy counters are frozen."""
        g = r.res_group
        self.sums[g] -= self.left(r)
        if r.in_dec:
            self.ndec[g] -= 1
            r.in_dec = False
        r.res_group = -1

    def before_decode(self, G: int, reqs: dict[str, Req]) -> None:
        """One decode launch is about to raise G by one: every falling term drops by one."""
        self.advance(G, 1, reqs)

    def advance(self, G: int, steps: int, reqs: dict[str, Req]) -> None:
        """``before_decode(G)``, ``before_decode(G + 1)``, … ``steps`` times, in one pass: a term that starts
        falling at step k (its transition point) falls ``steps − k`` times."""
        heap = self.heap
        last = G + steps - 1
        drop = [self.ndec[0] * steps, self.ndec[1] * steps]
        while heap and heap[0][0] <= last:
            t, _, rid, ver = heapq.heappop(heap)
            r = reqs.get(rid)
            if r is None or r.ver != ver or not r.in_decoding or r.in_dec or r.res_group < 0:
                continue
            r.in_dec = True
            self.ndec[r.res_group] += 1
            drop[r.res_group] += G + steps - (t if t > G else G)
        self.sums[0] -= drop[0]
        self.sums[1] -= drop[1]

    def to_state(self) -> dict[str, Any]:
        return {"sums": list(self.sums), "ndec": list(self.ndec), "heap": [list(e) for e in self.heap],
                "seq": self.seq}

    def load_state(self, d: dict[str, Any]) -> None:
        self.sums, self.ndec, self.seq = list(d["sums"]), list(d["ndec"]), d["seq"]
        self.heap = [tuple(e) for e in d["heap"]]  # type: ignore[misc]
        heapq.heapify(self.heap)
