"""Simulate one SGLang server on a workload and predict TTFT, TPOT, ITL, e2e latency and throughput.

The server is modelled as SGLang schedules it (prefill-first batches, chunked prefill, RadixAttention prefix
cache with LRU eviction, new_token_ratio admission, retraction, overlap scheduling, decode CUDA-graph padding);
GPU step times come from the measured per-op tables (H100/H200/A100/B200/L40S) or a roofline model.

Workload: either a trace (--trace; Mooncake, Azure, ShareGPT-style or shadowsim's native JSONL), a closed loop
(--concurrency N clients sending back-to-back requests) or an open loop (--request-rate R requests/s, Poisson).
Synthetic requests have --input-len/--output-len tokens and run to their length (bench_serving's ignore_eos).

Output: a summary table (or --json), and with --out one record per request (.jsonl or .csv) with arrival,
first-token and finish times (s), ttft/tpot/e2e (s), cached tokens and retractions.

Examples:
  shadowsim predict --model meta-llama/Llama-3.1-8B-Instruct --gpu H100 --concurrency 64 \\
      --input-len 2048 --output-len 256 --num-requests 640
  shadowsim predict --model Qwen/Qwen3-32B --gpu h200_sxm --tp 2 --request-rate 4 --num-requests 500 --json
  shadowsim predict --model meta-llama/Llama-3.1-8B-Instruct --gpu h100_sxm \\
      --trace ../shared/data/mooncake/conversation_trace.jsonl --out records.jsonl
  shadowsim predict --model ./config.json --gpu a100_sxm --max-total-tokens 200000 --schedule-policy lpm ...

JSON summary keys: num_requests, throughput_rps, output_tokens_per_s, ttft_ms/tpot_ms/itl_ms/e2e_ms/queue_ms
({mean,p50,p90,p99}), cache_hit_rate (cached prompt tokens / prompt tokens), kv_peak_usage (0-1),
num_retractions, steps, sim_time_s, wall_time_s, plus the resolved server configuration under "server".
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from simcore.errors import UserError
from simcore.request import RequestSpec
from simcore.settings import POLICIES

NAME = "predict"
HELP = "simulate an SGLang server on a workload and print TTFT/TPOT/throughput"
TRACE_FORMATS = ("auto", "mooncake", "azure", "sharegpt", "jsonl")


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model and hardware")
    g.add_argument("--model", required=True,
                   help="Hugging Face id from the catalogue (e.g. meta-llama/Llama-3.1-8B-Instruct) or a config.json")
    g.add_argument("--gpu", required=True, help="GPU: h100_sxm, h200_sxm, a100_sxm, b200_sxm, l40s, ... or H100, A100")
    g.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    g.add_argument("--precision", default=None, help="weights: bf16, fp8, ... (default: the model's own)")
    g.add_argument("--latency-backend", default="auto", choices=("auto", "table", "roofline"),
                   help="auto = measured per-op tables when the GPU has them, else roofline")
    g.add_argument("--profile", metavar="PROFILE.json", default=None,
                   help="calibration profile from `shadowsim calibrate` (default: the shipped one)")
    s = p.add_argument_group("server flags (SGLang names)")
    s.add_argument("--sglang-version", default="0.5.9", help="version whose scheduler rules apply (default 0.5.9)")
    s.add_argument("--schedule-policy", choices=POLICIES, default=None, help="queue policy (default: fcfs)")
    s.add_argument("--chunked-prefill-size", type=int, default=None,
                   help="tokens per prefill chunk; -1 disables chunking (default: by GPU memory)")
    s.add_argument("--max-prefill-tokens", type=int, default=16384, help="prefill token budget per batch")
    s.add_argument("--max-running-requests", type=int, default=None, help="cap on running requests")
    s.add_argument("--max-total-tokens", type=int, default=None,
                   help="KV pool size in tokens; overrides the sizing from GPU memory (1000000000 = unlimited cache)")
    s.add_argument("--mem-fraction-static", type=float, default=None, help="weights+KV share of GPU memory")
    s.add_argument("--page-size", type=int, default=1, help="KV page size in tokens (default 1)")
    s.add_argument("--kv-cache-dtype", default="auto", help="auto (model dtype), fp8_e4m3, fp8_e5m2")
    s.add_argument("--context-length", type=int, default=None, help="model context length override")
    s.add_argument("--disable-overlap-schedule", action="store_true", help="CPU and GPU work in series")
    s.add_argument("--enable-mixed-chunk", action="store_true", help="decode rows ride along prefill chunks")
    s.add_argument("--disable-radix-cache", action="store_true", help="no prefix caching")
    s.add_argument("--disable-cuda-graph", action="store_true", help="decode runs eagerly")
    s.add_argument("--cuda-graph-max-bs", type=int, default=None, help="largest captured decode batch")
    w = p.add_argument_group("workload")
    w.add_argument("--trace", default=None, metavar="PATH", help="replay a trace file")
    w.add_argument("--trace-format", default="auto", choices=TRACE_FORMATS,
                   help="trace format (auto: .csv = azure, JSON lines by their keys; jsonl = shadowsim native)")
    w.add_argument("--trace-limit", type=int, default=None, help="use only the first N requests of the trace")
    w.add_argument("--time-scale", type=float, default=1.0, help="simulated seconds per trace second")
    w.add_argument("--concurrency", type=int, default=None, help="closed loop: number of clients")
    w.add_argument("--request-rate", type=float, default=None, help="open loop: requests per second (Poisson)")
    w.add_argument("--num-requests", type=int, default=None,
                   help="synthetic requests (default: 10 x concurrency or 200)")
    w.add_argument("--input-len", type=int, default=1024, help="synthetic prompt tokens (default 1024)")
    w.add_argument("--output-len", type=int, default=128, help="synthetic output tokens (default 128)")
    w.add_argument("--random-range-ratio", type=float, default=1.0,
                   help="lengths uniform in [ratio x len, len] as bench_serving (default 1.0 = fixed)")
    w.add_argument("--shared-prefix-len", type=int, default=0, help="tokens of a system prompt shared by all")
    w.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    t = p.add_argument_group("timing extras")
    t.add_argument("--tokenize-ms", type=float, default=0.0, help="tokenizer delay before the scheduler (ms)")
    t.add_argument("--detokenize-ms", type=float, default=0.0, help="detokenizer/HTTP delay per token (ms)")
    t.add_argument("--until", type=float, default=None, help="stop after this many simulated seconds")
    o = p.add_argument_group("output")
    o.add_argument("--out", default=None, metavar="FILE", help="per-request records: FILE.jsonl or FILE.csv")
    o.add_argument("--json", action="store_true", help="print the summary as JSON")
    o.add_argument("--quiet", "-q", action="store_true", help="no progress bar or warnings")



def _settings(args: argparse.Namespace, gpu_mem: int) -> Any:
    from pydantic import ValidationError

    from simcore.settings import ServerSettings, resolve

    try:
        s = ServerSettings(
            sglang_version=args.sglang_version, schedule_policy=args.schedule_policy,
            max_prefill_tokens=args.max_prefill_tokens, chunked_prefill_size=args.chunked_prefill_size,
            max_running_requests=args.max_running_requests, mem_fraction_static=args.mem_fraction_static,
            page_size=args.page_size, tp_size=args.tp, kv_cache_dtype=args.kv_cache_dtype,
            context_length=args.context_length, disable_overlap_schedule=args.disable_overlap_schedule,
            enable_mixed_chunk=args.enable_mixed_chunk, disable_radix_cache=args.disable_radix_cache,
            disable_cuda_graph=args.disable_cuda_graph, cuda_graph_max_bs=args.cuda_graph_max_bs)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = "--" + str(err["loc"][0]).replace("_", "-") if err["loc"] else "settings"
        raise UserError(field, err["msg"], "see shadowsim predict --help") from None
    return resolve(s, gpu_mem)


def _workload(args: argparse.Namespace) -> tuple[Any, list[RequestSpec] | None, int]:
    """(workload object, trace requests or None, key_unit)."""
    from simcore import workload as wl

    if args.trace:
        from streams.traces import read_trace

        fmt = "native" if args.trace_format == "jsonl" else args.trace_format
        res = read_trace(args.trace, fmt, limit=args.trace_limit)
        for issue in res.issues:  # a bad line is reported with its number and skipped, never silently
            print(f"shadowsim: warning: {Path(args.trace).name} {issue} (line skipped)", file=sys.stderr)
        if not res.requests:
            raise UserError("--trace", f"no usable request in {args.trace}", "check the file and --trace-format")
        units = {r.key_unit for r in res.requests if r.key is not None}
        if len(units) > 1:
            raise UserError("--trace", f"mixed key units {sorted(units)}", "use one block size per trace")
        return wl.TraceReplay(res.requests, args.time_scale), res.requests, (units.pop() if units else 1)
    for name in ("input_len", "output_len"):
        if getattr(args, name) < 1:
            raise UserError("--" + name.replace("_", "-"), "must be >= 1", "give a positive token count")
    ins = wl.bench_random(args.input_len, args.random_range_ratio)
    outs = wl.bench_random(args.output_len, args.random_range_ratio)
    if args.concurrency is not None and args.request_rate is None:
        if args.concurrency < 1:
            raise UserError("--concurrency", "must be >= 1", "give the number of clients")
        n = args.num_requests if args.num_requests is not None else 10 * args.concurrency
        return wl.ClosedLoop(args.concurrency, n, ins, outs, args.seed,
                             shared_prefix_len=args.shared_prefix_len), None, 1
    rate = args.request_rate
    if rate is None:
        raise UserError("workload", "no workload given", "use --trace, --concurrency N or --request-rate R")
    if not rate > 0:
        raise UserError("--request-rate", "must be > 0", "give requests per second")
    n = args.num_requests if args.num_requests is not None else 200
    return wl.OpenLoop(rate, n, ins, outs, args.seed, shared_prefix_len=args.shared_prefix_len), None, 1


def _check_fits(reqs: Sequence[RequestSpec], args: argparse.Namespace, capacity: int) -> None:
    if reqs:
        worst = max(reqs, key=lambda r: r.input_len)
        if worst.input_len + 1 > capacity:
            raise UserError("--max-total-tokens", f"request {worst.rid} has a {worst.input_len}-token prompt but "
                            f"the KV pool holds {capacity} tokens",
                            "raise --max-total-tokens, use more --tp or a GPU with more memory")
    elif args.trace is None and args.input_len + 1 > capacity:
        raise UserError("--input-len", f"{args.input_len}-token prompts do not fit a {capacity}-token KV pool",
                        "lower --input-len or raise --max-total-tokens")


class _Progress:
    """A one-line progress bar on stderr (only on a terminal)."""

    def __init__(self, total: int | None) -> None:
        self.total = total
        self.t0 = time.perf_counter()

    def __call__(self, sim_s: float, finished: int) -> None:
        wall = time.perf_counter() - self.t0
        if self.total:
            frac = finished / self.total
            bar = "#" * int(30 * frac) + "-" * (30 - int(30 * frac))
            head = f"[{bar}] {finished}/{self.total}"
        else:
            head = f"{finished} finished"
        sys.stderr.write(f"\r{head}  sim {sim_s:,.0f} s  wall {wall:.1f} s ")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")


def run(args: argparse.Namespace) -> int:
    from simcore.engine import simulate
    from simcore.gpus import load_gpu
    from simcore.memory import max_running_requests, size_kv_pool
    from simcore.models import load_model
    from simcore.perf import build_latency_model

    if args.tp < 1:
        raise UserError("--tp", f"must be >= 1, got {args.tp}", "give the tensor-parallel size")
    model = load_model(args.model)
    gpu = load_gpu(args.gpu)
    settings = _settings(args, gpu.memory_bytes)
    precision = args.precision or model.default_precision
    profile = None
    if args.profile:
        from simcore.perf.profile import CalibrationProfile

        profile = CalibrationProfile.load(args.profile)
    latency = build_latency_model(model, gpu, args.tp, precision, backend=args.latency_backend, profile=profile)
    ctx = settings.context_length or model.context_length
    if args.max_total_tokens is not None:
        if args.max_total_tokens < 2:
            raise UserError("--max-total-tokens", "must be >= 2", "give the KV pool size in tokens")
        capacity = args.max_total_tokens - args.max_total_tokens % settings.page_size
        max_running = max_running_requests(capacity, ctx, settings.max_running_requests)
        mem_frac = None
    else:
        sizing = size_kv_pool(model, gpu, settings.model_copy(update={"max_total_tokens": None}), precision)
        capacity, max_running, mem_frac = sizing.max_total_num_tokens, sizing.max_running_requests, \
            sizing.mem_fraction_static
    workload, trace_reqs, key_unit = _workload(args)
    _check_fits(trace_reqs or [], args, capacity)
    total = len(trace_reqs) if trace_reqs is not None else len(getattr(workload, "templates", []) or []) or None
    progress = _Progress(total) if (sys.stderr.isatty() and not args.quiet) else None
    t0 = time.perf_counter()
    res = simulate(settings, latency, workload, kv_capacity_tokens=capacity, key_unit=key_unit, seed=args.seed,
                   until=args.until, progress=progress, progress_every_s=30.0, max_running_requests=max_running,
                   context_len=ctx, tokenize_s=args.tokenize_ms / 1000.0, detokenize_s=args.detokenize_ms / 1000.0)
    res.wall_time_s = time.perf_counter() - t0
    if progress is not None:
        progress.close()
    summary = res.summary()
    summary["server"] = {
        "model": args.model, "gpu": gpu.name, "tp": args.tp, "precision": precision,
        "latency_model": getattr(latency, "name", type(latency).__name__),
        "sglang_version": settings.sglang_version, "schedule_policy": settings.policy,
        "chunked_prefill_size": settings.chunked_prefill_size, "page_size": settings.page_size,
        "max_total_num_tokens": capacity, "max_running_requests": max_running,
        "mem_fraction_static": mem_frac, "cuda_graph_max_bs": settings.cuda_graph_max_bs,
        "overlap_schedule": not settings.disable_overlap_schedule,
    }
    if res.unfinished:
        summary["unfinished"] = res.unfinished
    if args.out:
        _write_records(args.out, res.records)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_table(summary)
    return 0


def _write_records(path: str, records: Sequence[Any]) -> None:
    p = Path(path)
    rows = [r.to_dict() for r in sorted(records, key=lambda r: (r.arrival_s, r.rid))]
    try:
        if p.suffix == ".csv":
            cols = list(rows[0].keys()) if rows else []
            with p.open("w", newline="") as f:
                wr = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
                wr.writeheader()
                wr.writerows(rows)
        elif p.suffix in (".jsonl", ".json"):
            with p.open("w") as f:
                for row in rows:
                    f.write(json.dumps(row) + "\n")
        else:
            raise UserError("--out", f"unknown extension {p.suffix!r}", "use FILE.jsonl or FILE.csv")
    except OSError as exc:
        raise UserError("--out", f"cannot write {p}: {exc.strerror}", "check the directory exists") from None


def _print_table(s: dict[str, Any]) -> None:
    srv = s["server"]
    print(f"{srv['model']} on {srv['tp']}x {srv['gpu']} ({srv['precision']}), SGLang {srv['sglang_version']} "
          f"rules, policy {srv['schedule_policy']}, KV pool {srv['max_total_num_tokens']:,} tokens")
    print(f"requests        {s['num_requests']:>10}   retractions {s['num_retractions']}   "
          f"aborted {s['num_aborted']}")
    print(f"throughput      {s['throughput_rps']:>10.3f} req/s   {s['output_tokens_per_s']:,.0f} output tok/s")
    print(f"cache hit rate  {100 * s['cache_hit_rate']:>10.1f} %      KV peak usage {100 * s['kv_peak_usage']:.1f} %")
    print(f"{'(ms)':<12}{'mean':>12}{'p50':>12}{'p90':>12}{'p99':>12}")
    for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms"):
        v = s[k]
        cells = "".join(f"{'-' if v[q] is None else format(v[q], ',.1f'):>12}" for q in ("mean", "p50", "p90", "p99"))
        print(f"{k[:-3]:<12}{cells}")
    print(f"simulated {s['sim_time_s']:,.1f} s in {s['wall_time_s']:.2f} s wall ({s['steps']:,} steps)")
