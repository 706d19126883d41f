"""The offline simulation loop alone, this checkout against another revision: CPU seconds and identical results.

What it runs, in a fresh interpreter per measurement: the whole Mooncake conversation trace (12,031 requests,
``../shared/data/mooncake/conversation_trace.jsonl``) on Llama-3.1-8B-Instruct / one H100 SXM with SGLang's
defaults, as ``bench_dynamo``'s shadowsim child (414,145-token pool, chunked prefill 8192, 2048 running, overlap
on), plus the same trace with arrivals 4× sparser (``time_scale=4``: more decode steps per event). Only
``simcore.engine.simulate`` is timed (``time.process_time``; imports, tables and the trace are left out), ``REPS``
times in the same process; the figure is the fastest over all rounds and reps (on a shared machine other load
only ever adds CPU time, through caches and shared cores, so the minimum is the least disturbed figure; the
slowest is printed too). Each child also prints a SHA-256 digest of everything the simulation returns (every
request record, every ITL sample and weight, steps, simulated time, KV peak, retractions), so a speed change
that changes results shows up as a digest mismatch.

``--against REV`` extracts ``REV`` (``git archive``) into a temporary directory and alternates its child with this
checkout's, the order flipping every round; it prints both, the speed-up and whether the digests agree. Without
it, this checkout alone.

Run: ``python benchmarks/bench_loop.py [ROUNDS] [--against REV] [--reps N]`` (default 3 rounds, 2 reps);
``python -m benchmarks loop`` runs it without a comparison.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACE = (REPO / ".." / "shared" / "data" / "mooncake" / "conversation_trace.jsonl").resolve()
TABLE_CACHE = Path.home() / ".cache" / "shadowsim" / "tables"  # what the CLI uses (simcore.perf.tables cache)
ACCEPTS_ARGS = True

# The child, run with cwd = the checkout measured (its code first on sys.path); argv = trace, time scale, reps,
# table cache directory. Only APIs every revision since the table cache has.
_CHILD = r"""
import dataclasses, hashlib, json, struct, sys, time
sys.path.insert(0, ".")
from pathlib import Path
from simcore.engine import simulate
from simcore.gpus import load_gpu
from simcore.memory import max_running_requests, size_kv_pool
from simcore.models import load_model
from simcore.perf import build_latency_model
from simcore.perf.tables import use_cache_dir
from simcore.settings import ServerSettings, resolve
from simcore.workload import TraceReplay
from streams.traces import read_trace

use_cache_dir(Path(sys.argv[4]))
model, gpu = load_model("meta-llama/Llama-3.1-8B-Instruct"), load_gpu("h100_sxm")
settings = resolve(ServerSettings(), gpu.memory_bytes)
sizing = size_kv_pool(model, gpu, settings)
cap = sizing.max_total_num_tokens
lat = build_latency_model(model, gpu, 1, "bf16")
reqs = read_trace(sys.argv[1]).requests
times = []
for _ in range(int(sys.argv[3])):
    t0 = time.process_time()
    res = simulate(settings, lat, TraceReplay(reqs, time_scale=float(sys.argv[2])), kv_capacity_tokens=cap,
                   key_unit=512, max_running_requests=max_running_requests(cap, sizing.context_len, None),
                   context_len=sizing.context_len)
    times.append(time.process_time() - t0)
h = hashlib.sha256()
for r in res.records:
    h.update(repr(dataclasses.astuple(r)).encode())
h.update(struct.pack(f"{len(res.itl_values_s)}d", *res.itl_values_s))
h.update(repr(list(res.itl_weights)).encode())
h.update(repr((res.steps, res.sim_time_s, res.kv_peak_usage, res.num_retractions)).encode())
peak = None  # this child's own peak resident memory (VmHWM: since its exec, not the parent's; benchmarks/childproc.py)
try:
    peak = next(int(ln.split()[1]) / 1024 for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
except (OSError, StopIteration):
    pass
print(json.dumps({"cpu_s": min(times), "cpu_all_s": times, "sim_s": res.sim_time_s, "steps": res.steps,
                  "requests": len(res.records), "digest": h.hexdigest()[:16], "peak_rss_mib": peak}))
"""

CASES = (("whole_trace", 1.0), ("sparse_4x", 4.0))


def main(argv: list[str] | None = None) -> dict:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from benchmarks.against import alternate, compare, options, run_script, sides

    rounds, against, reps = options(list(argv if argv is not None else sys.argv[1:]), rounds=3, reps=2)
    if not TRACE.is_file():
        print(f"  no trace at {TRACE}; skipped")
        return {}
    summary: dict = {"bench": "loop", "rounds": rounds, "reps": reps}
    with tempfile.TemporaryDirectory() as tmp:
        checkouts = sides(REPO, against, tmp)
        if against:
            summary["against"] = checkouts[1][0]
        print(f"simulation loop only (simcore.engine.simulate, min of {reps} per process), Mooncake conversation "
              f"trace, {rounds} alternating rounds" + (f", this checkout vs {checkouts[1][0]}" if against else ""))
        for case, scale in CASES:
            got = alternate(checkouts, rounds,  # noqa: B023 - each lambda runs inside this iteration
                            lambda path: run_script(path, _CHILD, str(TRACE), str(scale), str(reps), str(TABLE_CACHE)))
            line = f"  {case:<12}"
            for name, _ in checkouts:
                cpu = [g["cpu_s"] for g in got[name]]
                med = min(cpu)  # the least disturbed of rounds × reps (other load only ever adds CPU time)
                sim_s = got[name][0]["sim_s"]
                digests = {g["digest"] for g in got[name]}
                summary[f"{case}.{name}.cpu_s"] = med
                summary[f"{case}.{name}.cpu_s_range"] = [min(cpu), max(cpu)]
                summary[f"{case}.{name}.sim_s_per_cpu_s"] = sim_s / med
                summary[f"{case}.{name}.digest"] = ",".join(sorted(digests))
                peaks = [g["peak_rss_mib"] for g in got[name] if g.get("peak_rss_mib") is not None]
                summary[f"{case}.{name}.peak_rss_mib"] = max(peaks) if peaks else None
                line += (f" | {name}: {med:.3f} s cpu (up to {max(cpu):.3f}), {sim_s / med:,.0f} sim s/cpu s, "
                         f"{got[name][0]['steps']:,} steps, digest {','.join(sorted(digests))}"
                         + (f", peak RSS {max(peaks):.0f} MiB" if peaks else ""))
            print(line + compare(summary, case, checkouts), flush=True)
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
