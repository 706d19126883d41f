"""Fit calibration factors and write a versioned, content-hashed profile for `predict`, `validate` and `run`.

Two sources, usable together:

  --from-tables GPUS   roofline efficiencies (fraction of peak FLOP/s reached by GEMMs and attention, of HBM
                       and NVLink bandwidth, smallest kernel times) measured on the SGLang per-op tables of
                       these GPUs. GPUs without tables are then predicted with these efficiencies.
  --from-e2e FILE      the serialized per-request step time (gpu_per_req_s: sampling, logits processing and
                       batch preparation outside the per-op tables) fitted to the mean TPOT of a measurement
                       file in `shadowsim validate` format. Every --holdout-every'th row is left out of the
                       fit and reported separately, so the printed hold-out error is an honest estimate.

Host-side (CPU) overhead is hidden by SGLang's overlap scheduler whenever the GPU step is longer, so a
benchmark file cannot identify it; set it explicitly (--cpu-base-s, --cpu-per-req-s) or let the live shadow
refit it from observed step timings. The profile's hash appears in exported build info.

Examples:
  shadowsim calibrate --from-tables h100_sxm,h200_sxm,a100_sxm --out profile.json
  shadowsim calibrate --from-e2e ../shared/data/validation/sglang_qwen3_32b_h100.csv --holdout-every 3 \\
      --base profile.json --out profile.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from simcore.errors import UserError

NAME = "calibrate"
HELP = "fit calibration factors from per-op tables or end-to-end measurements"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from-tables", metavar="GPUS", default=None,
                        help="comma-separated GPUs whose measured tables give the roofline efficiencies")
    parser.add_argument("--from-e2e", metavar="FILE", default=None,
                        help="measurement CSV (validate format) to fit gpu_per_req_s on mean TPOT")
    parser.add_argument("--holdout-every", type=int, default=3, metavar="N",
                        help="with --from-e2e: hold out every N-th row from the fit and report it (default 3; 1 = none)")
    parser.add_argument("--base", metavar="PROFILE.json", default=None,
                        help="start from this profile (default: the shipped one)")
    parser.add_argument("--neutral", action="store_true", help="start from neutral factors instead of the shipped profile")
    parser.add_argument("--name", default=None, help="profile name stored in the file")
    parser.add_argument("--cpu-base-s", type=float, default=None, help="host time per scheduler iteration, seconds")
    parser.add_argument("--cpu-per-req-s", type=float, default=None, help="host time per request per iteration, s")
    parser.add_argument("--launch-s-per-layer", type=float, default=None,
                        help="eager-mode kernel-launch floor per layer, seconds (steps without CUDA graph)")
    parser.add_argument("--frontend-s", type=float, default=None,
                        help="fixed host latency per request outside the scheduler (HTTP, chat template, "
                             "tokenizer, detokenizer hop), seconds; docs/accuracy.md §1.5")
    parser.add_argument("--gpu-per-req-s-for", action="append", default=None, metavar="VERSION=SECONDS",
                        help="serialized per-row time per step for SGLang versions up to VERSION (repeatable; "
                             "gpu_per_req_s_by_version, docs/accuracy.md §3.11)")
    parser.add_argument("--out", metavar="PROFILE.json", default=None, help="write the profile here (default: stdout)")
    parser.add_argument("--json", action="store_true", help="print {report, profile, profile_path} as one JSON object on stdout")


def run(args: argparse.Namespace) -> int:
    from simcore.gpus import load_gpu
    from simcore.perf.calibrate import fit_e2e, fit_roofline, split_holdout
    from simcore.perf.profile import CalibrationProfile, default_profile
    from simcore.perf.tables import tables_dir_names
    from shadowsim.commands.validate import read_rows
    from simcore.perf.validation import validate

    if not args.from_tables and not args.from_e2e and args.cpu_base_s is None and args.cpu_per_req_s is None \
            and args.launch_s_per_layer is None and args.frontend_s is None and not args.gpu_per_req_s_for:
        raise UserError("--from-tables/--from-e2e", "nothing to fit",
                        "give --from-tables GPUS and/or --from-e2e FILE (see --help)")
    if args.holdout_every < 0:
        raise UserError("--holdout-every", f"must be >= 0, got {args.holdout_every}", "0 or 1 hold out nothing")
    if args.base:
        prof = CalibrationProfile.load(args.base)
    else:
        prof = CalibrationProfile() if args.neutral else default_profile()
    report: dict[str, Any] = {}
    sources: list[str] = []
    if args.from_tables:
        try:
            gpus = [load_gpu(g).name for g in args.from_tables.split(",") if g.strip()]
        except UserError as exc:  # load_gpu names --gpu; here the GPUs come from --from-tables
            raise UserError("--from-tables", str(exc).removeprefix(f"{exc.field}: ")) from None
        missing = [g for g in gpus if g not in tables_dir_names()]
        if missing:
            raise UserError("--from-tables", f"no measured tables for {', '.join(missing)}",
                            f"tables exist for {', '.join(tables_dir_names())}")
        eff = fit_roofline(gpus)
        prof = prof.model_copy(update={"roofline": eff})
        report["roofline"] = eff
        sources.append("tables:" + "+".join(gpus))
    upd: dict[str, Any] = {}
    for key in ("cpu_base_s", "cpu_per_req_s", "launch_s_per_layer", "frontend_s"):
        v = getattr(args, key)
        if v is not None:
            if v < 0:
                raise UserError(f"--{key.replace('_', '-')}", f"must be ≥ 0, got {v}")
            upd[key] = v
    if args.gpu_per_req_s_for:
        from simcore.settings import version_family

        by_version = dict(prof.gpu_per_req_s_by_version)
        for item in args.gpu_per_req_s_for:
            version, eq, value = item.partition("=")
            try:
                seconds = float(value)
                version_family(version)
            except (ValueError, UserError):
                raise UserError("--gpu-per-req-s-for", f"{item!r} is not VERSION=SECONDS", "e.g. 0.4.0=8e-05") from None
            if not eq or seconds < 0:
                raise UserError("--gpu-per-req-s-for", f"{item!r} is not VERSION=SECONDS (seconds ≥ 0)",
                                "e.g. 0.4.0=8e-05")
            by_version[version.strip()] = seconds
        upd["gpu_per_req_s_by_version"] = by_version
    if upd:
        prof = prof.model_copy(update=upd)
    if args.from_e2e:
        rows = read_rows(args.from_e2e)
        fit_rows, hold_rows = split_holdout(rows, args.holdout_every)
        from tqdm import tqdm

        from simcore.perf.calibrate import PER_REQ_GRID_S

        print(f"fitting gpu_per_req_s on {len(fit_rows)} rows ({len(hold_rows)} held out)…", file=sys.stderr)
        bar = tqdm(total=len(PER_REQ_GRID_S) * len(fit_rows) + len(fit_rows) + len(hold_rows), unit="sim",
                   desc="calibrating", file=sys.stderr, leave=False, disable=not sys.stderr.isatty())

        def counted(rows_: list[Any], profile: Any = None) -> dict[str, Any]:
            return validate(rows_, profile=profile, progress=lambda i, n, row: bar.update(1))

        try:
            prof, grid = fit_e2e(fit_rows, prof, validate_fn=counted)
            report["e2e_grid"] = grid
            report["gpu_per_req_s"] = prof.gpu_per_req_s
            report["fit_summary"] = counted(fit_rows, profile=prof)["summary"]
            if hold_rows:
                report["holdout_summary"] = counted(hold_rows, profile=prof)["summary"]
        finally:
            bar.close()
        sources.append(f"e2e:{Path(args.from_e2e).name} (holdout every {args.holdout_every})")
    prof = prof.model_copy(update={"name": args.name or prof.name,
                                   "source": "; ".join(sources) or prof.source})
    report["profile_hash"] = prof.profile_hash
    text = prof.to_json()
    if args.out:
        prof.save(args.out)
        print(f"wrote {args.out} (profile_hash {prof.profile_hash})", file=sys.stderr)
    if args.json:  # one JSON document on stdout: the fit report, and the profile unless it went to --out
        doc: dict[str, Any] = {"report": report}
        doc["profile"] = None if args.out else json.loads(text)
        doc["profile_path"] = args.out
        print(json.dumps(doc))
        return 0
    if not args.out:
        sys.stdout.write(text)
    _print_report(report)
    return 0


def _print_report(report: dict[str, Any]) -> None:
    err = sys.stderr
    if "roofline" in report:
        print("roofline efficiencies (median over the tabulated GPUs):", file=err)
        for k, v in report["roofline"].items():
            print(f"  {k:<18} {v:.6g}", file=err)
    if "e2e_grid" in report:
        print("gpu_per_req_s grid (fit rows): value → TTFT / TPOT MAPE %", file=err)
        for g in report["e2e_grid"]:
            t = "-" if g["ttft_mape"] is None else f"{g['ttft_mape']:.2f}"
            p = "-" if g["tpot_mape"] is None else f"{g['tpot_mape']:.2f}"
            print(f"  {g['gpu_per_req_s']:.2e} → {t} / {p}", file=err)
        print(f"chosen gpu_per_req_s = {report['gpu_per_req_s']:.3g} s", file=err)
        for label in ("fit_summary", "holdout_summary"):
            s = report.get(label)
            if s:
                line = ", ".join(f"{m} MAPE {s[m]['mape']:.2f}% (n={s[m]['n']})" for m in ("ttft", "tpot")
                                 if s[m]["mape"] is not None)
                print(f"{label.replace('_summary', '')}: {line}", file=err)
    print(f"profile_hash {report['profile_hash']}", file=err)
