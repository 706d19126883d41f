"""shadowsim's side of the oracle: the same scenario through ``simcore`` (project environment), same trace format.

Scheduler scenarios run :class:`simcore.server.Server` with :class:`simcore.perf.base.LinearLatencyModel` set to
the shared step-time function (no CPU time). The admitted request ids of a prefill step and the requests a step
requeues (retraction, priority preemption) are not part of :class:`simcore.results.StepRecord`; the oracle reads
them by wrapping two of the server's methods (``_launch_prefill``, ``_release``) — a white-box hook that fails
loudly if they are renamed.

Cache scenarios run :class:`simcore.radix_cache.RadixCache` with the replay protocol of
:func:`oracle.sglang_side.run_cache`.
"""

from __future__ import annotations

import time as _time
from pathlib import Path

from oracle.scenarios import (STEP_BASE_S, STEP_PER_DECODE_REQ_S, STEP_PER_EXTEND_TOKEN_S, Scenario,
                              mooncake_requests, output_ids)


def run_scheduler(sc: Scenario) -> dict:
    import simpy

    from simcore.perf.base import LinearLatencyModel
    from simcore.request import RequestSpec
    from simcore.server import Server
    from simcore.settings import ServerSettings, resolve

    f = sc.flags
    settings = resolve(ServerSettings(
        sglang_version="0.5.23", schedule_policy=f.schedule_policy, chunked_prefill_size=f.chunked_prefill_size,
        max_prefill_tokens=f.max_prefill_tokens, disable_overlap_schedule=f.disable_overlap_schedule,
        disable_cuda_graph=True, max_running_requests=f.max_running_requests, context_length=f.context_length,
        page_size=f.page_size, enable_mixed_chunk=f.enable_mixed_chunk,
        enable_priority_scheduling=f.enable_priority_scheduling,
        priority_scheduling_preemption_threshold=f.priority_scheduling_preemption_threshold,
        disable_radix_cache=f.disable_radix_cache), None)
    latency = LinearLatencyModel(base_s=STEP_BASE_S, per_extend_token_s=STEP_PER_EXTEND_TOKEN_S,
                                 per_prefix_token_s=0.0, per_decode_req_s=STEP_PER_DECODE_REQ_S,
                                 per_kv_token_s=0.0, cpu_s=0.0)
    env = simpy.Environment()
    steps: list[dict] = []
    prefill_rids: list[list[str]] = []
    requeued: list[str] = []
    specs = sc.requests
    nxt = [sc.concurrency or len(specs)]
    srv: Server | None = None

    def observe(st) -> None:
        sh = st.shape
        if sh.extend_lens:
            rec = {"mode": "prefill", "rids": prefill_rids.pop(0), "extend": list(sh.extend_lens),
                   "prefix": list(sh.prefix_lens), "n_dec": sh.num_decode}
        else:
            rec = {"mode": "decode", "n_dec": sh.num_decode}
        rec["t"] = round(st.start_s, 6)
        rec["retracted"] = sorted(requeued)
        requeued.clear()
        steps.append(rec)

    def spec(i: int, at: float) -> RequestSpec:
        r = specs[i]
        return RequestSpec(r.rid, at, len(r.input_ids), r.max_new_tokens, max_new_tokens=r.max_new_tokens,
                           key=tuple(r.input_ids), ignore_eos=r.ignore_eos, priority=r.priority)

    def on_finish(_rec) -> None:
        if sc.concurrency and nxt[0] < len(specs):
            srv.submit(spec(nxt[0], env.now))
            nxt[0] += 1

    srv = Server(env, settings, f.max_total_tokens, latency, observer=observe, on_finish=on_finish,
                 max_running_requests=f.max_running_requests, context_len=f.context_length)
    for name in ("_launch_prefill", "_release"):
        if not callable(getattr(srv, name, None)):
            raise RuntimeError(f"oracle hook: simcore.server.Server.{name} is gone; update oracle/shadow_side.py")
    launch, release = srv._launch_prefill, srv._release

    def launch_prefill(t, adder, *args, **kw):
        prefill_rids.append([r.rid for r in adder.can_run])
        return launch(t, adder, *args, **kw)

    def release_req(r, t, *args, **kw):
        requeued.append(r.rid)
        return release(r, t, *args, **kw)

    srv._launch_prefill, srv._release = launch_prefill, release_req
    if sc.concurrency:
        for i in range(min(sc.concurrency, len(specs))):
            srv.submit(spec(i, 0.0))
    else:
        for i, r in enumerate(specs):
            srv.submit(spec(i, r.arrival_s))
    env.run()
    reqs = {}
    for r in srv.records:
        reqs[r.rid] = {"arrival": round(r.arrival_s, 6), "first": round(r.first_token_s, 6),
                       "finish": round(r.finish_s, 6), "cached": r.cached_tokens, "output_len": r.output_len}
    info = {"max_total_num_tokens": srv.kv.capacity, "max_running_requests": srv.max_running,
            "overlap": srv.overlap}
    return {"info": info, "steps": steps, "reqs": reqs}


def run_cache(sc: Scenario, trace: Path) -> dict:
    from simcore.radix_cache import RadixCache

    cfg = sc.cache
    started = _time.time()
    tree = RadixCache(page_size=cfg.page_size)
    hits: list[int] = []
    for r in mooncake_requests(trace, cfg.num_requests):
        t, prompt = r["t"], r["prompt"]
        m = tree.match_prefix(tuple(prompt), len(prompt) - 1, t)
        tree.inc_lock_ref(m.node)
        full = tuple(prompt + output_ids(r["index"], r["output_len"] - 1))
        over = tree.total_size + len(full) - m.prefix_len - cfg.capacity_tokens
        if over > 0:
            tree.evict(over)
        tree.insert(full, len(full), t)
        tree.dec_lock_ref(m.node)
        hits.append(m.prefix_len)
    return {"info": {"tree": "simcore.RadixCache", "secs": round(_time.time() - started, 1)}, "hits": hits,
            "tree_size": tree.total_size}


def run(sc: Scenario, trace: Path | None = None) -> dict:
    if sc.kind == "scheduler":
        return run_scheduler(sc)
    if trace is None:
        raise ValueError("cache scenarios need the Mooncake trace path")
    return run_cache(sc, trace)
