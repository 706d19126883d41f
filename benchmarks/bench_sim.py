"""Simulator speed on the whole Mooncake conversation trace (12,031 requests, ~1 hour, 12k-token prompts with
512-token block keys) for Llama-3.1-8B on one H100 SXM, with SGLang's default settings (KV pool sized from GPU
memory: ~414k tokens, max_running_requests 2048, chunked prefill 8192, overlap on, FCFS).

Prints wall time, simulated seconds, simulated seconds per wall second (and per CPU second of the process, which
depends less on the load of a shared machine), scheduler steps per wall second and the peak resident memory of
a fresh process running only this simulation (its own ``VmHWM``, not ``ru_maxrss``, which Linux carries over from
the parent across fork and exec: ``benchmarks/childproc.py``), then one JSON line.
Also times the same trace with an unlimited pool (``--max-total-tokens 1e9``, the cache-hit acceptance run).

Run: ``python -m benchmarks`` (all benchmarks) or ``python benchmarks/bench_sim.py``.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / ".." / "shared" / "data" / "mooncake" / "conversation_trace.jsonl"


def _child(capacity: int | None) -> dict[str, float]:
    """Run one simulation in this process and measure it."""
    from simcore.engine import simulate
    from simcore.gpus import load_gpu
    from simcore.memory import max_running_requests, size_kv_pool
    from simcore.models import load_model
    from simcore.perf import build_latency_model
    from simcore.settings import ServerSettings, resolve
    from simcore.workload import TraceReplay
    from streams.traces import read_trace

    model, gpu = load_model("meta-llama/Llama-3.1-8B-Instruct"), load_gpu("h100_sxm")
    settings = resolve(ServerSettings(), gpu.memory_bytes)
    lat = build_latency_model(model, gpu, 1, "bf16")
    sizing = size_kv_pool(model, gpu, settings)
    cap = capacity or sizing.max_total_num_tokens
    max_running = max_running_requests(cap, sizing.context_len, None)
    from benchmarks.childproc import own_peak_rss_mib

    reqs = read_trace(TRACE).requests
    rss0 = own_peak_rss_mib()
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate(settings, lat, TraceReplay(reqs), kv_capacity_tokens=cap, key_unit=512,
                   max_running_requests=max_running, context_len=sizing.context_len)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s = res.summary()
    return {
        "requests": len(res.records), "kv_tokens": cap, "wall_s": wall, "sim_s": res.sim_time_s,
        "sim_s_per_wall_s": res.sim_time_s / wall, "cpu_s": cpu, "sim_s_per_cpu_s": res.sim_time_s / cpu,
        "steps": res.steps, "steps_per_wall_s": res.steps / wall,
        "peak_rss_mib": own_peak_rss_mib(), "peak_rss_before_run_mib": rss0, "cache_hit_rate": s["cache_hit_rate"],
        "num_retractions": s["num_retractions"], "kv_peak_usage": s["kv_peak_usage"],
    }


def _measure(capacity: int | None) -> dict[str, float]:
    """Measure in a fresh interpreter, so peak memory is this simulation's alone."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child"] + ([str(capacity)] if capacity else [])
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> dict[str, float]:
    print("simulator speed: Mooncake conversation trace, Llama-3.1-8B-Instruct, 1x H100 SXM, SGLang defaults")
    results: dict[str, float] = {}
    for label, cap in (("default_pool", None), ("unlimited_pool", 1_000_000_000)):
        r = _measure(cap)
        print(f"  {label:<15} {r['requests']:>6} requests  KV {r['kv_tokens']:>13,} tok  "
              f"wall {r['wall_s']:6.2f} s  simulated {r['sim_s']:8,.0f} s  "
              f"{r['sim_s_per_wall_s']:7,.0f} sim s/wall s ({r['sim_s_per_cpu_s']:,.0f}/cpu s)  "
              f"{r['steps']:>7,} steps ({r['steps_per_wall_s']:,.0f}/s)  "
              f"peak RSS {r['peak_rss_mib']:.0f} MiB  hit {100 * r['cache_hit_rate']:.1f} %")
        for k, v in r.items():
            results[f"{label}.{k}"] = v
    print(json.dumps({"bench": "sim", **results}))
    return results


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.path.insert(0, str(REPO))
        print(json.dumps(_child(int(sys.argv[2]) if len(sys.argv) > 2 else None)))
    else:
        main()
