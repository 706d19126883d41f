"""What `shadowsim predict` and `shadowsim sweep` share: their options, and one simulated point.

``add_point_arguments(parser, lists=...)`` adds the model/hardware, server-flag, workload, timing and SLO option
groups; the option names in ``lists`` take comma-separated lists instead (``sweep``'s axes, e.g. ``--tp 1,2,4``).
``simulate_point(args)`` turns a namespace holding one value per option into a :class:`PointResult`: the
``predict --json`` summary plus the per-request records. It raises :class:`UserError` for anything impossible
(unknown model or GPU, weights that do not fit, a prompt larger than the KV pool), which ``sweep`` reports as a
skipped point and ``predict`` as a one-line error.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from simcore.errors import UserError
from simcore.request import RequestSpec
from simcore.server_flags import add_server_flags, settings_fields

TRACE_FORMATS = ("auto", "mooncake", "azure", "sharegpt", "jsonl")

# Options `sweep` may take as lists (its axes): dest -> element type
SWEEPABLE: dict[str, Callable[[str], Any]] = {
    "model": str, "gpu": str, "tp": int, "precision": str, "schedule_policy": str,
    "chunked_prefill_size": int, "max_running_requests": int, "request_rate": float, "concurrency": int,
}


def comma_list(kind: Callable[[str], Any], name: str) -> Callable[[str], list[Any]]:
    """argparse ``type=`` for ``a,b,c``: a non-empty list of ``kind`` values, in the given order, no repeats."""

    def parse(text: str) -> list[Any]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"{name}: give at least one value")
        try:
            values = [kind(t) for t in items]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: {text!r} is not a comma-separated list of "
                                             f"{getattr(kind, '__name__', 'value')}s") from None
        return list(dict.fromkeys(values))  # a repeated value would only repeat a point

    return parse


def add_point_arguments(p: argparse.ArgumentParser, lists: frozenset[str] = frozenset()) -> None:
    """The option groups of one simulated server + workload. Dests in ``lists`` accept ``a,b,c``."""

    def add(group: argparse._ArgumentGroup, flag: str, **kw: Any) -> None:
        dest = flag.lstrip("-").replace("-", "_")
        if dest in lists:
            kind = kw.pop("type", str)
            choices = kw.pop("choices", None)
            kw["type"] = comma_list(kind, flag)
            kw["help"] = kw["help"] + " — comma-separated list to sweep"
            if choices is not None:
                kw["help"] += f" (from {', '.join(choices)})"
            kw["metavar"] = "A,B,..."
            if kw.get("default") is not None:
                kw["default"] = [kw["default"]]
        group.add_argument(flag, **kw)

    g = p.add_argument_group("model and hardware")
    add(g, "--model", required=True,
        help="Hugging Face id from the catalogue (e.g. meta-llama/Llama-3.1-8B-Instruct) or a config.json")
    add(g, "--gpu", required=True, help="GPU: h100_sxm, h200_sxm, a100_sxm, b200_sxm, l40s, ... or H100, A100")
    add(g, "--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    add(g, "--precision", default=None, help="weights: bf16, fp8, fp8_block, ... (default: the model's own)")
    g.add_argument("--latency-backend", default="auto", choices=("auto", "table", "roofline"),
                   help="auto = measured per-op tables when the GPU has them, else roofline")
    g.add_argument("--profile", metavar="PROFILE.json", default=None,
                   help="calibration profile from `shadowsim calibrate` (default: the shipped one)")
    s = p.add_argument_group("server flags (SGLang names)")
    add_server_flags(s, add)  # one table (simcore.server_flags) for predict, sweep and validate's server_args
    w = p.add_argument_group("workload")
    w.add_argument("--trace", default=None, metavar="PATH", help="replay a trace file")
    w.add_argument("--trace-format", default="auto", choices=TRACE_FORMATS,
                   help="trace format (auto: .csv = azure, JSON lines by their keys; jsonl = shadowsim native)")
    w.add_argument("--trace-limit", type=int, default=None, help="use only the first N requests of the trace")
    w.add_argument("--time-scale", type=float, default=1.0, help="simulated seconds per trace second")
    add(w, "--concurrency", type=int, default=None, help="closed loop: number of clients")
    add(w, "--request-rate", type=float, default=None, help="open loop: requests per second (Poisson)")
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
    o = p.add_argument_group("service-level objectives (SLO report)")
    o.add_argument("--slo-ttft-ms", type=float, default=None,
                   help="a request meets the TTFT SLO when its time to first token is <= this (ms)")
    o.add_argument("--slo-tpot-ms", type=float, default=None,
                   help="a request meets the TPOT SLO when its time per output token is <= this (ms)")


def settings_from_args(args: argparse.Namespace, gpu_mem: int) -> Any:
    """ServerSettings from the flags, resolved for a GPU of ``gpu_mem`` bytes; bad values → UserError."""
    from pydantic import ValidationError

    from simcore.settings import ServerSettings, resolve

    try:
        # --max-total-tokens sizes the pool in simulate_point, not through the settings
        s = ServerSettings(tp_size=args.tp, **settings_fields(args, skip=("max_total_tokens",)))
    except ValidationError as exc:
        err = exc.errors()[0]
        field = "--" + str(err["loc"][0]).replace("_", "-") if err["loc"] else "settings"
        raise UserError(field, err["msg"], "see shadowsim predict --help") from None
    return resolve(s, gpu_mem)


def workload_from_args(args: argparse.Namespace, warn: bool = True) -> tuple[Any, list[RequestSpec] | None, int]:
    """(workload object, trace requests or None, key_unit)."""
    from simcore import workload as wl

    if args.trace:
        from streams.traces import read_trace

        fmt = "native" if args.trace_format == "jsonl" else args.trace_format
        res = read_trace(args.trace, fmt, limit=args.trace_limit)
        for issue in res.issues if warn else ():  # a bad line is reported with its number and skipped
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


def check_fits(reqs: Sequence[RequestSpec], args: argparse.Namespace, capacity: int) -> None:
    """UserError when the largest prompt cannot fit the KV pool even alone."""
    if reqs:
        worst = max(reqs, key=lambda r: r.input_len)
        if worst.input_len + 1 > capacity:
            raise UserError("--max-total-tokens", f"request {worst.rid} has a {worst.input_len}-token prompt but "
                            f"the KV pool holds {capacity} tokens",
                            "raise --max-total-tokens, use more --tp or a GPU with more memory")
    elif args.trace is None and args.input_len + 1 > capacity:
        raise UserError("--input-len", f"{args.input_len}-token prompts do not fit a {capacity}-token KV pool",
                        "lower --input-len or raise --max-total-tokens")


def check_slos(args: argparse.Namespace) -> None:
    """UserError for a latency objective that is not a positive number of milliseconds (checked before any
    simulation runs: ``sweep`` would otherwise simulate every point only to skip it)."""
    for flag, v in (("--slo-ttft-ms", args.slo_ttft_ms), ("--slo-tpot-ms", args.slo_tpot_ms)):
        if v is not None and not v > 0:
            raise UserError(flag, f"must be > 0 ms, got {v}", "give the latency objective in milliseconds")


def check_tp_divides(model: Any, tp: int) -> None:
    """SGLang refuses to start when TP does not split the attention heads evenly (it asserts this at load)."""
    if tp < 1:
        raise UserError("--tp", f"must be >= 1, got {tp}", "give the tensor-parallel size")
    if model.num_heads % tp:
        raise UserError("--tp", f"{model.num_heads} attention heads do not split over {tp} GPUs",
                        "use a TP size that divides the number of heads")


class Progress:
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


@dataclass
class PointResult:
    """One simulated configuration: the predict summary (with ``server`` and, given SLOs, ``slo``) and records."""

    summary: dict[str, Any]
    records: list[Any]


def simulate_point(args: argparse.Namespace, *, show_progress: bool = False, warn: bool = True) -> PointResult:
    """Build model, GPU, settings, latency model and workload from ``args`` and simulate them."""
    from simcore.analysis import slo_attainment
    from simcore.engine import simulate
    from simcore.gpus import load_gpu
    from simcore.memory import max_running_requests, size_kv_pool
    from simcore.models import load_model
    from simcore.perf import ParallelLayout, build_latency_model

    check_slos(args)
    model = load_model(args.model)
    check_tp_divides(model, args.tp)
    gpu = load_gpu(args.gpu)
    settings = settings_from_args(args, gpu.memory_bytes)
    precision = args.precision or model.default_precision
    profile = None
    if args.profile:
        from simcore.perf.profile import CalibrationProfile

        profile = CalibrationProfile.load(args.profile)
    latency = build_latency_model(model, gpu, args.tp, precision, backend=args.latency_backend, profile=profile,
                                  parallel=ParallelLayout.from_settings(settings, gpu))
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
    workload, trace_reqs, key_unit = workload_from_args(args, warn=warn)
    check_fits(trace_reqs or [], args, capacity)
    total = len(trace_reqs) if trace_reqs is not None else len(getattr(workload, "templates", []) or []) or None
    progress = Progress(total) if show_progress else None
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
    if args.slo_ttft_ms is not None or args.slo_tpot_ms is not None:
        summary["slo"] = slo_attainment(
            res.records, ttft_slo_s=None if args.slo_ttft_ms is None else args.slo_ttft_ms / 1000.0,
            tpot_slo_s=None if args.slo_tpot_ms is None else args.slo_tpot_ms / 1000.0).to_dict()
    return PointResult(summary, res.records)
