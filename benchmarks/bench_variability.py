"""Cost of the variability model (simcore.variability, docs/accuracy.md §3.7) inside a simulation.

One closed loop (Qwen3-32B, H100 SXM, TP2, 64 aiperf clients, 2×C warm-up + 20×C requests of 1024 / 256 tokens)
simulated three ways: deterministic (the default), with the measured step jitter only, and with jitter plus
client delays. Prints wall time and CPU µs per scheduler step for each, then one JSON line. The deterministic
run is the path `validate` and `predict` take by default: the wrapper is not even built there.

Run: ``python -m benchmarks variability`` or ``python benchmarks/bench_variability.py``.
"""
from __future__ import annotations

import json
import time


def _run(variability) -> dict[str, float]:  # type: ignore[no-untyped-def]
    from simcore.benchmark_clients import AiperfClosedLoop
    from simcore.engine import simulate
    from simcore.gpus import load_gpu
    from simcore.memory import size_kv_pool
    from simcore.models import load_model
    from simcore.perf import build_latency_model
    from simcore.settings import ServerSettings, resolve
    from simcore.variability import ClientDelays, DelayedWorkload, with_variability

    model, gpu = load_model("Qwen/Qwen3-32B"), load_gpu("h100_sxm")
    settings = resolve(ServerSettings(tp_size=2), gpu.memory_bytes)
    pool = size_kv_pool(model, gpu, settings, "bf16")
    lat = with_variability(build_latency_model(model, gpu, 2, "bf16"), variability, 0)
    wl = AiperfClosedLoop(64, 128, 1280, 1032, 256, seed=0)
    delays = ClientDelays.from_variability(variability, 0)
    workload = DelayedWorkload(wl, delays) if delays is not None else wl
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate(settings, lat, workload, kv_capacity_tokens=pool.max_total_num_tokens,
                   max_running_requests=pool.max_running_requests, context_len=pool.context_len)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"wall_s": wall, "cpu_s": cpu, "steps": res.steps, "cpu_us_per_step": cpu / res.steps * 1e6}


def main() -> None:
    from simcore.variability import Variability

    _run(None)  # build the tables and curves once, outside the timings
    m = Variability.measured()
    out = {
        "off": _run(None),
        "step_jitter": _run(Variability(step_time_cv=m.step_time_cv, run_time_cv=m.run_time_cv)),
        "jitter_and_client_delays": _run(m),
    }
    for name, r in out.items():
        print(f"{name:<26} {r['wall_s']:6.2f} s wall  {r['cpu_us_per_step']:6.1f} µs CPU/step  ({r['steps']} steps)")
    print(json.dumps({"bench": "variability", **{k: round(v["cpu_us_per_step"], 2) for k, v in out.items()}}))


if __name__ == "__main__":
    main()
