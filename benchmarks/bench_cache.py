"""Prefix cache and trace-reader benchmark on the real Mooncake conversation trace (12,031 requests, 12k-token
prompts, 512-token block keys).

Workloads:
  * read_trace     — ``streams.traces.read_trace`` of the whole file (target: well under 1 s);
  * cache_infinite — every request through the KV cache's life (match, lock, alloc, checkpoint, decode alloc,
                     finish) one after another with a 10^9-token pool: no eviction. The hit rate must equal the
                     trace's whole-block prefix-reuse ceiling;
  * cache_400k     — the same with a 400k-token pool (an 8B model on one H100): eviction on most allocations;
  * cache_tokens   — the ShareGPT-style Llama-3.1-8B trace (300 requests with real token ids), 100k-token pool,
                     page size 16, replayed 20 times (exercises token-id matching and splitting).

Prints one line per workload and a final JSON line. These are cache operations only; the scheduler's own cost
comes on top.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from simcore.kv_cache import KVCache
from simcore.request import RequestSpec
from simcore.workload import prefix_reuse_ceiling
from streams.traces import read_trace

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared"


def _lifecycle(reqs: list[RequestSpec], capacity: int, page: int, key_unit: int) -> tuple[float, int, float]:
    """Run each request's whole cache life; returns (hit rate, cache operations, wall seconds)."""
    kv = KVCache(capacity, page_size=page, key_unit=key_unit)
    hit = total = ops = 0
    t0 = time.perf_counter()
    for r in reqs:
        now = r.arrival_s
        m = kv.match(r.key, r.input_len, now)
        kv.lock(m.node)
        need = kv.ceil_page(r.input_len) - m.prefix_len
        ops += 2
        if not kv.alloc(need):
            kv.unlock(m.node)
            continue
        hit += m.prefix_len
        total += r.input_len
        node = kv.cache_unfinished(r.key, r.input_len, m.node, now)
        held = m.prefix_len + need
        extra = kv.ceil_page(r.input_len + r.output_len - 1) - held
        if extra > 0 and kv.alloc(extra):
            held += extra
        kv.cache_finished(r.key, r.input_len + r.output_len - 1, node, now, kv_tokens=held)
        ops += 4
    dt = time.perf_counter() - t0
    kv.check_invariants()
    return hit / max(total, 1), ops, dt


def main() -> dict:
    results: dict[str, float] = {}
    path = SHARED / "data" / "mooncake" / "conversation_trace.jsonl"
    t = time.perf_counter()
    res = read_trace(path)
    dt = time.perf_counter() - t
    reqs = res.requests
    results["read_trace_s"] = round(dt, 3)
    print(f"read_trace      {len(reqs):>7} requests in {dt:.3f} s ({len(reqs) / dt:,.0f} lines/s)")
    ceiling = prefix_reuse_ceiling(reqs)
    results["ceiling"] = round(ceiling, 4)
    for name, cap in (("cache_infinite", 10**9), ("cache_400k", 400_000)):
        hit, ops, dt = _lifecycle(reqs, cap, 1, 512)
        results[f"{name}_hit_rate"] = round(hit, 4)
        results[f"{name}_ops_per_s"] = round(ops / dt)
        print(f"{name:<15} hit rate {hit:.4f} (ceiling {ceiling:.4f})  {ops:,} ops in {dt:.2f} s "
              f"({ops / dt:,.0f} ops/s, {len(reqs) / dt:,.0f} requests/s)")
    share = read_trace(SHARED / "data" / "llmservingsim" / "workloads" / "sharegpt-llama-3.1-8b-300-sps10.jsonl")
    reqs_t = share.requests * 20
    hit, ops, dt = _lifecycle(reqs_t, 100_000, 16, 1)
    results["cache_tokens_hit_rate"] = round(hit, 4)
    results["cache_tokens_ops_per_s"] = round(ops / dt)
    print(f"cache_tokens    hit rate {hit:.4f}  {ops:,} ops in {dt:.2f} s ({ops / dt:,.0f} ops/s)")
    print(json.dumps({"bench": "cache", **results}))
    return results


if __name__ == "__main__":
    main()
