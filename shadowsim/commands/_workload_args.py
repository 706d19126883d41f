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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from shadowsim.workloads import SCENARIOS, mix_templates
from simcore.errors import UserError
from simcore.request import RequestSpec
from simcore.server_flags import add_server_flags, settings_fields

TRACE_FORMATS = ("auto", "mooncake", "azure", "sharegpt", "jsonl", "native")  # native = jsonl (the API's name)

# Options `sweep` may take as lists (its axes): dest -> element type
SWEEPABLE: dict[str, Callable[[str], Any]] = {
    "model": str, "gpu": str, "tp": int, "precision": str, "schedule_policy": str,
    "chunked_prefill_size": int, "max_running_requests": int, "request_rate": float, "concurrency": int,
}


def comma_list(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    """argparse ``type=`` for ``a,b,c``: a non-empty list of ``kind`` values, in the given order, no repeats.
    (argparse puts the option's name in front of the message.)"""

    def parse(text: str) -> list[Any]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError("give at least one value")
        try:
            values = [kind(t) for t in items]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of "
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
            kw["type"] = comma_list(kind)
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
                   help="trace format (auto: .csv = azure, JSON lines by their keys; jsonl or native = shadowsim's "
                        "native JSONL, docs/workloads.md)")
    w.add_argument("--trace-limit", type=int, default=None, help="use only the first N requests of the trace")
    w.add_argument("--time-scale", type=float, default=1.0, help="simulated seconds per trace second (default 1.0; 2.0 plays the trace at half speed)")
    add(w, "--concurrency", type=int, default=None, help="closed loop: number of clients")
    add(w, "--request-rate", type=float, default=None, help="open loop: requests per second (Poisson)")
    w.add_argument("--num-requests", type=int, default=None,
                   help="synthetic requests (default: 10 x concurrency or 200)")
    w.add_argument("--input-len", type=int, default=1024, help="synthetic prompt tokens (default 1024)")
    w.add_argument("--output-len", type=int, default=128, help="synthetic output tokens (default 128)")
    w.add_argument("--random-range-ratio", type=float, default=1.0,
                   help="lengths uniform in [ratio x len, len] as bench_serving (default 1.0 = fixed)")
    w.add_argument("--shared-prefix-len", type=int, default=0, help="tokens of a system prompt shared by all")
    w.add_argument("--scenario", default=None, metavar="MIX",
                   help="a named request mix instead of --input-len/--output-len (with --request-rate or "
                        "--concurrency): " + ", ".join(sorted(SCENARIOS)) + " (see docs/api.md)")
    w.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    w.add_argument("--replicas", type=int, default=1, metavar="N",
                   help="repeat the run with seeds seed..seed+N-1 and report p5-p95 intervals (default 1)")
    w.add_argument("--variability", choices=("auto", "off", "measured"), default="auto",
                   help="run-to-run randomness (docs/accuracy.md 3.7): measured = seeded step-time jitter (CV 5%% "
                        "per step, 1%% per run) and client/network delays (1 ms round trip); auto = measured "
                        "with --replicas > 1, else off (the deterministic simulator)")
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
    from simcore.frozen_model import FieldError
    from simcore.settings import ServerSettings, resolve

    try:
        # --max-total-tokens sizes the pool in simulate_point, not through the settings
        s = ServerSettings(tp_size=args.tp, **settings_fields(args, skip=("max_total_tokens",)))
    except FieldError as exc:
        err = exc.errors()[0]
        field = "--" + str(err["loc"][0]).replace("_", "-") if err["loc"] else "settings"
        msg = err["msg"] if exc.input is None else f"{err['msg']}, got {exc.input!r}"
        raise UserError(field, msg, exc.hint or "see shadowsim predict --help") from None
    return resolve(s, gpu_mem)


def check_workload_flags(args: argparse.Namespace) -> None:
    """Conflicting or impossible workload flags are errors before anything runs (never silently dropped)."""
    if args.trace and (args.concurrency is not None or args.request_rate is not None):
        raise UserError("--trace", "a trace sets its own arrivals", "drop --concurrency/--request-rate")
    if args.trace and getattr(args, "scenario", None):
        raise UserError("--scenario", "a trace has its own requests", "use --trace or --scenario, not both")
    if not isinstance(args.concurrency, list) and args.concurrency is not None and args.request_rate is not None:
        raise UserError("--concurrency", "give either --concurrency (closed loop) or --request-rate (open loop)",
                        "drop one of them")
    for flag, v, ok in (("--time-scale", args.time_scale, args.time_scale > 0),
                        ("--trace-limit", args.trace_limit, args.trace_limit is None or args.trace_limit >= 1),
                        ("--num-requests", args.num_requests, args.num_requests is None or args.num_requests >= 1),
                        ("--random-range-ratio", args.random_range_ratio, 0 < args.random_range_ratio <= 1),
                        ("--shared-prefix-len", args.shared_prefix_len, args.shared_prefix_len >= 0),
                        ("--tokenize-ms", args.tokenize_ms, args.tokenize_ms >= 0),
                        ("--detokenize-ms", args.detokenize_ms, args.detokenize_ms >= 0),
                        ("--until", args.until, args.until is None or args.until > 0),
                        ("--max-prefill-tokens", args.max_prefill_tokens, args.max_prefill_tokens >= 1),
                        ("--page-size", args.page_size, args.page_size >= 1),
                        ("--replicas", getattr(args, "replicas", 1), getattr(args, "replicas", 1) >= 1)):
        if not ok:
            raise UserError(flag, f"{v} is out of range", "see the option's range in --help")
    if getattr(args, "scenario", None) and args.scenario not in SCENARIOS:
        raise UserError("--scenario", f"unknown mix {args.scenario!r}", f"use one of {', '.join(sorted(SCENARIOS))}")


def summarize_issues(source: str, issues: Sequence[Any], shown: int = 3) -> list[str]:
    """Skipped trace lines as at most ``shown`` + 1 warnings: the first few, then one line with the count."""
    out = [f"{source} {issue} (line skipped)" for issue in issues[:shown]]
    if len(issues) > shown:
        from collections import Counter

        kinds = Counter(i.field for i in issues[shown:])
        detail = ", ".join(f"{n} x {k}" for k, n in kinds.most_common(3))
        out.append(f"{source}: {len(issues) - shown} more lines skipped ({detail})")
    return out


def workload_from_args(args: argparse.Namespace, warn: bool = True,
                       warnings: list[str] | None = None) -> tuple[Any, list[RequestSpec] | None, int]:
    """(workload object, trace requests or None, key_unit). Skipped trace lines go to ``warnings`` (or to
    stderr when ``warn`` and no list is given), summarised after the first few."""
    from simcore import workload as wl

    check_workload_flags(args)
    if args.trace:
        from streams.traces import read_trace

        fmt = "native" if args.trace_format == "jsonl" else args.trace_format
        res = read_trace(args.trace, fmt, limit=args.trace_limit)
        if not res.requests:
            first = f" (first problem: {res.issues[0]})" if res.issues else ""
            raise UserError("--trace", f"no usable request in {args.trace}{first}",
                            "check the file and --trace-format")
        lines = summarize_issues(Path(args.trace).name, res.issues)
        if warnings is not None:
            warnings.extend(lines)
        elif warn:
            for line in lines:
                print(f"shadowsim: warning: {line}", file=sys.stderr)
        units = {r.key_unit for r in res.requests if r.key is not None}
        if len(units) > 1:
            raise UserError("--trace", f"mixed key units {sorted(units)}", "use one block size per trace")
        return wl.TraceReplay(res.requests, args.time_scale), res.requests, (units.pop() if units else 1)
    for name in ("input_len", "output_len"):
        if getattr(args, name) < 1:
            raise UserError("--" + name.replace("_", "-"), "must be >= 1", "give a positive token count")
    classes = tuple(getattr(args, "mix_classes", ()) or ())
    if getattr(args, "scenario", None):
        classes = SCENARIOS[args.scenario]
    ins = wl.bench_random(args.input_len, args.random_range_ratio)
    outs = wl.bench_random(args.output_len, args.random_range_ratio)
    if args.concurrency is not None and args.request_rate is None:
        if args.concurrency < 1:
            raise UserError("--concurrency", "must be >= 1", "give the number of clients")
        n = args.num_requests if args.num_requests is not None else 10 * args.concurrency
        loop: Any = wl.ClosedLoop(args.concurrency, n, ins, outs, args.seed,
                                  shared_prefix_len=args.shared_prefix_len)
    else:
        rate = args.request_rate
        if rate is None:
            raise UserError("workload", "no workload given", "use --trace, --concurrency N or --request-rate R")
        if not rate > 0:
            raise UserError("--request-rate", "must be > 0", "give requests per second")
        n = args.num_requests if args.num_requests is not None else 200
        loop = wl.OpenLoop(rate, n, ins, outs, args.seed, shared_prefix_len=args.shared_prefix_len)
    if classes:  # a scenario mix: same arrivals, per-class lengths
        loop.templates = mix_templates(classes, n, args.seed)
    return loop, None, 1


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
    """Progress of one simulation on stderr (tqdm; only on a terminal): finished requests and simulated time."""

    def __init__(self, total: int | None) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, unit="req", desc="simulating", file=sys.stderr, leave=False,
                        dynamic_ncols=True)

    def __call__(self, sim_s: float, finished: int) -> None:
        self.bar.update(finished - self.bar.n)
        self.bar.set_postfix_str(f"sim {sim_s:,.0f} s", refresh=False)

    def close(self) -> None:
        self.bar.close()


@dataclass
class PointResult:
    """One simulated configuration: the predict summary (with ``server`` and, given SLOs, ``slo``) and records."""

    summary: dict[str, Any]
    records: list[Any]
    steps: list[Any] = field(default_factory=list)
    memory: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def simulate_point(args: argparse.Namespace, *, show_progress: bool = False, warn: bool = True,
                   progress: Callable[[float, int], None] | None = None, keep_steps: bool = False) -> PointResult:
    """Build model, GPU, settings, latency model and workload from ``args`` and simulate them.

    Warnings (skipped trace lines, prompts beyond the context, offered load the server does not serve) are
    returned in ``PointResult.warnings``, not printed. ``keep_steps`` keeps every StepRecord (memory: one small
    record per forward pass)."""
    from simcore.analysis import slo_attainment
    from simcore.engine import simulate
    from simcore.gpus import load_gpu
    from simcore.memory import max_running_requests, size_kv_pool
    from simcore.models import load_model
    from simcore.perf import ParallelLayout, build_latency_model
    from simcore.speculative import build_speculative
    from simcore.variability import ClientDelays, DelayedWorkload, client_records, with_variability

    check_slos(args)
    model = load_model(args.model)
    check_tp_divides(model, args.tp)
    gpu = load_gpu(args.gpu)
    settings = settings_from_args(args, gpu.memory_bytes)
    precision = args.precision or model.default_precision
    from simcore.perf.profile import CalibrationProfile, default_profile

    profile = CalibrationProfile.load(args.profile) if args.profile else default_profile()
    profile = profile.for_version(settings.sglang_version)  # version-specific factors (docs/accuracy.md §3.11)
    latency = build_latency_model(model, gpu, args.tp, precision, backend=args.latency_backend, profile=profile,
                                  kv_cache_dtype=settings.kv_cache_dtype,
                                  parallel=ParallelLayout.from_settings(settings, gpu))
    variability = variability_from_args(args)
    if settings.enable_dp_attention:  # simcore.dp_attention: attention per rank, MLP/MoE on the gathered tokens
        from simcore.dp_attention import build_dp_attention_latency

        if variability is not None and variability.jitters_steps:
            raise UserError("--variability", "step jitter with DP attention is not modelled",
                            "use --variability off with --enable-dp-attention")
        latency = build_dp_attention_latency(model, gpu, settings, precision, backend=args.latency_backend,
                                             profile=profile)
    latency = with_variability(latency, variability, args.seed)
    # speculative decoding (--speculative-*): the draft model priced on the same GPUs, TP and precision
    speculative = build_speculative(settings, model, latency, lambda m: build_latency_model(
        m, gpu, args.tp, precision, backend=args.latency_backend, profile=profile,
        kv_cache_dtype=settings.kv_cache_dtype, parallel=ParallelLayout.from_settings(settings, gpu)), args.seed)
    if speculative is not None:  # it prices the steps: target + draft
        latency = speculative
        if settings.enable_dp_attention:  # every rank's draft + verify in lockstep (simcore.dp_attention)
            from simcore.dp_attention import build_dp_speculative_latency

            latency = build_dp_speculative_latency(speculative, model, gpu, settings, precision,
                                                   backend=args.latency_backend, profile=profile)
    ctx = settings.context_length or model.context_length
    if args.max_total_tokens is not None:
        if args.max_total_tokens < 2:
            raise UserError("--max-total-tokens", "must be >= 2", "give the KV pool size in tokens")
        capacity = args.max_total_tokens - args.max_total_tokens % settings.page_size
        max_running = max_running_requests(capacity, ctx, settings.max_running_requests, settings.dp_attention_ranks)
        mem_frac = None
        sizing = None
    else:
        sizing = size_kv_pool(model, gpu, settings.model_copy(update={"max_total_tokens": None}), precision)
        capacity, max_running, mem_frac = sizing.max_total_num_tokens, sizing.max_running_requests, \
            sizing.mem_fraction_static
    warnings: list[str] = []
    workload, trace_reqs, key_unit = workload_from_args(args, warn=warn, warnings=warnings)
    specs = trace_reqs if trace_reqs is not None else list(getattr(workload, "templates", []) or [])
    too_long = [r for r in specs if r.input_len >= ctx]
    if too_long and trace_reqs is None:
        mixed = bool(getattr(args, "scenario", None) or getattr(args, "mix_classes", ()))
        raise UserError("--scenario" if mixed else "--input-len",
                        f"prompts of up to {max(r.input_len for r in too_long)} tokens do not fit the {ctx}-token "
                        "context length", "choose a mix whose prompts fit, or raise --context-length" if mixed
                        else "lower --input-len or raise --context-length")
    num_rejected = len(too_long)
    if too_long:  # SGLang's tokenizer manager refuses them (400, "The input (N tokens) is longer than the model's
        # context length"), so they never reach the scheduler: the others are simulated, the count is reported
        if len(too_long) == len(specs):
            raise UserError("--trace", f"every prompt is at least the {ctx}-token context length",
                            "raise --context-length or use a model with a longer context")
        warnings.append(f"{len(too_long)} of {len(specs)} prompts are at least the {ctx}-token context length: "
                        "SGLang rejects them, so they are left out (num_rejected_context)")
        trace_reqs = [r for r in trace_reqs if r.input_len < ctx]
        specs = trace_reqs
        workload = type(workload)(trace_reqs, args.time_scale)
    check_fits(trace_reqs or [], args, capacity)
    total = len(specs) or None
    delays = ClientDelays.from_variability(variability, args.seed)
    if delays is not None:
        workload = DelayedWorkload(workload, delays)
    bar = Progress(total) if show_progress else None
    steps: list[Any] = []
    t0 = time.perf_counter()
    res = simulate(settings, latency, workload, kv_capacity_tokens=capacity, key_unit=key_unit, seed=args.seed,
                   until=args.until, progress=progress or bar, progress_every_s=30.0,
                   observer=steps.append if keep_steps else None, max_running_requests=max_running,
                   context_len=ctx, tokenize_s=args.tokenize_ms / 1000.0, detokenize_s=args.detokenize_ms / 1000.0,
                   speculative=speculative)
    res.wall_time_s = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    if delays is not None:  # latencies as the client timed them (TTFT and e2e include the round trip)
        res.records = client_records(res.records, workload.offsets)
    summary = res.summary()
    offered = offered_rate_rps(args, trace_reqs)
    share = served_share(res.records) if offered is not None else None
    if share is not None and share < 0.9:
        warnings.append(f"the server serves about {share * offered:.3g} req/s of the {offered:.3g} req/s offered "
                        f"({100 * share:.0f} %): the queue grows without bound and latencies depend on the run "
                        "length; lower the load or add capacity")
    if res.unfinished:
        warnings.append(f"{res.unfinished} requests had not finished when the run stopped")
    summary["server"] = {
        "model": args.model, "gpu": gpu.name, "tp": args.tp, "precision": precision,
        "latency_model": getattr(latency, "name", type(latency).__name__),
        "sglang_version": settings.sglang_version, "schedule_policy": settings.policy,
        "chunked_prefill_size": settings.chunked_prefill_size, "page_size": settings.page_size,
        "max_total_num_tokens": capacity, "max_running_requests": max_running,
        "mem_fraction_static": mem_frac, "cuda_graph_max_bs": settings.cuda_graph_max_bs,
        "overlap_schedule": not settings.disable_overlap_schedule,
        # with DP attention the pool and request slots above are per attention-DP rank (simcore.dp_attention)
        "dp_attention_ranks": settings.dp_attention_ranks,
        "speculative": None if speculative is None else {
            "algorithm": speculative.config.algorithm, "num_steps": speculative.config.num_steps,
            "eagle_topk": speculative.config.eagle_topk, "num_draft_tokens": speculative.config.num_draft_tokens,
            "draft_accept_prob": speculative.acceptance.accept_prob,
            "assumed_accept_length": speculative.acceptance.mean(),
            "simulated_accept_length": speculative.mean_accept_length},
        "variability": variability.to_dict(),
    }
    if sizing is not None and getattr(sizing, "swa_max_total_num_tokens", None) is not None:
        # SGLang's hybrid sliding-window pool: the SWA layers' own token count (simcore/memory.py)
        summary["server"]["swa_max_total_num_tokens"] = sizing.swa_max_total_num_tokens
    if res.unfinished:
        summary["unfinished"] = res.unfinished
    summary["offered_rps"] = offered
    summary["num_rejected_context"] = num_rejected
    memory = memory_breakdown(gpu.memory_bytes, capacity, mem_frac, sizing)
    if args.slo_ttft_ms is not None or args.slo_tpot_ms is not None:
        summary["slo"] = slo_attainment(
            res.records, ttft_slo_s=None if args.slo_ttft_ms is None else args.slo_ttft_ms / 1000.0,
            tpot_slo_s=None if args.slo_tpot_ms is None else args.slo_tpot_ms / 1000.0).to_dict()
    summary["warnings"] = list(warnings)
    return PointResult(summary, res.records, steps, memory, warnings)


def variability_from_args(args: argparse.Namespace) -> Any:
    """The run-to-run randomness of ``--variability`` (auto: measured when replicated, else off)."""
    from simcore.variability import Variability

    choice = getattr(args, "variability", "auto")
    if choice == "auto":
        choice = "measured" if getattr(args, "replicas", 1) > 1 else "off"
    return Variability.measured() if choice == "measured" else Variability.off()


def offered_rate_rps(args: argparse.Namespace, trace_reqs: Sequence[RequestSpec] | None) -> float | None:
    """Requests per second the workload offers: the open-loop rate, or a trace's count over its span (scaled);
    None for a closed loop (it only sends when served)."""
    if trace_reqs:
        span = (trace_reqs[-1].arrival_s - trace_reqs[0].arrival_s) * args.time_scale
        return (len(trace_reqs) - 1) / span if span > 0 and len(trace_reqs) >= 20 else None
    if args.request_rate is not None and not isinstance(args.request_rate, list):
        return float(args.request_rate)
    return None


def served_share(records: Sequence[Any]) -> float | None:
    """Served / offered rate of an open-loop run, estimated from its own records two ways, the lower wins:

    - makespan: arrivals span A seconds; a server that keeps up finishes about one median e2e after the last
      arrival, so share = A / (makespan - e2e_p50) (a short run's tail does not read as overload);
    - queue growth: in the fluid model of a server of rate mu offered lambda > mu, the request arriving at t waits
      t (lambda/mu - 1); the mean TTFT of the last quarter of arrivals minus that of the first quarter is then
      0.75 A (lambda/mu - 1), so share = 1 / (1 + growth / (0.75 A)).

    None for fewer than 20 requests."""
    if len(records) < 20:
        return None
    import numpy as np

    recs = sorted(records, key=lambda r: r.arrival_s)
    first = recs[0].arrival_s
    arrivals = recs[-1].arrival_s - first
    if arrivals <= 0:
        return None
    makespan = max(r.finish_s for r in recs) - first
    busy = makespan - float(np.median([r.e2e_s for r in recs]))
    by_makespan = min(1.0, arrivals / max(busy, arrivals))
    q = len(recs) // 4
    growth = float(np.mean([r.ttft_s for r in recs[-q:]]) - np.mean([r.ttft_s for r in recs[:q]]))
    by_queue = 1.0 / (1.0 + max(0.0, growth) / (0.75 * arrivals))
    return min(by_makespan, by_queue)


def memory_breakdown(gpu_bytes: int, kv_tokens: int, mem_frac: float | None, sizing: Any) -> dict[str, Any]:
    """GPU memory per rank in bytes: weights, KV pool, activations/CUDA graphs (the 1 - mem_fraction_static
    share SGLang leaves free) and the rest (CUDA context, load overhead, rounding). Empty when the KV pool was
    given with --max-total-tokens (no sizing to break down)."""
    if sizing is None or mem_frac is None:
        return {}
    weights = int(sizing.weight_bytes_per_rank)
    kv = int(sizing.kv_pool_bytes if kv_tokens == sizing.max_total_num_tokens  # hybrid SWA pools: both parts
             else kv_tokens * sizing.cell_bytes_per_token)
    activations = int(gpu_bytes * (1.0 - mem_frac))
    return {"gpu_bytes": gpu_bytes, "weights_bytes": weights, "kv_pool_bytes": kv,
            "activations_bytes": activations, "other_bytes": max(0, gpu_bytes - weights - kv - activations)}
