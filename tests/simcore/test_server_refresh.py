"""Waiting-prefix refresh (sglang-internals.md §2.4, ``_touch_waiting_prefixes``), with hand-computed numbers.

Under a cache-agnostic policy nothing touches the cached prefix of a request that sits in the queue behind
another one, so LRU may evict it before the request is admitted. SGLang 0.5.23 (not 0.5.9 or 0.4.x) touches
the prefixes of the first 128 waiting requests, head last, on every 32nd scheduling pass that has a waiting
queue, the first such pass included. ``SGLANG_ENABLE_WAITING_PREFIX_REFRESH`` is the settings field
``enable_waiting_prefix_refresh`` (None = the version's behaviour).

Latency model of ``serverkit.LAT``; overlap off so every iteration is one pass.
"""
from __future__ import annotations

import pytest

from simcore.settings import ServerSettings

from serverkit import run, req

K = list(range(100))            # the prefix p caches and w reuses
Q = list(range(5000, 5100))     # a prefix cached later (newer LRU stamp) that nobody waits for


def _scenario(**settings: object):
    """Passes (overlap off, one pass per iteration that has a waiting queue):

    - #0 at t=0: p (K, 100 tokens, 1 output) is admitted; its chunks of 16 run with an empty queue (those
      passes do not count) and it finishes: K is in the tree as nodes of 16,16,16,16,16,16,4 tokens.
    - #1 at t=0.2: q caches Q the same way; Q's LRU stamps are newer than K's.
    - #2 at t=0.4: x (560 tokens, no reusable content) then w (K + 50 new tokens) arrive. x is admitted and
      chunked by 16 tokens: 35 chunks, passes #2 … #36. w waits behind it and is never matched meanwhile (the
      chunk budget is spent first, so the adder stops before w). #37 admits w.
    - Pool 700 tokens: 700 − 200 cached = 500 free. Chunk j (pass #2+j) takes 16; after chunks 0 … 30 4 are
      free, so chunk 31 evicts 12 → the two LRU leaves of 4 and 16 (free 8), and chunks 32, 33, 34 evict
      one 16-token leaf each: 68 tokens of one prefix go, 32 stay.
    - Refresh on: pass #32 (chunk 30) touches w's cached prefix K, now newer than Q → Q loses the 68 tokens
      and w matches all 100 of K. Refresh off: K is older → K loses them and w matches 32.
    """
    reqs = [req("p", 0.0, 100, 1, key=K), req("q", 0.2, 100, 1, key=Q),
            req("x", 0.4, 560, 1), req("w", 0.4, 150, 1, key=K + list(range(9000, 9050)))]
    return run(reqs, cap=700, chunked_prefill_size=16, disable_overlap_schedule=True, **settings)


def test_refresh_keeps_a_waiting_prefix_from_eviction() -> None:
    on = _scenario(sglang_version="0.5.23")
    off = _scenario(sglang_version="0.5.23", enable_waiting_prefix_refresh=False)
    assert on.records["w"].cached_tokens == 100   # K survived: 150-token prompt, 100 from the cache
    assert off.records["w"].cached_tokens == 32   # K's last 68 tokens were the LRU leaves evicted
    # passes with a waiting queue: p, q, 35 chunks of x (w waiting), w → 38; the refresh ran at #0 and #32
    assert on.server.refresh_calls == 38 and off.server.refresh_calls == 0
    # tokens prefilled in all: p 100 + q 100 + x 560 + w's uncached part (50 with the refresh, 118 without)
    assert sum(sum(s.shape.extend_lens) for s in on.steps) == 810
    assert sum(sum(s.shape.extend_lens) for s in off.steps) == 878


@pytest.mark.parametrize("version,expected", [("0.5.23", True), ("0.5.9", False), ("0.4.10", False)])
def test_refresh_is_on_by_default_only_where_sglang_has_it(version: str, expected: bool) -> None:
    assert ServerSettings(sglang_version=version).waiting_prefix_refresh is expected
    assert ServerSettings(sglang_version=version, enable_waiting_prefix_refresh=True).waiting_prefix_refresh


def test_version_without_the_refresh_loses_the_prefix() -> None:
    assert _scenario(sglang_version="0.5.9").records["w"].cached_tokens == 32
    forced = _scenario(sglang_version="0.5.9", enable_waiting_prefix_refresh=True)
    assert forced.records["w"].cached_tokens == 100


def test_cache_aware_policy_is_not_refreshed_by_this_path() -> None:
    # LPM matches (and so touches) every waiting request itself each pass: w's K stays fresh without the refresh
    lpm = _scenario(sglang_version="0.5.23", schedule_policy="lpm")
    assert lpm.server.refresh_calls == 0
    assert lpm.records["w"].cached_tokens == 100


@pytest.mark.parametrize("overlap", [True, False])
def test_fast_path_equals_step_by_step_with_the_refresh(overlap: bool) -> None:
    from simcore.perf.base import LinearLatencyModel
    from test_server import _workload

    kw = dict(cap=2500, chunked_prefill_size=512, schedule_policy="random", sglang_version="0.5.23",
              disable_overlap_schedule=not overlap, lat=LinearLatencyModel(cpu_s=0.001), check=False)
    fast = run(_workload(), fast=True, **kw)
    slow = run(_workload(), fast=False, **kw)
    assert fast.server.refresh_calls > 64 and fast.server.num_retractions > 0
    assert sorted(fast.server.records, key=lambda r: r.rid) == sorted(slow.server.records, key=lambda r: r.rid)
    assert [(s.start_s, s.shape) for s in fast.steps] == [(s.start_s, s.shape) for s in slow.steps]
