"""shadowsim against NVIDIA Dynamo's mocker on the same trace: CPU seconds of whole processes, alternating.

The trace is the Mooncake conversation trace (``../shared/data/mooncake/conversation_trace.jsonl``: 12,031
requests, about an hour of arrivals, 512-token hash blocks), served by Llama-3.1-8B-Instruct on one H100 SXM.

- **Dynamo** (``ai-dynamo==1.6.1``, Rust): ``dynamo.replay.run_trace_replay(trace, extra_engine_args={"engine":
  {"backend": "sglang", "block_size": 64, "num_gpu_blocks": <our KV pool / 64>, "max_num_seqs": 2048,
  "max_num_batched_tokens": 8192, "enable_prefix_caching": True, "enable_chunked_prefill": True}},
  trace_block_size=512, trace_format="mooncake")``. It is installed into its own virtual environment outside the
  checkout, once (``pip install --no-deps ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1``, then ``msgspec pyzmq
  zstandard prometheus-client aiohttp uvloop``), cached in ``$SHADOWSIM_DYNAMO_ENV`` (default
  ``~/.cache/shadowsim/dynamo-1.6.1``).
- **shadowsim**: a fresh interpreter that imports ``simcore``, reads the trace and runs ``simcore.engine.simulate``
  with SGLang's defaults for that server (414,145-token pool, chunked prefill 8192, 2048 running, overlap on):
  ``benchmarks.dynamo_child``, run by the interpreter of a plain virtual environment made like Dynamo's
  (``plain_python``: ``python -m venv``, SimPy copied in; cached in ``$SHADOWSIM_PLAIN_ENV``, default
  ``~/.cache/shadowsim/plain-py3.X``), so both sides pay the same interpreter and site start-up, not the
  development environment's editable-install hook.

Each measurement is one fresh process; its CPU time (user + system, interpreter start-up and imports included) is
what the kernel accounted to it, and its peak memory its own ``VmHWM``. The two simulators alternate, the order
flipping every round, because the machine is shared. Both start from compiled bytecode: pip compiled Dynamo's
environment when it installed it, and the benchmark compiles the checkout's modules first
(``childproc.compile_sources``; with ``PYTHONDONTWRITEBYTECODE`` set each child would otherwise compile every
shadowsim module from source, ~0.15 CPU s). Cases: the whole trace, the same trace with arrivals 4×
sparser (ours ``time_scale=4``, Dynamo ``arrival_speedup_ratio=0.25``) and the first 100 requests (start-up).
Prints medians and the CPU-time ratio shadowsim / Dynamo per case, then one JSON line.

Run: ``python -m benchmarks dynamo`` (``make bench`` runs it with the others); ``python benchmarks/bench_dynamo.py
[ROUNDS] [CASE ...]`` (cases ``whole_trace``, ``sparse_4x``, ``first_100``; all by default), e.g.
``python benchmarks/bench_dynamo.py 10 first_100`` for the start-up figure alone. Without network or when the
install fails it says so and reports shadowsim alone.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# The measured child is benchmarks.dynamo_child (``--child`` runs it too): what it imports is part of its figure,
# so it is a module of its own, without this one's pathlib and what the parent imports in its functions.

REPO = Path(__file__).resolve().parents[1]
TRACE = (REPO / ".." / "shared" / "data" / "mooncake" / "conversation_trace.jsonl").resolve()
DYNAMO_VERSION = "1.6.1"
DYNAMO_ENV = Path(os.environ.get("SHADOWSIM_DYNAMO_ENV", Path.home() / ".cache" / "shadowsim" /
                                 f"dynamo-{DYNAMO_VERSION}"))
DYNAMO_PACKAGES = ([f"ai-dynamo=={DYNAMO_VERSION}", f"ai-dynamo-runtime=={DYNAMO_VERSION}"],
                   ["msgspec", "pyzmq", "zstandard", "prometheus-client", "aiohttp", "uvloop"])
BLOCK = 64
PLAIN_ENV = Path(os.environ.get("SHADOWSIM_PLAIN_ENV", Path.home() / ".cache" / "shadowsim" /
                                f"plain-py{sys.version_info[0]}.{sys.version_info[1]}"))

# What the Dynamo child runs (in its own interpreter and environment): argv = trace, num_gpu_blocks, speedup.
_DYNAMO_CHILD = r"""
import json, sys, time
t0 = time.process_time()
from dynamo.replay import run_trace_replay
rep = run_trace_replay(sys.argv[1], extra_engine_args={"engine": {
    "backend": "sglang", "block_size": 64, "num_gpu_blocks": int(sys.argv[2]), "max_num_seqs": 2048,
    "max_num_batched_tokens": 8192, "enable_prefix_caching": True, "enable_chunked_prefill": True}},
    trace_block_size=512, trace_format="mooncake", arrival_speedup_ratio=float(sys.argv[3]))
s = rep.summary
peak = 0.0
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        peak = int(line.split()[1]) / 1024
print(json.dumps({"requests": s["completed_requests"], "sim_s": s["duration_ms"] / 1e3,
                  "mean_ttft_ms": s["mean_ttft_ms"], "run_cpu_s": time.process_time() - t0, "peak_rss_mib": peak}))
"""


# What the shadowsim child runs: its module imported from its compiled bytecode, as an installed entry point is
# (a script given by path is parsed and compiled from source in every process: ~9 M instructions, ~2 ms).
_OURS_CHILD = "import sys; from benchmarks.dynamo_child import child_main; child_main(sys.argv[1:])"


def _root_on_path() -> None:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))


def dynamo_python() -> Path | None:
    """The Dynamo environment's interpreter, installing it on first use; None (with a note) if that fails."""
    import subprocess

    py = DYNAMO_ENV / "bin" / "python"
    stamp = DYNAMO_ENV / ".installed"
    if stamp.is_file() and py.is_file():
        return py
    print(f"  installing Dynamo {DYNAMO_VERSION} into {DYNAMO_ENV} (once) ...", flush=True)
    try:
        DYNAMO_ENV.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(DYNAMO_ENV)], check=True, capture_output=True)
        pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run(pip + ["--no-deps"] + DYNAMO_PACKAGES[0], check=True, capture_output=True, text=True)
        subprocess.run(pip + DYNAMO_PACKAGES[1], check=True, capture_output=True, text=True)
        subprocess.run([str(py), "-c", "import dynamo.replay"], check=True, capture_output=True, text=True)
    except (subprocess.CalledProcessError, OSError) as e:
        err = getattr(e, "stderr", "") or str(e)
        print(f"  Dynamo unavailable ({err.strip().splitlines()[-1] if err.strip() else e}); shadowsim alone")
        return None
    stamp.write_text(DYNAMO_VERSION)
    return py


def plain_python() -> Path:
    """The interpreter shadowsim's child runs in: a plain virtual environment like Dynamo's, made once.

    ``python -m venv`` from this interpreter's base (pip and setuptools, hence the same ``distutils-precedence.pth``
    as Dynamo's environment), with SimPy, shadowsim's one dependency on the simulate path, copied in from this
    environment and compiled (what ``pip install`` leaves); the checkout itself is found from the child's working
    directory (``python -c``: ``sys.path[0]`` is the checkout), as an installed package is found in site-packages.
    So both children pay the same interpreter start-up; a development environment's editable install would add
    its import hook's start-up (≈ 50 M instructions, most of it modules shadowsim imports later anyway, or not:
    pathlib, urllib.parse) to ours alone. Falls back to this interpreter (with a note) when it cannot be made."""
    import shutil
    import subprocess

    import simpy

    env = PLAIN_ENV
    py = env / "bin" / "python"
    src = Path(simpy.__file__).resolve().parent
    version = getattr(simpy, "__version__", "?")
    stamp = env / ".installed"
    if stamp.is_file() and py.is_file() and stamp.read_text() == f"simpy {version}":
        return py
    try:
        if env.exists():
            shutil.rmtree(env)
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(env)], check=True, capture_output=True)
        site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   check=True, capture_output=True, text=True).stdout.strip())
        shutil.copytree(src, site / "simpy", ignore=shutil.ignore_patterns("__pycache__"))
        for info in src.parent.glob("simpy-*.dist-info"):
            shutil.copytree(info, site / info.name)
        subprocess.run([str(py), "-m", "compileall", "-q", str(site / "simpy")], check=True, capture_output=True)
    except (subprocess.CalledProcessError, OSError) as e:
        print(f"  (no plain environment for shadowsim's child: {e}; it runs in {sys.executable})")
        return Path(sys.executable)
    stamp.write_text(f"simpy {version}")
    return py


def warm_table_cache() -> None:
    """Build the H100's tables into the table cache the children read, here (numpy is needed to build them, and
    the plain environment has none), so every measured child loads them from the cache as a warm CLI does."""
    _root_on_path()
    from benchmarks.dynamo_child import TABLE_CACHE
    from simcore.perf.tables import load_tables, use_cache_dir

    use_cache_dir(TABLE_CACHE)
    try:
        load_tables("h100_sxm")
    finally:
        use_cache_dir(None)


def kv_pool_tokens() -> int:
    _root_on_path()
    from simcore.gpus import load_gpu
    from simcore.memory import size_kv_pool
    from simcore.models import load_model
    from simcore.settings import ServerSettings, resolve

    gpu = load_gpu("h100_sxm")
    return size_kv_pool(load_model("meta-llama/Llama-3.1-8B-Instruct"), gpu,
                        resolve(ServerSettings(), gpu.memory_bytes)).max_total_num_tokens


CASES = ("whole_trace", "sparse_4x", "first_100")


def main(rounds: int = 3, only: tuple[str, ...] = ()) -> dict[str, float]:
    """Run the cases (``only``: some of CASES), ``rounds`` alternating rounds each (first_100: at least 5)."""
    import statistics
    import tempfile

    _root_on_path()
    from benchmarks.childproc import clean_env, compile_sources, run_child_timed

    print("shadowsim vs Dynamo mocker: Mooncake conversation trace, Llama-3.1-8B-Instruct, 1x H100 SXM "
          f"(CPU s of whole processes, median of {rounds} alternating rounds)")
    py = dynamo_python()
    ours_py = plain_python()
    if not compile_sources(REPO):
        print("  (could not write the checkout's bytecode: each shadowsim child also compiles its modules)")
    pool = kv_pool_tokens()
    warm_table_cache()
    with tempfile.TemporaryDirectory() as tmp:
        head = Path(tmp) / "first100.jsonl"
        with open(TRACE) as f:
            head.write_text("".join(next(f) for _ in range(100)))
        cases = [("whole_trace", str(TRACE), 1.0, rounds), ("sparse_4x", str(TRACE), 4.0, rounds),
                 ("first_100", str(head), 1.0, max(5, rounds))]
        cases = [c for c in cases if not only or c[0] in only]
        ours_cmd = lambda trace, scale: [str(ours_py), "-c", _OURS_CHILD, trace, str(scale)]  # noqa: E731
        theirs_cmd = lambda trace, scale: [str(py), "-c", _DYNAMO_CHILD, trace, str(pool // BLOCK),  # noqa: E731
                                           str(1.0 / scale)]
        results: dict[str, float] = {"kv_tokens": pool, "num_gpu_blocks": pool // BLOCK}
        for name, trace, scale, n in cases:
            ours: list[dict[str, float]] = []
            theirs: list[dict[str, float]] = []
            for i in range(n):
                order = ("ours", "theirs") if i % 2 == 0 else ("theirs", "ours")
                for who in order:
                    if who == "ours":
                        ours.append(run_child_timed(ours_cmd(trace, scale), cwd=REPO, env=clean_env()))
                    elif py is not None:
                        theirs.append(run_child_timed(theirs_cmd(trace, scale), cwd=REPO,
                                                      env=clean_env(RUST_LOG="error")))
            med = lambda rows, k: statistics.median(r[k] for r in rows)  # noqa: E731
            o_cpu = med(ours, "process_cpu_s")
            line = (f"  {name:<12} shadowsim {o_cpu:6.3f} s cpu (run {med(ours, 'run_cpu_s'):.3f}, start-up "
                    f"{med(ours, 'startup_cpu_s'):.3f}), {ours[0]['sim_s'] / o_cpu:8,.0f} sim s/cpu s, "
                    f"peak RSS {med(ours, 'peak_rss_mib'):.0f} MiB")
            results.update({f"{name}.shadowsim_cpu_s": o_cpu, f"{name}.shadowsim_run_cpu_s": med(ours, "run_cpu_s"),
                            f"{name}.shadowsim_startup_cpu_s": med(ours, "startup_cpu_s"),
                            f"{name}.shadowsim_sim_s": ours[0]["sim_s"],
                            f"{name}.shadowsim_sim_s_per_cpu_s": ours[0]["sim_s"] / o_cpu,
                            f"{name}.shadowsim_peak_rss_mib": med(ours, "peak_rss_mib"),
                            f"{name}.shadowsim_mean_ttft_ms": ours[0]["mean_ttft_ms"]})
            if theirs:
                t_cpu = med(theirs, "process_cpu_s")
                line += (f" | Dynamo {t_cpu:6.3f} s cpu, simulated {theirs[0]['sim_s']:,.0f} s, peak RSS "
                         f"{med(theirs, 'peak_rss_mib'):.0f} MiB | ratio {o_cpu / t_cpu:.2f}x")
                results.update({f"{name}.dynamo_cpu_s": t_cpu, f"{name}.dynamo_sim_s": theirs[0]["sim_s"],
                                f"{name}.dynamo_peak_rss_mib": med(theirs, "peak_rss_mib"),
                                f"{name}.dynamo_mean_ttft_ms": theirs[0]["mean_ttft_ms"],
                                f"{name}.cpu_ratio": o_cpu / t_cpu})
            print(line, flush=True)
    print(json.dumps({"bench": "dynamo", **results}))
    return results


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _root_on_path()
        from benchmarks.dynamo_child import child_main

        child_main(sys.argv[2:4])
    else:
        args = sys.argv[1:]
        unknown = [a for a in args if not a.isdigit() and a not in CASES]
        if unknown:
            sys.exit(f"bench_dynamo: unknown argument(s) {' '.join(unknown)}: give [ROUNDS] [{' '.join(CASES)}]")
        main(next((int(a) for a in args if a.isdigit()), 3), tuple(a for a in args if a in CASES))
