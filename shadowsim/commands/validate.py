"""Compare shadowsim's predictions with a file of real benchmark measurements.

Each row of MEASUREMENTS.csv describes one bench_serving run (columns: id, model, gpu, precision, tp, ep,
dp_attention, isl, osl, concurrency, request_rate, num_requests, sglang_version, measured_ttft_ms,
measured_tpot_ms, measured_throughput_rps; blanks allowed; optional columns: max_total_tokens pins the KV pool
to what the server reported, warmup_requests sets the total warm-up requests, length_dist chooses exact isl/osl
lengths (fixed) or a spread with those means (exponential, sharegpt), unsupported gives a reason to skip).
shadowsim simulates the same benchmark and prints, per row, predicted vs measured mean TTFT, mean TPOT and
throughput, then MAPE, median and P90 absolute percentage error (percent).

Protocol (aiconfigurator's generated aiperf benchmark; docs/accuracy.md §3.1): with `concurrency` and no
`request_rate`, a closed loop of `concurrency` clients sending back-to-back requests of isl/osl tokens (random
content, ignore_eos) to the chat endpoint, whose template adds a few prompt tokens; 2 × concurrency warm-up
requests are simulated and left out, then 20 × concurrency requests (or num_requests) are measured. Otherwise
Poisson arrivals at request_rate. Mean TTFT, mean per-request TPOT, throughput over the measured requests.
Rows that cannot be simulated (unknown model or GPU, DP attention) are listed as skipped
with the reason; they never stop the run. See docs/accuracy.md.

Examples:
  shadowsim validate ../shared/data/validation/sglang_qwen3_32b_h100.csv
  shadowsim validate validation/gpustack_sglang.csv
  shadowsim validate validation/gpustack_sglang.csv --length-dist exponential
  shadowsim validate measurements.csv --json > report.json
  shadowsim validate measurements.csv --out rows.csv --profile my_profile.json
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

from simcore.errors import UserError

NAME = "validate"
HELP = "compare predictions with a file of real benchmark measurements"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("measurements", metavar="MEASUREMENTS.csv", help="measurement file (format above)")
    parser.add_argument("--json", action="store_true",
                        help='print {"rows", "summary", "skipped"} as JSON instead of tables (errors in percent)')
    parser.add_argument("--out", metavar="ROWS.csv", default=None,
                        help="also write one CSV line per simulated row: predicted, measured, error")
    parser.add_argument("--profile", metavar="PROFILE.json", default=None,
                        help="calibration profile from `shadowsim calibrate` (default: the shipped one)")
    parser.add_argument("--latency-backend", default="auto", choices=("auto", "table", "roofline"),
                        help="auto = measured per-op tables when the GPU has them, else roofline")
    parser.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    parser.add_argument("--requests-per-client", type=int, default=None, metavar="N",
                        help="closed loop: measured requests per client when a row has no num_requests "
                             "(default 20, aiperf --num-requests C×20)")
    parser.add_argument("--warmup-per-client", type=int, default=None, metavar="N",
                        help="closed loop: warm-up requests per client, simulated but not measured "
                             "(default 2, aiperf --warmup-request-count C×2; 0 = none)")
    parser.add_argument("--prompt-overhead-tokens", type=int, default=None, metavar="N",
                        help="tokens the server adds to every isl-token prompt (default 8: a ChatML chat "
                             "template around one user turn; 0 for /generate with token ids)")
    parser.add_argument("--length-dist", default=None, choices=("fixed", "sharegpt", "exponential"),
                        help="override every row's length_dist column: fixed = exactly isl/osl tokens; "
                             "exponential = exponential spread with those means (max entropy given only the means); "
                             "sharegpt = the spread of a ShareGPT-derived stream (default: each row's column, "
                             "else fixed; docs/accuracy.md 3.5)")
    parser.add_argument("--output-path-us-per-step", type=float, default=0.0, metavar="US",
                        help="host output path (detokenizer → tokenizer manager → SSE) as a serial stage: "
                             "cost per step that emits tokens, µs (default 0 = not modelled; docs/accuracy.md §3.6)")
    parser.add_argument("--output-path-us-per-token", type=float, default=0.0, metavar="US",
                        help="... and per emitted token, µs (default 0; sources bound it to ≤ ~70–100 µs)")
    parser.add_argument("--tokenizer-us-per-request", type=float, default=0.0, metavar="US",
                        help="serial tokenizer in front of the scheduler: µs per arriving request (default 0)")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")



def read_rows(path: str | Path) -> list[Any]:
    """Read a measurement CSV into `simcore.perf.validation.Row`s (the file I/O stays out of simcore)."""
    from simcore.perf.validation import rows_from_records

    p = Path(path)
    try:
        with p.open(newline="") as fh:
            reader = csv.DictReader(fh)
            return rows_from_records(reader, reader.fieldnames or [], str(p))
    except FileNotFoundError:
        raise UserError("MEASUREMENTS", f"no such file: {p}", "give a CSV in the validation format") from None
    except IsADirectoryError:
        raise UserError("MEASUREMENTS", f"{p} is a directory", "give one CSV file") from None


def _fmt(v: Any, nd: int = 1) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def run(args: argparse.Namespace) -> int:
    from simcore.perf.profile import CalibrationProfile
    from simcore.perf.validation import Protocol, validate

    defaults = Protocol()
    protocol = Protocol(
        requests_per_client=defaults.requests_per_client if args.requests_per_client is None
        else args.requests_per_client,
        warmup_per_client=defaults.warmup_per_client if args.warmup_per_client is None else args.warmup_per_client,
        prompt_overhead_tokens=defaults.prompt_overhead_tokens if args.prompt_overhead_tokens is None
        else args.prompt_overhead_tokens,
        length_dist=args.length_dist, output_path_s_per_step=args.output_path_us_per_step * 1e-6,
        output_path_s_per_token=args.output_path_us_per_token * 1e-6,
        tokenizer_s_per_request=args.tokenizer_us_per_request * 1e-6)
    rows = read_rows(args.measurements)
    profile = CalibrationProfile.load(args.profile) if args.profile else None

    def progress(i: int, n: int, row: Any) -> None:
        if not args.quiet:
            print(f"[{i + 1}/{n}] {row.id}", file=sys.stderr, flush=True)

    out = validate(rows, profile=profile, backend=args.latency_backend, seed=args.seed, protocol=protocol,
                   progress=progress)
    out.pop("_results", None)
    if args.out:
        _write_rows(args.out, out["rows"])
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    _print_tables(out)
    return 0


def _write_rows(path: str, rows: list[dict[str, Any]]) -> None:
    try:
        with open(path, "w", newline="") as fh:
            if not rows:
                fh.write("")
                return
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    except OSError as exc:
        raise UserError("--out", f"cannot write {path}: {exc.strerror or exc}") from None


def _print_tables(out: dict[str, Any]) -> None:
    head = (f"{'id':<40} {'tp':>2} {'isl':>5} {'osl':>4} {'conc':>4} | {'TTFT ms pred':>12} {'meas':>9} {'err%':>6} |"
            f" {'TPOT ms pred':>12} {'meas':>7} {'err%':>6} | {'req/s pred':>10} {'meas':>7} {'err%':>6}")
    print(head)
    print("-" * len(head))
    for r in out["rows"]:
        print(f"{str(r['id'])[-40:]:<40} {r['tp']:>2} {r['isl']:>5} {r['osl']:>4} {_fmt(r['concurrency'], 0):>4} |"
              f" {_fmt(r['predicted_ttft_ms']):>12} {_fmt(r['measured_ttft_ms']):>9} {_fmt(r['ttft_ape_pct']):>6} |"
              f" {_fmt(r['predicted_tpot_ms'], 2):>12} {_fmt(r['measured_tpot_ms'], 2):>7} {_fmt(r['tpot_ape_pct']):>6} |"
              f" {_fmt(r['predicted_throughput_rps'], 3):>10} {_fmt(r['measured_throughput_rps'], 3):>7}"
              f" {_fmt(r['throughput_ape_pct']):>6}")
    print()
    print(f"{'metric':<11} {'n':>3} {'MAPE %':>8} {'median %':>9} {'P90 %':>7}")
    for m, s in out["summary"].items():
        print(f"{m:<11} {s['n']:>3} {_fmt(s['mape']):>8} {_fmt(s['median_ape']):>9} {_fmt(s['p90_ape']):>7}")
    if out["skipped"]:
        print(f"\nskipped {len(out['skipped'])} row(s):")
        for s in out["skipped"]:
            print(f"  {s['id']}: {s['reason']}")
