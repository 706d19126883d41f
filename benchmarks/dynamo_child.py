"""The measured shadowsim child of ``bench_dynamo`` (``python -c "from benchmarks.dynamo_child import child_main;
…"``): imports, trace, model and the simulation of one trace, printed as one JSON line.

What this module imports is part of the figure, so it is apart from the benchmark's parent (``bench_dynamo``:
pathlib, statistics, subprocess, tempfile) and imports only ``json``, ``os``, ``sys`` and ``time`` itself: paths
are ``os.path`` strings (pathlib's import, with urllib.parse and ipaddress, is ≈ 17 M instructions).
"""
from __future__ import annotations

import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "shadowsim", "tables")  # the CLI's table cache


def child_main(argv: list[str]) -> None:
    """The measured shadowsim child (``TRACE TIME_SCALE``): one JSON line."""
    print(json.dumps(shadowsim_child(argv[0], float(argv[1]))))
    # the process ends as the ``shadowsim`` command's does (``shadowsim.cli.settle_for_exit``, not imported here:
    # the CLI module imports argparse and pathlib)
    import gc

    gc.freeze()


def shadowsim_child(trace: str, time_scale: float) -> dict[str, float]:
    """The shadowsim measurement, in this (fresh) interpreter: imports, trace, model, simulation."""
    t0 = time.process_time()
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from benchmarks.childproc import own_peak_rss_mib
    from simcore.engine import simulate
    from simcore.gpus import load_gpu
    from simcore.memory import max_running_requests, size_kv_pool
    from simcore.models import load_model
    from simcore.perf import build_latency_model
    from simcore.settings import ServerSettings, resolve
    from simcore.workload import TraceReplay
    from simcore.perf.tables import use_cache_dir
    from streams.traces import read_trace

    use_cache_dir(TABLE_CACHE)
    model, gpu = load_model("meta-llama/Llama-3.1-8B-Instruct"), load_gpu("h100_sxm")
    settings = resolve(ServerSettings(), gpu.memory_bytes)
    sizing = size_kv_pool(model, gpu, settings)
    cap = sizing.max_total_num_tokens
    lat = build_latency_model(model, gpu, 1, "bf16")
    reqs = read_trace(trace).requests
    t1 = time.process_time()
    res = simulate(settings, lat, TraceReplay(reqs, time_scale=time_scale), kv_capacity_tokens=cap, key_unit=512,
                   max_running_requests=max_running_requests(cap, sizing.context_len, None),
                   context_len=sizing.context_len)
    t2 = time.process_time()
    ttft = [r.ttft_s for r in res.records]
    return {"requests": len(res.records), "sim_s": res.sim_time_s, "mean_ttft_ms": 1e3 * sum(ttft) / len(ttft),
            "startup_cpu_s": t1 - t0, "run_cpu_s": t2 - t1, "steps": res.steps, "kv_tokens": cap,
            "peak_rss_mib": own_peak_rss_mib()}
