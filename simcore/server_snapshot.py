"""Snapshot, restore and srv-check of :class:`simcore.server.Server` (split out to keep the loop readable).

A snapshot is plain JSON-able domain state (STYLE §8: the domain, never the SimPy environment): the queues, every
unfinished request with its lazy counters, the chunked request, ``new_token_ratio``, the ``batch_is_full`` latch,
the batches in flight and due with their GPU end times, the KV cache (``KVCache.to_state``) and the RNG state.
``restore`` rebuilds the objects and a fresh SimPy process that resumes at the snapshot's next iteration time.
"""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any

from simcore._simpy import simpy

from simcore.kv_cache import KVCache
from simcore.perf.base import LatencyModel
from simcore.results import RequestRecord
from simcore.server_state import batch_from_state, batch_to_state, req_from_state, req_to_state
from simcore.settings import ServerSettings

if TYPE_CHECKING:
    from simcore.server import Server


SNAPSHOT_VERSION = 2
# version 1 (before 2026-12) used one-letter keys; restore() still reads it
_V1_SERVER_KEYS = {"G": "decode_launches", "R": "decoding", "F": "awaiting_result"}
_V1_REQ_KEYS = {"o0": "out_len_base", "g0": "launches_base", "in_r": "in_decoding"}


def upgrade_snapshot(snap: dict[str, Any]) -> dict[str, Any]:
    """A snapshot in the current format (version 1's one-letter keys renamed); ValueError on an unknown version."""
    version = snap.get("version", 1)
    if version == SNAPSHOT_VERSION:
        return snap
    if version != 1:
        raise ValueError(f"server snapshot version {version!r} is not supported (this build reads 1 and "
                         f"{SNAPSHOT_VERSION})")
    out = {_V1_SERVER_KEYS.get(k, k): v for k, v in snap.items()}
    out["reqs"] = [{_V1_REQ_KEYS.get(k, k): v for k, v in d.items()} for d in snap["reqs"]]
    out["version"] = SNAPSHOT_VERSION
    return out


def check_invariants(srv: "Server") -> None:
    """Recount the incremental state from scratch (AssertionError on a mismatch). O(requests); for tests."""
    kv = srv.kv
    kv.check_invariants()
    assert srv.sum_kv == sum(r.input_len + r.out_len for r in srv.decoding.values()), "sum_kv drifted"
    brute = [0, 0]
    for r in list(srv.decoding.values()) + list(srv.awaiting_result.values()):
        brute[r.res_group] += srv.res.left(r)
    assert brute == srv.res.sums, (brute, srv.res.sums)
    private = 0
    for r in srv.reqs.values():
        if r.node is None:
            continue
        held = srv._ceil(r.input_len + r.out_len - 1) if r.in_decoding else r.held
        assert r.node.lock_ref > 0 or r.node is kv.root, f"{r.rid} holds an unlocked node"
        assert held >= r.node.end, (r.rid, held, r.node.end)
        private += held - r.node.end
    assert private == kv.private, f"private KV {kv.private} != held by requests {private}"
    for r in srv.decoding.values():
        assert r.out_len < r.output_len, f"{r.rid} decodes past its output length"

def snapshot(srv: "Server") -> dict[str, Any]:
    """Pure, JSON-able domain state; :meth:`restore` continues exactly like an uninterrupted run."""
    reqs = [req_to_state(r) for r in srv.reqs.values()]
    return {
        "version": SNAPSHOT_VERSION,
        "now": srv.env.now, "t": srv.t, "gpu_free": srv.gpu_free, "idle": srv.idle,
        "decode_launches": srv.launch_counter[0], "sum_kv": srv.sum_kv, "batch_is_full": srv.batch_is_full,
        "ratio": srv.ratio.current, "seq": srv.seq, "bid": srv.bid, "steps": srv.steps,
        "num_retractions": srv.num_retractions, "num_preemptions": srv.num_preemptions,
        "refresh_calls": srv.refresh_calls, "kv_peak_used": srv.kv_peak_used,
        "recv_counter": srv.recv_counter, "last_kind": srv.last_kind,
        "last_decode_apply": srv.last_decode_apply, "last_decode_apply_g": srv.last_decode_apply_g,
        "emit_floor": srv.emit_floor, "out_free": srv.out_free, "tok_free": srv.tok_free,
        "itl_vals": list(srv.itl_vals), "itl_w": list(srv.itl_w),
        "reqs": reqs,
        "pending": [[at, seq, r.rid] for at, seq, r in srv.pending], "ahead": list(srv.ahead),
        "waiting": [r.rid for r in srv.waiting],
        "decoding": list(srv.decoding), "awaiting_result": list(srv.awaiting_result), "zombies": [r.rid for r in srv.zombies],
        "joined": [r.rid for r in srv.joined],
        "chunked": srv.chunked.rid if srv.chunked else None,
        "fin_heap": [list(e) for e in srv.fin_heap], "res": srv.res.to_state(),
        "inflight": batch_to_state(srv.inflight), "due": batch_to_state(srv.due),
        "kv": srv.kv.to_state(),
        "rng": srv.rng.bit_generator.state,
        "speculative": srv.spec.to_state() if srv.spec is not None else None,  # its draws and counters
        "deferred": [[t, rec.to_dict()] for t, rec in srv.deferred],
    }

def restore(cls: type["Server"], env: simpy.Environment, snap: dict[str, Any], settings: ServerSettings,
            latency: LatencyModel, **kw: Any) -> "Server":
    """Rebuild a server (and its SimPy process) from :meth:`snapshot` in ``env`` (``env.now`` should equal
    the snapshot's ``now``). Finish events are new: find them in ``server.events`` by rid."""
    snap = upgrade_snapshot(snap)
    kvs = snap["kv"]
    # The KV accounting of a snapshot is in its own page size and radix mode: restored under other settings, every
    # later page rounding (Server._ceil, _decode_need) would disagree with what the requests hold, and the pool's
    # private count runs negative steps later (free_tokens(34) with -127 private tokens allocated)
    for name, held, asked in (("page_size", kvs["page_size"], settings.page_size),
                              ("disable_radix_cache", kvs["disable_radix"], settings.disable_radix_cache)):
        if held != asked:
            raise ValueError(f"snapshot taken with {name}={held!r} cannot be restored with {name}={asked!r}: restore "
                             "with the settings the snapshot was taken with")
    import numpy as np  # start-up: only a restore needs the generator's class
    rng = np.random.default_rng()
    rng.bit_generator.state = snap["rng"]
    srv = cls(env, settings, kvs["capacity"], latency, key_unit=kvs["key_unit"], rng=rng, _start=False, **kw)
    srv.kv = KVCache.from_state(kvs)
    srv.launch_counter[0] = snap["decode_launches"]
    for d in snap["reqs"]:
        r = req_from_state(d, srv.launch_counter, srv.kv)
        srv.reqs[r.rid] = r
        srv.events[r.rid] = env.event()
    get = srv.reqs.__getitem__
    srv.pending = [(at, seq, get(rid)) for at, seq, rid in snap["pending"]]
    heapq.heapify(srv.pending)
    srv.ahead.extend(snap.get("ahead", []))  # submitted ahead of time (absent in older snapshots)
    srv.waiting = [get(x) for x in snap["waiting"]]
    srv.decoding = {x: get(x) for x in snap["decoding"]}
    srv.awaiting_result = {x: get(x) for x in snap["awaiting_result"]}
    srv.zombies = [get(x) for x in snap["zombies"]]
    srv.joined = [get(x) for x in snap["joined"]]
    srv.chunked = get(snap["chunked"]) if snap["chunked"] else None
    srv.fin_heap = [tuple(e) for e in snap["fin_heap"]]  # type: ignore[misc]
    heapq.heapify(srv.fin_heap)
    srv.res.load_state(snap["res"])
    srv.inflight = batch_from_state(snap["inflight"], srv.reqs.get)
    srv.due = batch_from_state(snap["due"], srv.reqs.get)
    for k in ("t", "gpu_free", "sum_kv", "batch_is_full", "seq", "bid", "steps", "num_retractions",
              "kv_peak_used", "last_decode_apply", "last_decode_apply_g", "emit_floor"):
        setattr(srv, k, snap[k])
    srv.out_free = snap.get("out_free", srv.out_free)  # serial host stages (absent in older snapshots)
    srv.tok_free = snap.get("tok_free", srv.tok_free)
    srv.num_preemptions = snap.get("num_preemptions", 0)  # priority preemption, waiting-prefix refresh
    srv.refresh_calls = snap.get("refresh_calls", 0)      # (absent in older snapshots)
    srv.recv_counter = snap.get("recv_counter", 0)        # --scheduler-recv-interval's poll counter
    srv.last_kind = snap.get("last_kind")
    srv.ratio.current = snap["ratio"]
    if srv.spec is not None and snap.get("speculative") is not None:
        srv.spec.load_state(snap["speculative"])
    srv.itl_vals, srv.itl_w = list(snap["itl_vals"]), list(snap["itl_w"])
    for t, d in snap.get("deferred", []):
        rec = RequestRecord(**d)
        srv.events[rec.rid] = env.event()
        srv.deferred.append((t, rec))
        srv._late(t - env.now).callbacks.append(lambda _e, rec=rec: srv._signal_deferred(rec))
    srv.proc = env.process(srv._resume(snap["idle"]))
    return srv
