"""Where the instructions of a 100-request start-up go: ``bench_dynamo``'s shadowsim child cut after each step.

Each stage is a fresh interpreter that runs the child's steps up to that one and exits; the instructions each one
executes are counted by valgrind's callgrind (``Ir``: user-space instructions, the same whatever else the machine
runs, unlike CPU seconds on a shared machine), and the difference between two stages is what that step costs.
Stages: the interpreter and site; the benchmark's own imports (json, os); SimPy as simcore imports it
(``simcore._simpy``, with the ``simcore`` package); ``import
simcore.engine`` with what it imports; the child's other imports; model and GPU specs; settings and KV pool
sizing; the latency model (tables from the binary cache, the model's GEMM curves); reading the trace; the
simulation; the results. Each stage ends as the child does (``gc.freeze()`` before the interpreter's teardown,
as ``shadowsim.cli.main`` does), so the stages add up to the child. The table cache must be warm (run the child once first: the command does).

The interpreter is the one ``bench_dynamo`` runs its shadowsim child with (``bench_dynamo.plain_python``: a plain
virtual environment like Dynamo's, SimPy copied in; made on first use); ``--here`` counts with this interpreter
instead (e.g. the development venv, whose editable install's import hook runs at site).

Run: ``python benchmarks/startup_stages.py [--here] [TRACE]`` (default: the first 100 requests of the Mooncake
trace), from the checkout to measure; needs valgrind. Not part of ``make bench`` (about a minute under valgrind).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACE = (REPO / ".." / "shared" / "data" / "mooncake" / "conversation_trace.jsonl").resolve()

STAGES = ("interpreter and site", "benchmark imports (json)", "simcore and SimPy (simcore._simpy)",
          "import simcore.engine (and what it imports)", "the child's other imports", "model and GPU specs",
          "settings and KV pool sizing", "latency model (cached tables, GEMM curves)", "reading the trace",
          "simulation", "results")

# argv: stage (stop after that many steps), trace
_STAGED = r"""
import sys
STAGE = int(sys.argv[1])
sys.path.insert(0, ".")
def stop(k):
    if STAGE <= k:  # ends as the child (and the CLI) does: the collector frozen before the teardown
        import gc
        gc.freeze()
        sys.exit(0)
stop(0)
import json
import os
stop(1)
from simcore._simpy import simpy
stop(2)
from simcore.engine import simulate
stop(3)
from simcore.gpus import load_gpu
from simcore.memory import max_running_requests, size_kv_pool
from simcore.models import load_model
from simcore.perf import build_latency_model
from simcore.perf.tables import use_cache_dir
from simcore.settings import ServerSettings, resolve
from simcore.workload import TraceReplay
from streams.traces import read_trace
stop(4)
use_cache_dir(os.path.join(os.path.expanduser("~"), ".cache", "shadowsim", "tables"))
model, gpu = load_model("meta-llama/Llama-3.1-8B-Instruct"), load_gpu("h100_sxm")
stop(5)
settings = resolve(ServerSettings(), gpu.memory_bytes)
sizing = size_kv_pool(model, gpu, settings)
cap = sizing.max_total_num_tokens
stop(6)
lat = build_latency_model(model, gpu, 1, "bf16")
stop(7)
reqs = read_trace(sys.argv[2]).requests
stop(8)
res = simulate(settings, lat, TraceReplay(reqs, time_scale=1.0), kv_capacity_tokens=cap, key_unit=512,
               max_running_requests=max_running_requests(cap, sizing.context_len, None),
               context_len=sizing.context_len)
stop(9)
ttft = [r.ttft_s for r in res.records]
print(json.dumps({"requests": len(res.records), "sim_s": res.sim_time_s, "mean_ttft_ms": 1e3 * sum(ttft) / len(ttft)}))
import gc
gc.freeze()
"""


def instructions(cmd: list[str]) -> int:
    """User-space instructions callgrind counted for ``cmd`` (run in the checkout, without a venv's variables)."""
    from benchmarks.childproc import clean_env

    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd], cwd=REPO,
                         env=clean_env(), capture_output=True, text=True, check=True).stderr
    return int(next(ln for ln in out.splitlines() if "Collected" in ln).split()[-1])


def main(trace: str | None = None, here: bool = False) -> dict[str, int]:
    sys.path.insert(0, str(REPO))
    from benchmarks.bench_dynamo import plain_python, warm_table_cache
    from benchmarks.childproc import clean_env, compile_sources

    if shutil.which("valgrind") is None:
        sys.exit("startup_stages: needs valgrind (apt-get install valgrind)")
    compile_sources(REPO)
    warm_table_cache()  # here: building them needs numpy, which the plain environment has not
    with tempfile.TemporaryDirectory() as tmp:
        if trace is None:
            trace = str(Path(tmp) / "first100.jsonl")
            with open(TRACE) as f:
                Path(trace).write_text("".join(next(f) for _ in range(100)))
        python = sys.executable if here else str(plain_python())
        code = [python, "-c", _STAGED]
        subprocess.run(code + ["99", trace], cwd=REPO, env=clean_env(), check=True, capture_output=True)  # warm
        counts, prev = {}, 0
        print(f"instructions (callgrind Ir, millions) of bench_dynamo's shadowsim child, cut after each step; {trace}; "
              f"{python}")
        for k, name in enumerate(STAGES):
            n = instructions(code + [str(k), trace])
            counts[name] = n - prev
            print(f"  {name:<46} {(n - prev) / 1e6:7.1f} M   (total {n / 1e6:6.1f} M)", flush=True)
            prev = n
        child = instructions([python, "-c", "import sys; from benchmarks.dynamo_child import child_main; "
                                                    "child_main(sys.argv[1:])", trace, "1.0"])
        print(f"  the benchmark's child itself: {child / 1e6:.1f} M")
    print(json.dumps({"bench": "startup_stages", **counts, "child": child}))
    return counts


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--here"]
    main(args[0] if args else None, here="--here" in sys.argv[1:])
