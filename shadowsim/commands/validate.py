"""Compare shadowsim's predictions with a file of real benchmark measurements.

Each row of MEASUREMENTS.csv describes one benchmark run (columns: id, model, gpu, precision, tp, ep,
dp_attention, isl, osl, concurrency, request_rate, num_requests, sglang_version, measured_ttft_ms,
measured_tpot_ms, measured_throughput_rps; blanks allowed; optional columns: server_args = the real server's
SGLang launch flags as typed, parsed with the same flag table as `shadowsim predict` (blank: SGLang's defaults,
and the row says so); client = aiperf | bench_serving | poisson; random_range_ratio and seed for bench_serving;
max_total_tokens pins the KV pool to what the server reported; warmup_requests sets the total warm-up requests;
length_dist chooses exact isl/osl lengths (fixed) or a spread with those means (exponential, sharegpt);
unsupported gives a reason to skip; measured_ttft_p50_ms, measured_itl_p50_ms, measured_output_tokens_per_s
and measured_e2e_ms are the medians, output rate and mean e2e of a bench_serving printout, compared where given). shadowsim simulates the same server and benchmark and prints, per row,
predicted vs measured mean TTFT (and its p10/p50/p90), TPOT, e2e and throughput, the lockstep index (how much
the simulated clients move in waves; warned at >= 0.5), then MAPE, median and P90 absolute percentage error.

Clients (docs/accuracy.md §3.1): aiperf (default with `concurrency` and no `request_rate`): a closed loop of
`concurrency` clients sending back-to-back requests of isl/osl tokens (random content, ignore_eos) to the chat
endpoint, whose template adds a few prompt tokens; 2 × concurrency warm-up requests, then, once every warm-up
response is back (aiperf's phase barrier), 20 × concurrency measured requests (or num_requests) from clients that
all start together. bench_serving: SGLang's random dataset with the version's length rules and
--random-range-ratio, Poisson at request_rate (or all at once, with concurrency as --max-concurrency). poisson
(default with a request_rate): Poisson arrivals with the row's length_dist. Rows that cannot be simulated
(unknown model or GPU, no workload, an `unsupported` reason in the file) are listed as skipped with the reason;
they never stop the run (DP-attention rows are simulated: simcore/dp_attention.py). A measured row whose recorded
flags leave no KV cache at SGLang's default --mem-fraction-static is simulated at --no-kv-mem-fraction (0.95) and
printed under "assumption:" (docs/accuracy.md §3.10); --no-kv-mem-fraction off skips it. A bad server_args flag is a
one-line error naming the row and the flag. See docs/accuracy.md §3.1, §3.8.

Known deployments (docs/accuracy.md §3.15): by default (--deployment as-deployed) a row that
shadowsim/known_deployments.py recognises as a public benchmark run (InferenceX's DeepSeek-R1 SGLang configurations
on B200 and B300: the record id, GPU, precision, SGLang version and a point of the configuration's search space) and
whose server_args are blank or aiconfigurator's reconstruction (--enable-mixed-chunk --max-prefill-tokens isl+1500)
is simulated as that deployment ran: its launch script's flags, tp/ep (a tp column of tp x ep is read as tp), its
client (bench_serving, range ratio 0.8, 10 x C prompts, 2 x C warm-up), the B300 runs' client-tokenizer inflation and
the B200 server's tokenizer cost. A run filed under two ids is simulated as one. Each such row names the deployment
(config, repo@commit script) in its assumptions, and the table prints one summary line; a row with other recorded
flags is simulated as recorded. --deployment recorded simulates every row with the file's own flags.

Examples:
  shadowsim validate ../shared/data/validation/sglang_qwen3_32b_h100.csv
  shadowsim validate ../shared/data/validation/sglang_deepseek_b200_b300.csv --only tp=8 --only ep=1 --only precision=fp8
  shadowsim validate ../shared/data/validation/sglang_deepseek_b200_b300.csv --deployment recorded
  shadowsim validate ../shared/data/validation/sglang_deepseek_b200_b300.csv --deployment defaults
  shadowsim validate measurements.csv --server-args "--enable-mixed-chunk --max-prefill-tokens {isl+1500}"
  shadowsim validate measurements.csv --variability measured --replicas 5
  shadowsim validate validation/gpustack_sglang.csv --length-dist exponential
  shadowsim validate validation/datacrunch_h200_sglang.csv
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
    parser.add_argument("--tokenizer-us-per-token", type=float, default=None, metavar="US",
                        help="... and µs per prompt token it encodes, for every row (default: each row's "
                             "server_tokenize_us_per_token column, else 0; 0 turns it off; DeepSeek's tokenizer on "
                             "InferenceX's random text: 6-7 µs, docs/accuracy.md §3.14)")
    parser.add_argument("--client", default=None, choices=("aiperf", "bench_serving", "poisson"),
                        help="override every row's client column: aiperf = closed loop, warm-up barrier (default "
                             "for rows with concurrency); bench_serving = SGLang bench_serving random dataset "
                             "(version's length rules, --random-range-ratio, seed, Poisson); poisson = Poisson "
                             "arrivals with length_dist lengths (default for rows with a request_rate)")
    parser.add_argument("--no-warmup-barrier", action="store_true",
                        help="aiperf: start measuring right after the warm-up requests were sent, without waiting "
                             "for their responses (one continuous loop; the old protocol)")
    parser.add_argument("--server-args", default=None, metavar="FLAGS",
                        help="SGLang launch flags for rows without a server_args column, e.g. "
                             "'--enable-mixed-chunk --max-prefill-tokens {isl+1500}' ({isl}, {osl}, {isl+N} are the row's numbers), or 'aiconfigurator': the flags "
                             "aiconfigurator's deployment generator wrote by the row's version (none before "
                             "0.5.6; --max-prefill-tokens isl+1500; --enable-mixed-chunk too from 0.5.8; "
                             "docs/accuracy.md 3.1) (default: SGLang's defaults)")
    parser.add_argument("--deployment", default="as-deployed", choices=("as-deployed", "recorded", "defaults", "flags"),
                        help="as-deployed = a row recognised as a known public benchmark deployment "
                             "(shadowsim/known_deployments.py: InferenceX's DeepSeek B200/B300 SGLang configurations) "
                             "whose server_args are blank or aiconfigurator's reconstruction runs that deployment's "
                             "launch flags and client (listed in its assumptions; copies of one run as one run), every "
                             "other row its server_args (else --server-args, else SGLang's defaults); recorded = each "
                             "row's server_args as the file has them, no registry; defaults = ignore them, SGLang's "
                             "defaults for every row; flags = ignore them, --server-args for every row (to compare "
                             "deployments); docs/accuracy.md §3.15")
    parser.add_argument("--no-kv-mem-fraction", default=None, metavar="F|off",
                        help="a row whose recorded flags leave no KV cache at SGLang's default "
                             "--mem-fraction-static, though it is measured (so the server ran), is simulated at "
                             "this fraction and lists it among its assumptions (default 0.95: the fraction of "
                             "InferenceX's launch script for the only such rows, docs/accuracy.md §3.10); off: "
                             "skip such rows")
    parser.add_argument("--variability", default="off", choices=("off", "measured"),
                        help="random parts of a real run: measured = step-time jitter, run-to-run kernel factor "
                             "and client/network delays of docs/accuracy.md 3.7 (default off)")
    parser.add_argument("--replicas", type=int, default=1, metavar="N",
                        help="simulate every row with N seeds (--seed, --seed+1, ...) and report p5/p50/p95 "
                             "intervals of every figure (default 1; useful with --variability measured)")
    parser.add_argument("--only", action="append", default=[], metavar="COLUMN=V1,V2",
                        help="simulate only the rows whose COLUMN is one of the values (repeatable, all must "
                             "hold), e.g. --only tp=8 --only ep=1 --only precision=fp8")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--report", metavar="FILE.html", default=None,
                        help="also write a self-contained HTML report: predicted-vs-measured scatter, error "
                             "histogram (needs shadowsim[report])")



def select_rows(path: str | Path, rows: list[Any], only: list[str]) -> list[Any]:
    """The rows of ``path`` whose columns match every ``COLUMN=V1,V2`` of ``only`` (values compared as text,
    numbers as numbers: tp=8 matches 8 and 8.0)."""
    if not only:
        return rows
    with Path(path).open(newline="") as fh:
        records = list(csv.DictReader(fh))
    keep = [True] * len(records)
    for cond in only:
        col, eq, vals = cond.partition("=")
        col = col.strip()
        if not eq or not col:
            raise UserError("--only", f"{cond!r} is not COLUMN=VALUE", "e.g. --only tp=8")
        if records and col not in records[0]:
            raise UserError("--only", f"no column {col!r} in {path}", f"columns: {', '.join(records[0])}")
        wanted = {_norm(v) for v in vals.split(",")}
        keep = [k and _norm(r.get(col) or "") in wanted for k, r in zip(keep, records)]
    return [row for row, k in zip(rows, keep) if k]


def _norm(v: str) -> str:
    v = v.strip().lower()
    try:
        return repr(float(v))
    except ValueError:
        return v


def read_rows(path: str | Path, deployment: str = "recorded") -> list[Any]:
    """Read a measurement CSV into `simcore.perf.validation.Row`s (the file I/O stays out of simcore).

    ``deployment`` ``as-deployed``: rows recognised as a known public deployment take its columns
    (`shadowsim.known_deployments.as_deployed`); any other mode reads the file as it is."""
    from simcore.perf.validation import rows_from_records

    p = Path(path)
    try:
        with p.open(newline="") as fh:
            reader = csv.DictReader(fh)
            records, fields = list(reader), list(reader.fieldnames or [])
            if deployment == "as-deployed":
                from shadowsim.known_deployments import as_deployed

                records, fields = as_deployed(records, fields)
            return rows_from_records(records, fields, str(p))
    except FileNotFoundError:
        raise UserError("MEASUREMENTS", f"no such file: {p}", "give a CSV in the validation format") from None
    except IsADirectoryError:
        raise UserError("MEASUREMENTS", f"{p} is a directory", "give one CSV file") from None
    except UnicodeDecodeError:
        raise UserError("MEASUREMENTS", f"{p} is not a text CSV file", "give a CSV in the validation format") from None


def _no_kv_fraction(text: str | None, default: float | None) -> float | None:
    """``--no-kv-mem-fraction``: a fraction, ``off`` (None), or absent (the protocol's default)."""
    if text is None:
        return default
    if text.strip().lower() == "off":
        return None
    try:
        return float(text)
    except ValueError:
        raise UserError("--no-kv-mem-fraction", f"{text!r} is neither a fraction nor off", "e.g. 0.95 or off") from None


def _fmt(v: Any, nd: int = 1) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def run(args: argparse.Namespace) -> int:
    from simcore.perf.profile import CalibrationProfile
    from simcore.perf.validation import Protocol, validate
    from simcore.variability import Variability, replica_seeds

    replica_seeds(args.seed, args.replicas)  # a bad count fails before any simulation
    defaults = Protocol()
    protocol = Protocol(
        requests_per_client=defaults.requests_per_client if args.requests_per_client is None
        else args.requests_per_client,
        warmup_per_client=defaults.warmup_per_client if args.warmup_per_client is None else args.warmup_per_client,
        prompt_overhead_tokens=defaults.prompt_overhead_tokens if args.prompt_overhead_tokens is None
        else args.prompt_overhead_tokens,
        length_dist=args.length_dist, output_path_s_per_step=args.output_path_us_per_step * 1e-6,
        output_path_s_per_token=args.output_path_us_per_token * 1e-6,
        tokenizer_s_per_request=args.tokenizer_us_per_request * 1e-6,
        tokenizer_s_per_token=None if args.tokenizer_us_per_token is None else args.tokenizer_us_per_token * 1e-6,
        client=args.client,
        warmup_barrier=not args.no_warmup_barrier, server_args=args.server_args,
        deployment=args.deployment,
        variability=Variability.measured() if args.variability == "measured" else None,
        no_kv_mem_fraction=_no_kv_fraction(args.no_kv_mem_fraction, defaults.no_kv_mem_fraction))
    rows = select_rows(args.measurements, read_rows(args.measurements, args.deployment), args.only)
    profile = CalibrationProfile.load(args.profile) if args.profile else None

    from tqdm import tqdm

    bar = tqdm(total=len(rows), unit="row", desc="validating", file=sys.stderr, leave=False,
               disable=args.quiet or not sys.stderr.isatty())

    def progress(i: int, n: int, row: Any) -> None:
        bar.update(i - bar.n)
        bar.set_postfix_str(str(row.id)[-40:], refresh=False)

    try:
        out = validate(rows, profile=profile, backend=args.latency_backend, seed=args.seed, protocol=protocol,
                       progress=progress, replicas=args.replicas)
    finally:
        bar.close()
    out.pop("_results", None)
    if getattr(args, "report", None):
        from shadowsim.api import Validation
        from shadowsim.html_report import write_report

        write_report([Validation.from_dict(out, str(args.measurements))], Path(args.report))
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
            flat = [{k: ("; ".join(v) if isinstance(v, list) else json.dumps(v) if isinstance(v, dict) else v)
                     for k, v in r.items()} for r in rows]
            w = csv.DictWriter(fh, fieldnames=list(flat[0]))
            w.writeheader()
            w.writerows(flat)
    except OSError as exc:
        raise UserError("--out", f"cannot write {path}: {exc.strerror or exc}") from None


def _print_tables(out: dict[str, Any]) -> None:
    head = (f"{'id':<40} {'tp':>2} {'isl':>5} {'osl':>4} {'conc':>4} | {'TTFT ms pred':>12} {'meas':>9} {'err%':>6}"
            f" {'p10':>8} {'p50':>8} {'p90':>8} | {'TPOT ms pred':>12} {'meas':>7} {'err%':>6} |"
            f" {'e2e ms pred':>11} {'meas':>9} {'err%':>6} | {'req/s pred':>10} {'meas':>7} {'tok/s':>8} | lockstep")
    print(head)
    print("-" * len(head))
    for r in out["rows"]:
        lock = r.get("lockstep_index")
        print(f"{str(r['id'])[-40:]:<40} {r['tp']:>2} {r['isl']:>5} {r['osl']:>4} {_fmt(r['concurrency'], 0):>4} |"
              f" {_fmt(r['predicted_ttft_ms']):>12} {_fmt(r['measured_ttft_ms']):>9} {_fmt(r['ttft_ape_pct']):>6}"
              f" {_fmt(r.get('predicted_ttft_p10_ms')):>8} {_fmt(r.get('predicted_ttft_p50_ms')):>8}"
              f" {_fmt(r.get('predicted_ttft_p90_ms')):>8} |"
              f" {_fmt(r['predicted_tpot_ms'], 2):>12} {_fmt(r['measured_tpot_ms'], 2):>7} {_fmt(r['tpot_ape_pct']):>6} |"
              f" {_fmt(r['predicted_e2e_ms'], 0):>11} {_fmt(r['measured_e2e_ms'], 0):>9} {_fmt(r['e2e_ape_pct']):>6} |"
              f" {_fmt(r['predicted_throughput_rps'], 3):>10} {_fmt(r['measured_throughput_rps'], 3):>7}"
              f" {_fmt(r.get('predicted_output_tokens_per_s'), 0):>8} | {_fmt(lock, 2)}")
    medians = [r for r in out["rows"] if any(r.get(f"measured_{c}") is not None
                                             for c in ("ttft_p50_ms", "itl_p50_ms", "output_tokens_per_s"))]
    if medians:  # bench_serving printouts: median TTFT, median ITL, output tokens/s
        print()
        mh = (f"{'id':<40} {'rate':>5} | {'med TTFT pred':>13} {'meas':>9} {'err%':>6} | {'med ITL pred':>12}"
              f" {'meas':>7} {'err%':>6} | {'out tok/s pred':>14} {'meas':>8} {'err%':>6}")
        print(mh)
        print("-" * len(mh))
        for r in medians:
            print(f"{str(r['id'])[-40:]:<40} {_fmt(r['request_rate'], 0):>5} |"
                  f" {_fmt(r.get('predicted_ttft_p50_ms')):>13} {_fmt(r.get('measured_ttft_p50_ms')):>9}"
                  f" {_fmt(r.get('ttft_p50_ape_pct')):>6} | {_fmt(r.get('predicted_itl_p50_ms'), 2):>12}"
                  f" {_fmt(r.get('measured_itl_p50_ms'), 2):>7} {_fmt(r.get('itl_p50_ape_pct')):>6} |"
                  f" {_fmt(r.get('predicted_output_tokens_per_s'), 0):>14} {_fmt(r.get('measured_output_tokens_per_s'), 0):>8}"
                  f" {_fmt(r.get('output_tps_ape_pct')):>6}")
    from shadowsim.known_deployments import ASSUMPTION_PREFIX, PARTLY_ASSUMED_PREFIX, UNKNOWN_LABEL as unknown

    deployments: dict[str, int] = {}
    published: dict[str, int] = {}
    partly: dict[str, int] = {}  # published deployments with assumed parts (PARTLY_ASSUMED_PREFIX)
    for r in out["rows"]:
        if r.get("published_deployment"):
            name = r["published_deployment"].split(" (")[0].removeprefix("InferenceX ")
            part = any(a.startswith(PARTLY_ASSUMED_PREFIX) for a in r.get("assumptions", []))
            (partly if part else published)[name] = (partly if part else published).get(name, 0) + 1
        else:
            deployments[r["deployment"]] = deployments.get(r["deployment"], 0) + 1
    print()
    if published:
        print(f"{sum(published.values())} row(s) simulated as their published deployment (InferenceX "
              f"{', '.join(f'{k} {v}' for k, v in published.items())}; shadowsim/known_deployments.py); "
              f"--deployment recorded for the file's flags")
    if partly:
        print(f"{sum(partly.values())} row(s) simulated as their published deployment, partly assumed (InferenceX "
              f"{', '.join(f'{k} {v}' for k, v in partly.items())}; each row's assumptions name the assumed parts, "
              f"docs/accuracy.md §3.15)")
    for d, n in deployments.items():
        print(f"{n} row(s) simulated {d}")
    warned = [r for r in out["rows"] if r.get("warnings")]
    if warned:
        print(f"warning: {len(warned)} row(s) move in lockstep waves in the simulation (lockstep index >= 0.5):"
              f" {', '.join(str(r['id']) for r in warned[:6])}{' ...' if len(warned) > 6 else ''}")

    labelled = [r for r in out["rows"] if unknown in r.get("assumptions", [])]
    if labelled:
        print(f"{len(labelled)} row(s): {unknown}")
    # the published deployment and the no-deployment label are summarized above; the rest one line each
    other = {r["id"]: [a for a in r.get("assumptions", []) if not a.startswith((ASSUMPTION_PREFIX, PARTLY_ASSUMED_PREFIX))
                     and a != unknown]
             for r in out["rows"]}
    assumed = [r for r in out["rows"] if other[r["id"]]]
    if assumed:
        print(f"assumption: {len(assumed)} row(s) simulated with a setting their file does not record:")
        for r in assumed:
            for a in other[r["id"]]:
                print(f"  {r['id']}: {a}")
    print()
    iv = out.get("intervals") or {}
    extra = f" {'MAPE p5–p95 over ' + str(len(out.get('seeds', []))) + ' seeds':>28}" if iv else ""
    print(f"{'metric':<11} {'n':>3} {'MAPE %':>8} {'median %':>9} {'P90 %':>7}{extra}")
    for m, s in out["summary"].items():
        line = f"{m:<11} {s['n']:>3} {_fmt(s['mape']):>8} {_fmt(s['median_ape']):>9} {_fmt(s['p90_ape']):>7}"
        mi = iv.get(m, {}).get("mape")
        if mi:
            line += f" {_fmt(mi['p5']):>13} – {_fmt(mi['p95'])}"
        print(line)
    if out["skipped"]:
        print(f"\nskipped {len(out['skipped'])} row(s):")
        for s in out["skipped"]:
            print(f"  {s['id']}: {s['reason']}")
