"""Sweep server configurations and load levels offline: one simulation per point, a table, the Pareto front.

Takes every option of `shadowsim predict`; the axes below also take comma-separated lists, and the sweep runs
their cartesian product (in parallel processes, --jobs, all with the same --seed, so every point sees the same
requests and differences come from the configuration alone):

  --model  --gpu  --tp  --precision  --schedule-policy  --chunked-prefill-size  --max-running-requests
  --request-rate (open loop)  or  --concurrency (closed loop)

(A list that starts with a negative number needs "=": --chunked-prefill-size=-1,8192.)

Impossible points are skipped with the reason (weights do not fit the GPU at that TP, TP does not divide the
attention heads, a prompt larger than the KV pool, no per-op tables for --latency-backend table); unknown names
(model, GPU, precision) are errors before anything runs.

Per point: throughput (req/s, output tok/s), GPUs used (= tp), output tok/s per GPU, TTFT and TPOT p50/p90/p99
(ms), and with --slo-ttft-ms/--slo-tpot-ms the fraction of requests meeting both SLOs and goodput (req/s meeting
both). Pareto-optimal points (marked *) are chosen per load level (each --request-rate or --concurrency value
separately) among the points that meet the SLO (at least --slo-attainment of the requests meet both
objectives, default 0.9); they maximise --pareto-max (default output tok/s per GPU) and minimise every latency
named in --pareto (default ttft_p90_ms,tpot_p90_ms): no other feasible point of that load is at least as good
in all of them and better in one. With --replicas N every point carries p5-p95 intervals.

Examples:
  # which GPU and TP serve Llama-3.1-8B best at 1, 2, 4 req/s?
  shadowsim sweep --model meta-llama/Llama-3.1-8B-Instruct --gpu h100_sxm,h200_sxm,a100_sxm --tp 1,2 \\
      --request-rate 1,2,4 --num-requests 200 --input-len 2048 --output-len 256
  # scheduler settings under a closed loop, with an SLO report and a CSV of the points
  shadowsim sweep --model Qwen/Qwen3-32B --gpu h100_sxm --tp 2,4 --schedule-policy fcfs,lpm \\
      --chunked-prefill-size 4096,8192 --concurrency 16,64 --slo-ttft-ms 500 --slo-tpot-ms 50 --out points.csv
  # the largest request rate each configuration sustains with p90 TTFT <= 500 ms and p90 TPOT <= 50 ms
  shadowsim sweep --model Qwen/Qwen3-32B --gpu h100_sxm,h200_sxm --tp 2,4 --slo-ttft-ms 500 --slo-tpot-ms 50 \\
      --max-rate-under-slo --request-rate 0.5,32 --input-len 2048 --output-len 256

JSON (--json, on stdout): {"points": [{"id", axes..., figures with units: throughput_rps, ttft_p90_ms,
output_tokens_per_s_per_gpu, ...}], "pareto": [ids], "skipped": [{"point", "reason"}]}, plus
"max_rate_under_slo": [{"point", "max_rate_rps", "first_miss_rps", "evaluations"}] with --max-rate-under-slo.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable

from shadowsim.commands._workload_args import SWEEPABLE, add_point_arguments, check_slos, simulate_point
from simcore.analysis import max_rate_under_slo, pareto_front
from simcore.errors import UserError

NAME = "sweep"
HELP = "simulate the cartesian product of GPUs, TP sizes, server flags and loads; table and Pareto front"

CONFIG_AXES = ("model", "gpu", "tp", "precision", "schedule_policy", "chunked_prefill_size",
               "max_running_requests")
LOAD_AXES = ("request_rate", "concurrency")
LATENCIES = tuple(f"{m}_{q}_ms" for m in ("ttft", "tpot", "itl", "e2e") for q in ("p50", "p90", "p99", "mean"))
THROUGHPUTS = ("output_tokens_per_s_per_gpu", "throughput_rps_per_gpu", "goodput_rps_per_gpu")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_point_arguments(p, lists=frozenset(SWEEPABLE))
    s = p.add_argument_group("sweep")
    s.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1,
                   help="parallel simulation processes (default: the number of CPU cores)")
    s.add_argument("--pareto", default="ttft_p90_ms,tpot_p90_ms", metavar="LAT,...",
                   help="latencies to minimise on the Pareto front, from " + ", ".join(LATENCIES[:4])
                   + " ... e2e_mean_ms (default ttft_p90_ms,tpot_p90_ms)")
    s.add_argument("--slo-attainment", type=float, default=0.9, metavar="FRACTION",
                   help="a point meets the SLO when at least this fraction of its requests meet both objectives "
                        "(default 0.9); only such points can be Pareto-optimal")
    s.add_argument("--pareto-max", default="output_tokens_per_s_per_gpu", choices=THROUGHPUTS,
                   help="throughput to maximise on the Pareto front (goodput_rps_per_gpu needs an SLO)")
    s.add_argument("--max-rate-under-slo", action="store_true",
                   help="per configuration, bisect the open-loop request rate for the largest one whose p90 TTFT "
                        "and p90 TPOT meet the SLOs; --request-rate LO,HI gives the bracket (default 0.25,64)")
    s.add_argument("--rate-tolerance", type=float, default=0.05,
                   help="stop the rate search when the bracket is within this fraction (default 0.05)")
    o = p.add_argument_group("output")
    o.add_argument("--out", default=None, metavar="FILE.csv", help="write one row per point (and skipped ones)")
    o.add_argument("--json", action="store_true", help="print the result as JSON (on stdout)")
    o.add_argument("--report", default=None, metavar="FILE.html",
                   help="also write a self-contained HTML report with plots (needs shadowsim[report])")
    o.add_argument("--quiet", "-q", action="store_true", help="no progress line")


# ---- points --------------------------------------------------------------------------------------------------
def _axes(args: argparse.Namespace) -> dict[str, list[Any]]:
    """Each axis with its values (a one-value list for options given once or left at their default)."""
    axes: dict[str, list[Any]] = {}
    for dest in (*CONFIG_AXES, *LOAD_AXES):
        v = getattr(args, dest)
        axes[dest] = v if isinstance(v, list) else [v]
    return axes


def _validate(args: argparse.Namespace, axes: dict[str, list[Any]]) -> None:
    """Unknown names and contradictory options are errors before anything runs (typos are not 'skipped')."""
    from simcore.gpus import load_gpu
    from simcore.models import load_model
    from simcore.models.spec import normalize_precision

    for m in axes["model"]:
        load_model(m)
    for g in axes["gpu"]:
        load_gpu(g)
    for pr in axes["precision"]:
        if pr is not None:
            normalize_precision(pr)
    from simcore.settings import POLICIES

    for pol in axes["schedule_policy"]:
        if pol is not None and pol not in POLICIES:
            raise UserError("--schedule-policy", f"unknown policy {pol!r}", f"use {', '.join(POLICIES)}")
    if args.request_rate is not None and args.concurrency is not None:
        raise UserError("--concurrency", "sweep either --request-rate or --concurrency, not both",
                        "run two sweeps to compare open and closed loops")
    if not args.trace and args.request_rate is None and args.concurrency is None:
        raise UserError("workload", "no workload given", "use --request-rate R1,R2, --concurrency N1,N2 or --trace")
    if args.trace and (args.request_rate is not None or args.concurrency is not None):
        raise UserError("--trace", "a trace sets its own arrivals", "drop --request-rate/--concurrency")
    check_slos(args)
    from shadowsim.commands._workload_args import check_workload_flags

    probe = _namespace(args, {})
    check_workload_flags(probe)
    for axis in ("tp", "chunked_prefill_size", "max_running_requests", "concurrency"):
        for v in axes[axis]:
            if v is not None and v < 1 and not (axis == "chunked_prefill_size" and v == -1):
                raise UserError("--" + axis.replace("_", "-"), f"{v} is out of range", "give positive values")
    for v in axes["request_rate"]:
        if v is not None and not v > 0:
            raise UserError("--request-rate", f"must be > 0, got {v}", "give requests per second")
    if not 0 < args.slo_attainment <= 1:
        raise UserError("--slo-attainment", f"must be in (0, 1], got {args.slo_attainment}", "e.g. 0.9")
    if args.rate_tolerance <= 0:
        raise UserError("--rate-tolerance", f"must be > 0, got {args.rate_tolerance}", "e.g. 0.05")
    if args.jobs < 1:
        raise UserError("--jobs", f"must be >= 1, got {args.jobs}", "give the number of processes")
    if args.max_rate_under_slo:
        if args.slo_ttft_ms is None and args.slo_tpot_ms is None:
            raise UserError("--max-rate-under-slo", "needs an objective", "add --slo-ttft-ms and/or --slo-tpot-ms")
        if args.concurrency is not None or args.trace:
            raise UserError("--max-rate-under-slo", "searches open-loop rates", "use --request-rate LO,HI")
        rates = args.request_rate or [0.25, 64.0]
        if len(rates) > 2 or min(rates) <= 0:
            raise UserError("--request-rate", "give the search bracket as LO,HI (req/s, > 0)",
                            "e.g. --request-rate 0.5,32")
    if args.pareto_max == "goodput_rps_per_gpu" and args.slo_ttft_ms is None and args.slo_tpot_ms is None:
        raise UserError("--pareto-max", "goodput needs an SLO", "add --slo-ttft-ms and/or --slo-tpot-ms")


def _pareto_keys(text: str) -> list[str]:
    keys = [k.strip() for k in text.split(",") if k.strip()]
    keys = [k if k.endswith("_ms") else f"{k}_ms" for k in keys]  # the old unit-less spelling still works
    bad = [k for k in keys if k not in LATENCIES]
    if bad or not keys:
        raise UserError("--pareto", f"unknown latency {', '.join(bad) or '(none)'}",
                        f"use names like ttft_p90_ms,tpot_p99_ms (from {', '.join(LATENCIES)})")
    return keys


def _points(axes: dict[str, list[Any]], names: tuple[str, ...]) -> list[dict[str, Any]]:
    """The cartesian product over ``names`` in axis order; the last axis varies fastest."""
    return [dict(zip(names, combo)) for combo in itertools.product(*(axes[n] for n in names))]


def _namespace(args: argparse.Namespace, point: dict[str, Any]) -> argparse.Namespace:
    ns = argparse.Namespace(**vars(args))
    for k, v in point.items():
        setattr(ns, k, v)
    for dest in (*CONFIG_AXES, *LOAD_AXES):  # axes not in the point keep their single value
        v = getattr(ns, dest)
        if isinstance(v, list):
            setattr(ns, dest, v[0])
    ns._module = None  # modules and parsers do not pickle; workers need only the values
    ns._parser = None
    return ns


def _metrics(summary: dict[str, Any]) -> dict[str, Any]:
    """The flat per-point figures of the table, the JSON and the CSV."""
    srv = summary["server"]
    gpus = int(srv["tp"])
    row: dict[str, Any] = {
        "num_gpus": gpus, "num_requests": summary["num_requests"],
        "throughput_rps": summary["throughput_rps"], "output_tokens_per_s": summary["output_tokens_per_s"],
        "throughput_rps_per_gpu": summary["throughput_rps"] / gpus,
        "output_tokens_per_s_per_gpu": summary["output_tokens_per_s"] / gpus,
        "offered_rps": summary.get("offered_rps"),
    }
    for m in ("ttft", "tpot", "itl", "e2e"):
        for q in ("p50", "p90", "p99", "mean"):
            row[f"{m}_{q}_ms"] = summary[f"{m}_ms"][q]
    row.update(cache_hit_rate=summary["cache_hit_rate"], kv_peak_usage=summary["kv_peak_usage"],
               num_retractions=summary["num_retractions"], kv_pool_tokens=srv["max_total_num_tokens"],
               resolved_chunked_prefill_size_tokens=srv["chunked_prefill_size"],
               resolved_max_running_requests_num=srv["max_running_requests"], precision_used=srv["precision"],
               latency_model=srv["latency_model"])
    slo = summary.get("slo")
    if slo is not None:
        row.update(slo_ttft_ok=slo["ttft_ok"], slo_tpot_ok=slo["tpot_ok"], slo_both_ok=slo["both_ok"],
                   goodput_rps=slo["goodput_rps"], goodput_rps_per_gpu=slo["goodput_rps"] / gpus)
    if summary.get("intervals_p5_p95"):
        row["replicas"] = summary["replicas"]
        row["intervals_p5_p95"] = summary["intervals_p5_p95"]
    row["warnings"] = summary.get("warnings", [])
    return row


def run_point(ns: argparse.Namespace) -> dict[str, Any]:
    """Worker: simulate one point; {"metrics": {...}} or {"reason": "..."} for an impossible one."""
    from shadowsim.api import predict_namespace

    try:
        pred = predict_namespace(ns, replicas=getattr(ns, "replicas", 1))
        return {"metrics": {**_metrics(pred.summary), "memory": pred.memory}}
    except UserError as exc:
        return {"reason": skip_reason(exc)}


def skip_reason(exc: UserError) -> str:
    """'does not fit: ...' for memory problems, 'unsupported: ...' for the rest, then the one-line error."""
    fits = exc.field in ("mem_fraction_static", "--max-total-tokens", "--input-len")
    return f"{'does not fit' if fits else 'unsupported'}: {exc}"


def search_point(ns: argparse.Namespace, lo: float, hi: float, rel_tol: float) -> dict[str, Any]:
    """Worker: bisect the request rate of one configuration against the p90 SLOs."""
    def meets(rate: float) -> bool:
        ns.request_rate = rate
        m = _metrics(simulate_point(ns, warn=False).summary)
        ok_ttft = ns.slo_ttft_ms is None or (m["ttft_p90_ms"] is not None and m["ttft_p90_ms"] <= ns.slo_ttft_ms)
        ok_tpot = ns.slo_tpot_ms is None or m["tpot_p90_ms"] is None or m["tpot_p90_ms"] <= ns.slo_tpot_ms
        return ok_ttft and ok_tpot

    try:
        return max_rate_under_slo(meets, lo, hi, rel_tol=rel_tol).to_dict()
    except UserError as exc:
        return {"reason": skip_reason(exc)}


def _map(fn: Callable[..., dict[str, Any]], jobs: list[tuple[Any, ...]], n_proc: int,
         tick: Callable[[int, int], None]) -> list[dict[str, Any]]:
    """``fn(*job)`` for every job, in order; in ``n_proc`` processes when that helps."""
    out: list[dict[str, Any] | None] = [None] * len(jobs)
    if n_proc <= 1 or len(jobs) <= 1:
        for i, job in enumerate(jobs):
            out[i] = fn(*job)
            tick(i + 1, len(jobs))
        return [o for o in out if o is not None]
    # spawn, not fork: a forked child of a process with threads (a test run, an embedding service) can inherit a
    # lock held by another thread and hang; fresh interpreters cost ~0.5 s each, once per sweep
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(n_proc, len(jobs)), mp_context=ctx) as pool:
        futs: dict[Future[dict[str, Any]], int] = {pool.submit(fn, *job): i for i, job in enumerate(jobs)}
        for done, fut in enumerate(as_completed(futs), 1):
            out[futs[fut]] = fut.result()
            tick(done, len(jobs))
    return [o for o in out if o is not None]


# ---- run -----------------------------------------------------------------------------------------------------
def compute(args: argparse.Namespace, tick: Callable[[int, int], None]) -> dict[str, Any]:
    """Check the options, simulate every point (or search every configuration) and return the JSON result."""
    axes = _axes(args)
    _validate(args, axes)
    keys = _pareto_keys(args.pareto)
    t0 = time.perf_counter()
    if args.trace:  # read once here so a bad line is reported once, not once per point
        from shadowsim.commands._workload_args import workload_from_args

        workload_from_args(_namespace(args, {}), warn=not getattr(args, "quiet", False))
    if args.max_rate_under_slo:
        result = _run_search(args, axes, [], tick)
    else:
        result = _run_grid(args, axes, keys, tick)
    result["wall_time_s"] = time.perf_counter() - t0
    return result


def run(args: argparse.Namespace) -> int:
    from shadowsim.api import sweep_namespace

    axes = _axes(args)
    for flag, path, suffix in (("--out", args.out, ".csv"), ("--report", args.report, ".html")):
        if path and Path(path).suffix != suffix:
            raise UserError(flag, f"unknown extension {Path(path).suffix!r}", f"use FILE{suffix}")
        if path and not Path(path).resolve().parent.is_dir():
            raise UserError(flag, f"no such directory: {Path(path).parent}", "create it or give another path")
    varying = [a for a in (*CONFIG_AXES, *LOAD_AXES) if len(axes[a]) > 1]
    bar = None
    if sys.stderr.isatty() and not args.quiet:
        from tqdm import tqdm

        bar = tqdm(unit="point", desc="sweep", file=sys.stderr, leave=False, dynamic_ncols=True)

    def tick(done: int, total: int) -> None:
        if bar is not None:
            bar.total = total
            bar.update(done - bar.n)

    try:
        res = sweep_namespace(args, tick)
    finally:
        if bar is not None:
            bar.close()
    result = res.raw
    if not args.quiet:
        _warn_points(result)
    if args.out:
        _write_csv(args.out, result)
    if args.report:
        from shadowsim.html_report import write_report

        write_report([res], Path(args.report))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result, varying, _pareto_keys(args.pareto), args)
    return 0 if (result["points"] or result.get("max_rate_under_slo")) else 1


def _warn_points(result: dict[str, Any]) -> None:
    """One warning line per kind over all points, with the point ids (not one per point)."""
    kinds: dict[str, list[int]] = {}
    for r in result["points"]:
        for w in r.get("warnings", []):
            kinds.setdefault(w.split(":")[0] if "serves" not in w else "overloaded", []).append(r["id"])
    for kind, ids in kinds.items():
        if kind == "overloaded":
            print(f"shadowsim: warning: {len(ids)} point(s) serve < 90 % of the offered load (ids "
                  f"{', '.join(map(str, ids[:12]))}{' ...' if len(ids) > 12 else ''}): their latencies grow "
                  "with the run length", file=sys.stderr)
        else:
            print(f"shadowsim: warning: {kind} ({len(ids)} point(s))", file=sys.stderr)


def _run_grid(args: argparse.Namespace, axes: dict[str, list[Any]], keys: list[str],
              tick: Callable[[int, int], None]) -> dict[str, Any]:
    load = tuple(a for a in LOAD_AXES if axes[a] != [None])
    names = (*CONFIG_AXES, *load)
    points = _points(axes, names)
    outs = _map(run_point, [(_namespace(args, p),) for p in points], args.jobs, tick)
    rows, skipped = [], []
    for i, (p, o) in enumerate(zip(points, outs)):
        if "reason" in o:
            skipped.append({"point": {"id": i, **p}, "reason": o["reason"]})
        else:
            rows.append({"id": i, **p, **o["metrics"]})
    slo_given = args.slo_ttft_ms is not None or args.slo_tpot_ms is not None
    front_ids: list[int] = []
    groups: dict[Any, list[dict[str, Any]]] = {}
    for r in rows:  # one front per load level: a lighter load is not a better configuration
        groups.setdefault(tuple(r.get(a) for a in load), []).append(r)
    for group in groups.values():
        for r in group:
            r["slo_feasible"] = (not slo_given) or (r.get("slo_both_ok") is not None
                                                    and r["slo_both_ok"] >= args.slo_attainment)
        cand = [r for r in group if r["slo_feasible"]]
        front = pareto_front([[r[args.pareto_max], *(r[k] for k in keys)] for r in cand],
                             [True] + [False] * len(keys))
        front_ids += [cand[j]["id"] for j in front]
    for r in rows:
        r["pareto"] = r["id"] in front_ids
    return {"objectives": {"maximize": [args.pareto_max], "minimize": keys, "per_load_axis": list(load),
                           "slo_attainment": args.slo_attainment if slo_given else None},
            "slo_ms": {"ttft": args.slo_ttft_ms, "tpot": args.slo_tpot_ms},
            "points": rows, "pareto": sorted(front_ids), "skipped": skipped}


def _run_search(args: argparse.Namespace, axes: dict[str, list[Any]], varying: list[str],
                tick: Callable[[int, int], None]) -> dict[str, Any]:
    rates = args.request_rate or [0.25, 64.0]
    lo, hi = min(rates), max(rates)
    configs = _points(axes, CONFIG_AXES)
    jobs = [(_namespace(args, {**c, "request_rate": lo}), lo, hi, args.rate_tolerance) for c in configs]
    outs = _map(search_point, jobs, args.jobs, tick)
    found, skipped = [], []
    for i, (c, o) in enumerate(zip(configs, outs)):
        if "reason" in o:
            skipped.append({"point": {"id": i, **c}, "reason": o["reason"]})
        else:
            gpus = int(c["tp"])
            found.append({"point": {"id": i, **c}, "max_rate_rps": o["rate"], "first_miss_rps": o["upper"],
                          "max_rate_rps_per_gpu": None if o["rate"] is None else o["rate"] / gpus,
                          "evaluations_rps": o["evaluations"]})
    return {"bracket_rps": [lo, hi], "slo": {"ttft_p90_ms": args.slo_ttft_ms, "tpot_p90_ms": args.slo_tpot_ms},
            "points": [], "pareto": [], "skipped": skipped, "max_rate_under_slo": found}


# ---- output --------------------------------------------------------------------------------------------------
def _fmt(v: Any, spec: str = ",.1f") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return format(v, spec)
    return str(v)


def _print(result: dict[str, Any], varying: list[str], keys: list[str], args: argparse.Namespace) -> None:
    short = {"model": "model", "gpu": "gpu", "tp": "tp", "precision": "prec", "schedule_policy": "policy",
             "chunked_prefill_size": "chunk", "max_running_requests": "max_run", "request_rate": "rate",
             "concurrency": "conc"}
    shown = ["gpu", "tp"] + [a for a in varying if a not in ("gpu", "tp")]
    if "max_rate_under_slo" in result:
        shown = [a for a in shown if a not in LOAD_AXES]
        goals = ", ".join(f"p90 {k} <= {v:g} ms" for k, v in (("TTFT", args.slo_ttft_ms), ("TPOT", args.slo_tpot_ms))
                          if v is not None)
        lo, hi = result["bracket_rps"]
        print(f"max request rate with {goals} (searched {lo:g}-{hi:g} req/s)")
        head = [short[a] for a in shown] + ["max req/s", "req/s/GPU", "first miss", "sims"]
        body = [[_fmt(f["point"][a]) for a in shown]
                + [_fmt(f["max_rate_rps"], ".3f") if f["max_rate_rps"] is not None else "none",
                   _fmt(f["max_rate_rps_per_gpu"], ".3f"),
                   (f">{hi:g}" if f["first_miss_rps"] is None else _fmt(f["first_miss_rps"], ".3f")),
                   str(len(f["evaluations_rps"]))]
                for f in result["max_rate_under_slo"]]
        _table(head, body)
    else:
        slo = any("slo_both_ok" in r for r in result["points"])
        head = ["id"] + [short[a] for a in shown] + ["req/s", "tok/s", "tok/s/GPU", "TTFT p50", "p90", "p99",
                                                    "TPOT p50", "p90", "p99"]
        head += ["SLO ok%", "goodput"] if slo else []
        ivs = any(r.get("intervals_p5_p95") for r in result["points"])
        head += ["TTFT p90 p5-p95", "TPOT p90 p5-p95"] if ivs else []
        head += ["pareto"]
        body = []
        for r in result["points"]:
            cells = [str(r["id"])] + [_fmt(r[a]) for a in shown]
            cells += [_fmt(r["throughput_rps"], ".2f"), _fmt(r["output_tokens_per_s"], ",.0f"),
                      _fmt(r["output_tokens_per_s_per_gpu"], ",.0f")]
            cells += [_fmt(r[f"{m}_{q}_ms"]) for m in ("ttft", "tpot") for q in ("p50", "p90", "p99")]
            if slo:
                cells += [_fmt(100 * r["slo_both_ok"]), _fmt(r["goodput_rps"], ".2f")]
            if ivs:
                iv = r.get("intervals_p5_p95") or {}
                cells += [f"{iv[k]['p5']:,.1f}-{iv[k]['p95']:,.1f}" if k in iv else "-"
                          for k in ("ttft_p90_ms", "tpot_p90_ms")]
            cells += ["*" if r["pareto"] else ""]
            body.append(cells)
        _table(head, body)
        obj = result["objectives"]
        per = f" per {', '.join(obj['per_load_axis'])}" if obj.get("per_load_axis") else ""
        among = (f", among points where >= {100 * obj['slo_attainment']:g} % of requests meet the SLO"
                 if obj.get("slo_attainment") else "")
        print(f"pareto (*){per}: max {obj['maximize'][0]}, min {', '.join(obj['minimize'])}{among}")
        if ivs:
            print("p5-p95: over the replicas of each point (--replicas, seeds seed..seed+N-1)")
    for s in result["skipped"]:
        p = s["point"]
        where = " ".join(f"{short[a]}={p[a]}" for a in shown if a in p)
        print(f"skipped {p['id']} ({where}): {s['reason']}")
    print(f"{len(result['points']) + len(result.get('max_rate_under_slo', []))} simulated, "
          f"{len(result['skipped'])} skipped, {result['wall_time_s']:.1f} s wall")


def _table(head: list[str], body: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(head)]
    print("  ".join(h.rjust(w) for h, w in zip(head, widths)))
    for r in body:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))


def _write_csv(path: str, result: dict[str, Any]) -> None:
    rows: list[dict[str, Any]] = [dict({k: v for k, v in r.items()
                                        if k not in ("intervals_p5_p95", "warnings", "memory")},
                                       skipped_reason="") for r in result["points"]]
    rows += [dict(s["point"], skipped_reason=s["reason"]) for s in result["skipped"]]
    for f in result.get("max_rate_under_slo", []):
        rows.append(dict(f["point"], max_rate_rps=f["max_rate_rps"], first_miss_rps=f["first_miss_rps"],
                         max_rate_rps_per_gpu=f["max_rate_rps_per_gpu"], skipped_reason=""))
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    try:
        with Path(path).open("w", newline="") as fh:
            wr = csv.DictWriter(fh, fieldnames=cols)
            wr.writeheader()
            wr.writerows(sorted(rows, key=lambda r: r["id"]))
    except OSError as exc:
        raise UserError("--out", f"cannot write {path}: {exc.strerror}", "check the directory exists") from None
