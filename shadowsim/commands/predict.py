"""Simulate one SGLang server on a workload and predict TTFT, TPOT, ITL, e2e latency and throughput.

The server is modelled as SGLang schedules it (prefill-first batches, chunked prefill, RadixAttention prefix
cache with LRU eviction, new_token_ratio admission, retraction, overlap scheduling, decode CUDA-graph padding);
GPU step times come from the measured per-op tables (H100/H200/A100/B200/B300/L40S) or a roofline model.

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
num_retractions, steps, sim_time_s, wall_time_s, offered_rps, num_rejected_context, warnings, the resolved
server configuration under "server" and the GPU memory breakdown under "memory" (bytes per GPU). With --replicas
N: "replicas", "replica_seeds" and "intervals_p5_p95" ({figure: {p5, p50, p95}} over the N runs, e.g.
ttft_p90_ms, throughput_rps); with --model-error: "model_error_band".

Warnings (stderr, and "warnings" in JSON): the server serves < 90 % of the offered load (the queue grows
without bound), trace prompts at or beyond the context length (left out: SGLang refuses them), skipped trace
lines (the first three, then one line with the count).

SLO report: with --slo-ttft-ms and/or --slo-tpot-ms the summary gains "slo": the fraction of requests meeting
each objective (ttft_ok, tpot_ok), both (both_ok), and goodput_rps (requests/s meeting both). To compare many
configurations at once, use `shadowsim sweep`.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from shadowsim.commands._workload_args import TRACE_FORMATS, add_point_arguments
from simcore.errors import UserError

NAME = "predict"
HELP = "simulate an SGLang server on a workload and print TTFT/TPOT/throughput"
__all__ = ["NAME", "HELP", "TRACE_FORMATS", "add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_point_arguments(p)
    o = p.add_argument_group("output")
    o.add_argument("--out", default=None, metavar="FILE", help="per-request records: FILE.jsonl or FILE.csv")
    o.add_argument("--json", action="store_true", help="print the summary as JSON (on stdout)")
    o.add_argument("--model-error", default=None, metavar="VALIDATION.json",
                   help="attach the model's measured error: a saved `shadowsim validate --json`; every TTFT/TPOT/"
                        "throughput figure gets a band of +- the P90 absolute error validate measured for it")
    o.add_argument("--report", default=None, metavar="FILE.html",
                   help="also write a self-contained HTML report with plots (needs shadowsim[report])")
    o.add_argument("--quiet", "-q", action="store_true", help="no progress bar or warnings")


def run(args: argparse.Namespace) -> int:
    from shadowsim.api import predict_namespace

    check_outputs(args)
    validation = None
    if args.model_error:
        from shadowsim.api import Validation
        from shadowsim.commands.report import load_result

        validation = load_result(args.model_error)
        if not isinstance(validation, Validation):
            raise UserError("--model-error", f"{args.model_error} is not a `shadowsim validate --json` result",
                            "save one with shadowsim validate FILE.csv --json > v.json")
    bar = None
    if sys.stderr.isatty() and not args.quiet:
        from shadowsim.commands._workload_args import Progress

        bar = Progress(args.num_requests)
    try:
        pred = predict_namespace(args, replicas=args.replicas, keep_steps=bool(args.report), progress=bar)
    finally:
        if bar is not None:
            bar.close()
    if validation is not None:
        pred.with_model_error(validation)
    if not args.quiet:
        for w in pred.warnings:
            print(f"shadowsim: warning: {w}", file=sys.stderr)
    if args.out:
        _write_records(args.out, pred.records)
    if args.report:
        from shadowsim.html_report import write_report

        write_report([pred], Path(args.report))
    summary = {**pred.summary, "memory": pred.memory}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_table(summary)
    return 0


def check_outputs(args: argparse.Namespace) -> None:
    """Output paths are checked before simulating (a typo should not cost a long run)."""
    for flag, path, suffixes in (("--out", args.out, (".jsonl", ".json", ".csv")),
                                 ("--report", getattr(args, "report", None), (".html", ".htm"))):
        if path is None:
            continue
        p = Path(path)
        if p.suffix not in suffixes:
            raise UserError(flag, f"unknown extension {p.suffix!r}", f"use FILE{' or FILE'.join(suffixes)}")
        if not p.parent.is_dir():
            raise UserError(flag, f"no such directory: {p.parent}", "create it or give another path")


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
          f"rules, policy {srv['schedule_policy']}, KV pool {srv['max_total_num_tokens']:,} tokens"
          + (f" on each of {srv['dp_attention_ranks']} DP-attention ranks" if srv.get("dp_attention_ranks", 1) > 1
             else ""))
    print(f"requests        {s['num_requests']:>10}   retractions {s['num_retractions']}   "
          f"aborted {s['num_aborted']}")
    print(f"throughput      {s['throughput_rps']:>10.3f} req/s   {s['output_tokens_per_s']:,.0f} output tok/s")
    print(f"cache hit rate  {100 * s['cache_hit_rate']:>10.1f} %      KV peak usage {100 * s['kv_peak_usage']:.1f} %")
    print(f"{'(ms)':<12}{'mean':>12}{'p50':>12}{'p90':>12}{'p99':>12}")
    for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms"):
        v = s[k]
        cells = "".join(f"{'-' if v[q] is None else format(v[q], ',.1f'):>12}" for q in ("mean", "p50", "p90", "p99"))
        print(f"{k[:-3]:<12}{cells}")
    slo = s.get("slo")
    if slo is not None:
        goals = " and ".join(f"{k} <= {slo[f'{k}_slo_ms']:g} ms" for k in ("ttft", "tpot")
                             if slo[f"{k}_slo_ms"] is not None)
        parts = [f"{k} {100 * slo[f'{k}_ok']:.1f} %" for k in ("ttft", "tpot") if slo[f"{k}_ok"] is not None]
        print(f"SLO ({goals})  met: {', '.join(parts)}, both {100 * slo['both_ok']:.1f} %   "
              f"goodput {slo['goodput_rps']:.3f} req/s")
    iv = s.get("intervals_p5_p95")
    if iv:
        print(f"p5-p95 over {s['replicas']} replicas:")
        for k in ("throughput_rps", "ttft_p50_ms", "ttft_p90_ms", "tpot_p50_ms", "tpot_p90_ms", "e2e_p90_ms"):
            if k in iv:
                print(f"  {k:<16}{iv[k]['p5']:>12,.3f} .. {iv[k]['p95']:,.3f}")
    band = s.get("model_error_band")
    if band:
        print("model error band (+- P90 absolute error measured by validate):")
        for k in ("throughput_rps", "ttft_p90_ms", "tpot_p90_ms"):
            if k in band:
                print(f"  {k:<16}{band[k]['low']:>12,.3f} .. {band[k]['high']:,.3f}   (+- {band[k]['p90_ape_pct']:.1f} %,"
                      f" {band[k]['rows']} rows)")
    print(f"simulated {s['sim_time_s']:,.1f} s in {s['wall_time_s']:.2f} s wall ({s['steps']:,} steps)")
