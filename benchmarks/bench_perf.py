"""Cost of one step-latency estimate (goal: ≤ 20 µs amortized in a simulation run).

Workloads (Qwen3-32B, H100 SXM, TP2, measured-table backend, shipped profile):
  * build          — tables loaded and the model's per-op curves built (once per process / per model);
  * cold_decode    — decode shapes never seen before (new batch size and Σkv each call): no memo hit;
  * warm_decode    — decode shapes with a new Σkv each call but batch sizes already seen: the steady state of a
                     simulation, where only the attention lookup is recomputed;
  * prefill        — ragged prefill batches (4–8 requests, random extend and prefix lengths), all distinct;
  * in_simulation  — a real closed-loop run (64 clients, 1024/256 tokens, 640 requests): time spent inside
                     ``step_time`` divided by the number of calls, i.e. the amortized cost the simulator pays;
  * in_simulation_poisson — the same for an open-loop Poisson run with random lengths (prompts 128–4096,
                     outputs 16–1024, 2000 requests at 8 req/s): shapes rarely repeat;
  * roofline_cold  — the roofline backend (a GPU without tables: H20) on distinct decode shapes.

Prints one line per workload and a final JSON line.
"""
from __future__ import annotations

import json
import random
import time
from typing import Any

from simcore.gpus import load_gpu
from simcore.models import load_model
from simcore.perf import BatchShape, StepTime, build_latency_model
from simcore.perf.tables import load_tables


class _Timed:
    """Wraps a LatencyModel and accumulates the wall time spent in step_time."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.profile_hash = inner.profile_hash
        self.calls = 0
        self.spent = 0.0

    def step_time(self, shape: BatchShape) -> StepTime:
        t0 = time.perf_counter()
        out = self.inner.step_time(shape)
        self.spent += time.perf_counter() - t0
        self.calls += 1
        return out


def _per_call_us(fn, shapes: list[BatchShape]) -> float:
    t0 = time.perf_counter()
    for s in shapes:
        fn(s)
    return (time.perf_counter() - t0) / len(shapes) * 1e6


def main() -> dict[str, float]:
    rng = random.Random(0)
    model, gpu = load_model("Qwen/Qwen3-32B"), load_gpu("h100_sxm")
    t0 = time.perf_counter()
    load_tables(gpu.name)
    lm = build_latency_model(model, gpu, 2, "bf16")
    build_s = time.perf_counter() - t0
    res: dict[str, float] = {"build_s": build_s}
    print(f"build           {build_s * 1e3:8.1f} ms   (tables + per-op curves, once per process)")

    graph_bs = [1, 2, 4, 8, 12] + list(range(16, 257, 8))
    cold = [BatchShape(num_decode=b, decode_sum_kv=b * rng.randint(100, 8000), cuda_graph_bs=b)
            for b in graph_bs for _ in range(3)]
    res["cold_decode_us"] = _per_call_us(lm.step_time, cold)
    warm = [BatchShape(num_decode=b, decode_sum_kv=b * rng.randint(100, 8000) + i, cuda_graph_bs=b)
            for i in range(20000) for b in (rng.choice(graph_bs),)]
    res["warm_decode_us"] = _per_call_us(lm.step_time, warm)
    pre = []
    for _ in range(2000):
        n = rng.randint(4, 8)
        pre.append(BatchShape(extend_lens=tuple(rng.randint(64, 2048) for _ in range(n)),
                              prefix_lens=tuple(rng.choice((0, 0, 512, 4096)) for _ in range(n))))
    res["prefill_us"] = _per_call_us(lm.step_time, pre)
    for k in ("cold_decode_us", "warm_decode_us", "prefill_us"):
        print(f"{k.removesuffix('_us'):<15} {res[k]:8.2f} µs per estimate")

    from simcore.engine import simulate
    from simcore.memory import size_kv_pool
    from simcore.settings import ServerSettings, resolve
    from simcore.workload import ClosedLoop

    settings = resolve(ServerSettings(sglang_version="0.5.9", tp_size=2), gpu.memory_bytes)
    pool = size_kv_pool(model, gpu, settings, "bf16")
    timed = _Timed(build_latency_model(model, gpu, 2, "bf16"))
    t0 = time.perf_counter()
    out = simulate(settings, timed, ClosedLoop(64, 640, 1024, 256, 0), kv_capacity_tokens=pool.max_total_num_tokens,
                   max_running_requests=pool.max_running_requests)
    wall = time.perf_counter() - t0
    res["in_simulation_us"] = timed.spent / max(1, timed.calls) * 1e6
    res["simulation_steps"] = float(timed.calls)
    res["simulation_wall_s"] = wall
    print(f"in_simulation   {res['in_simulation_us']:8.2f} µs per estimate amortized "
          f"({timed.calls} steps, {len(out.records)} requests, {wall:.2f} s wall, "
          f"{timed.spent / wall * 100:.0f}% of it in step_time)")

    from simcore.workload import OpenLoop, Uniform

    timed = _Timed(build_latency_model(model, gpu, 2, "bf16"))
    t0 = time.perf_counter()
    out = simulate(settings, timed, OpenLoop(8.0, 2000, Uniform(128, 4096), Uniform(16, 1024), 1),
                   kv_capacity_tokens=pool.max_total_num_tokens, max_running_requests=pool.max_running_requests)
    wall = time.perf_counter() - t0
    res["in_simulation_poisson_us"] = timed.spent / max(1, timed.calls) * 1e6
    print(f"in_sim_poisson  {res['in_simulation_poisson_us']:8.2f} µs per estimate amortized "
          f"({timed.calls} steps, {len(out.records)} requests, {wall:.2f} s wall)")

    roof = build_latency_model(model, load_gpu("h20"), 2, "bf16")
    res["roofline_cold_us"] = _per_call_us(roof.step_time, cold)
    print(f"roofline_cold   {res['roofline_cold_us']:8.2f} µs per estimate")
    print(json.dumps({"bench": "perf", **{k: round(v, 3) for k, v in res.items()}}))
    return res


if __name__ == "__main__":
    main()
