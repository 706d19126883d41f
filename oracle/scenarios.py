"""The oracle's scenarios as data: server flags, a workload of token ids, and the shared step-time function.

Both sides read the same JSON (:meth:`Scenario.to_json`): the SGLang side runs in the oracle's own environment and
never imports shadowsim, so workloads are generated here once (seeded numpy) and travel as token ids.

Two kinds:

- ``scheduler``: the whole scheduling loop (SGLang's real ``Scheduler`` vs ``simcore.server.Server``), compared
  step by step. Closed loop (``concurrency`` requests in flight, the next submitted when one finishes) or open
  loop (``arrival_s`` per request).
- ``cache``: a cache-level replay of the Mooncake conversation trace (block hashes expanded to tokens) through
  SGLang's radix trees and ours with the same match/lock/evict/insert protocol, compared request by request.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

VOCAB = 32000  # the tiny Llama's vocabulary (tiny-llama-config.json); ids 0-2 are special, never drawn
# the shared linear step time (seconds): base + per extend token + per decode row; no CPU time on either side
STEP_BASE_S, STEP_PER_EXTEND_TOKEN_S, STEP_PER_DECODE_REQ_S = 0.01, 1e-5, 1e-4
MOONCAKE_BLOCK_TOKENS = 512


def step_time_s(extend_tokens: int, decode_rows: int) -> float:
    """The step-time function both sides use (SGLang's side advances a virtual clock with it)."""
    if extend_tokens == 0 and decode_rows == 0:
        return 0.0
    return STEP_BASE_S + STEP_PER_EXTEND_TOKEN_S * extend_tokens + STEP_PER_DECODE_REQ_S * decode_rows


@dataclass(frozen=True)
class RequestSpecJSON:
    rid: str
    input_ids: list[int]
    max_new_tokens: int
    ignore_eos: bool = True
    arrival_s: float = 0.0
    priority: int | None = None


@dataclass(frozen=True)
class ServerFlags:
    """The SGLang flags a scenario sets (names as ``ServerArgs``); everything else is SGLang's default."""

    max_total_tokens: int = 20000
    schedule_policy: str = "fcfs"
    chunked_prefill_size: int = 2048
    max_prefill_tokens: int = 16384
    max_running_requests: int = 64
    context_length: int = 32768
    page_size: int = 1
    enable_mixed_chunk: bool = False
    enable_priority_scheduling: bool = False
    priority_scheduling_preemption_threshold: int = 10
    disable_overlap_schedule: bool = True
    disable_radix_cache: bool = False


@dataclass(frozen=True)
class CacheReplay:
    """Cache-level replay: ``tree`` is ``radix`` (SGLang's Python RadixCache) or ``unified`` (its default
    UnifiedRadixCache, Rust tree core); ``capacity_tokens`` is the pool the tree may fill."""

    tree: str
    capacity_tokens: int
    page_size: int = 1
    num_requests: int = 1500


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    kind: str  # "scheduler" | "cache"
    flags: ServerFlags = field(default_factory=ServerFlags)
    requests: list[RequestSpecJSON] = field(default_factory=list)
    concurrency: int | None = None  # closed loop: requests kept in flight; None = open loop (arrival_s)
    cache: CacheReplay | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "Scenario":
        d = json.loads(text)
        return cls(name=d["name"], description=d["description"], kind=d["kind"], flags=ServerFlags(**d["flags"]),
                   requests=[RequestSpecJSON(**r) for r in d["requests"]], concurrency=d["concurrency"],
                   cache=CacheReplay(**d["cache"]) if d["cache"] else None)


# ---- workloads ------------------------------------------------------------------------------------------------
def _ids(rng: np.random.Generator, n: int) -> list[int]:
    return [int(x) for x in rng.integers(3, VOCAB, n)]


def shared_prefix_workload(seed: int, num_requests: int, system_len: int, input_range: tuple[int, int],
                           output_range: tuple[int, int], ignore_eos: bool = True,
                           priorities: tuple[int, ...] | None = None,
                           arrival_gap_s: float | None = None,
                           long_every: int | None = None, long_len: int = 0) -> list[RequestSpecJSON]:
    """Prompts = one shared system prompt + a unique tail; lengths uniform in the ranges (end exclusive); every
    ``long_every``-th request (if given) gets a ``long_len``-token prompt instead."""
    rng = np.random.default_rng(seed)
    system = _ids(rng, system_len)
    out = []
    for i in range(num_requests):
        n_in = int(rng.integers(*input_range))
        if long_every and i % long_every == long_every - 1:
            n_in = long_len
        n_out = int(rng.integers(*output_range))
        prio = int(rng.choice(priorities)) if priorities else None
        arrival = round(i * arrival_gap_s, 6) if arrival_gap_s is not None else 0.0
        out.append(RequestSpecJSON(f"q{i:04d}", system + _ids(rng, max(1, n_in - system_len)), n_out, ignore_eos,
                                   arrival, prio))
    return out


def mooncake_requests(trace: Path, num_requests: int) -> list[dict[str, Any]]:
    """The first requests of the Mooncake conversation trace, hash blocks expanded to tokens ``h*512 + i``
    (distinct blocks never share a token), cut to ``input_length``; outputs are request-unique negative ids."""
    rows = []
    with open(trace) as fh:
        for line, _ in zip(fh, range(num_requests)):
            rows.append(json.loads(line))
    out = []
    for i, r in enumerate(rows):
        toks: list[int] = []
        for h in r["hash_ids"]:
            toks.extend(range(h * MOONCAKE_BLOCK_TOKENS, (h + 1) * MOONCAKE_BLOCK_TOKENS))
        out.append({"t": r["timestamp"] / 1000.0, "prompt": toks[: r["input_length"]],
                    "output_len": int(r["output_length"]), "index": i})
    return out


def output_ids(index: int, n: int) -> list[int]:
    """Request-unique output token ids for the cache replay (never equal to a prompt token)."""
    return [-(index * 100000 + j + 1) for j in range(n)]


# ---- the scenario list ------------------------------------------------------------------------------------------
def _closed(name: str, description: str, flags: ServerFlags, *, seed: int = 7, n: int = 200, conc: int = 32,
            system_len: int = 256, input_range=(300, 1500), output_range=(20, 200),
            ignore_eos: bool = True) -> Scenario:
    reqs = shared_prefix_workload(seed, n, system_len, input_range, output_range, ignore_eos)
    return Scenario(name, description, "scheduler", flags, reqs, concurrency=conc)


def scheduler_scenarios() -> list[Scenario]:
    base = ServerFlags()
    return [
        _closed("closed-fcfs", "closed loop, 32 in flight, shared 256-token system prompt, fcfs", base),
        _closed("closed-lpm", "closed loop, 32 in flight, shared 256-token system prompt, lpm",
                ServerFlags(schedule_policy="lpm")),
        _closed("eos-reservation", "ignore_eos off (new_token_ratio reservation) in a 12,000-token pool",
                ServerFlags(max_total_tokens=12000), ignore_eos=False),
        _closed("retraction", "long outputs (400-1,200) in a 20,000-token pool: decode retraction",
                ServerFlags(max_total_tokens=20000), seed=11, n=120, input_range=(300, 800),
                output_range=(400, 1200), ignore_eos=False),
        _closed("no-radix-ignore-eos", "--disable-radix-cache with ignore_eos requests (add_one_req_ignore_eos), "
                "8,000-token pool", ServerFlags(disable_radix_cache=True, max_total_tokens=8000), seed=37, n=96,
                conc=24, input_range=(200, 900), output_range=(50, 400)),
        _closed("chunked-prefill", "prompts of 3,000-9,000 tokens cut into 2,048-token chunks",
                ServerFlags(max_total_tokens=60000), seed=13, n=48, conc=8, input_range=(3000, 9000),
                output_range=(10, 80)),
        _closed("page16", "page size 16, closed loop with shared prefix, ignore_eos off",
                ServerFlags(page_size=16, max_total_tokens=16000), seed=17, n=120, ignore_eos=False),
        _closed("mixed-chunk", "--enable-mixed-chunk: decode rows ride with prefill chunks",
                ServerFlags(enable_mixed_chunk=True, max_total_tokens=30000), seed=19, n=96, conc=16,
                input_range=(500, 4000), output_range=(20, 150)),
        Scenario("priority-preemption", "priority scheduling with preemption: open loop, priorities 0/5/20",
                 "scheduler",
                 ServerFlags(enable_priority_scheduling=True, max_total_tokens=16000, max_running_requests=16,
                             priority_scheduling_preemption_threshold=10),
                 shared_prefix_workload(23, 96, 128, (300, 1200), (50, 300), ignore_eos=True,
                                        priorities=(0, 5, 20), arrival_gap_s=0.05)),
        Scenario("long-prompt-abort", "prompts at or above the maximum input length (context 4,096) are aborted",
                 "scheduler", ServerFlags(context_length=4096, max_total_tokens=20000),
                 shared_prefix_workload(31, 48, 256, (300, 1500), (20, 200), long_every=6, long_len=4500),
                 concurrency=8),
        _closed("overlap", "overlap scheduling (event_loop_overlap, the production default), closed loop, lpm",
                ServerFlags(schedule_policy="lpm", disable_overlap_schedule=False, max_total_tokens=14000),
                seed=29, n=160, ignore_eos=False),
    ]


MOONCAKE_POOLS = (1_000_000, 4_000_000, 8_000_000)


def cache_scenarios() -> list[Scenario]:
    """Mooncake replays; the pools put the 1,500 requests' ~16.2M distinct tokens under pressure at every size."""
    out = []
    for tree in ("radix", "unified"):
        for cap in MOONCAKE_POOLS:
            out.append(Scenario(f"mooncake-{tree}-{cap // 1_000_000}M",
                                f"Mooncake conversation trace, first 1,500 requests, {tree} tree, "
                                f"{cap:,}-token pool, page 1", "cache",
                                cache=CacheReplay(tree, cap, 1)))
    out.append(Scenario("mooncake-radix-4M-page16", "Mooncake conversation trace, first 1,500 requests, "
                        "radix tree, 4,000,000-token pool, page 16", "cache", cache=CacheReplay("radix", 4_000_000, 16)))
    return out


def all_scenarios() -> list[Scenario]:
    return scheduler_scenarios() + cache_scenarios()
