"""Write one self-contained HTML report (inline SVG plots, nothing fetched) from saved --json results.

Give any mix of `shadowsim predict --json`, `shadowsim sweep --json` and `shadowsim validate --json` outputs;
each becomes a section: latency CDFs and percentiles, memory breakdown (predict); throughput-latency curves,
Pareto front per load level, SLO-attainment heatmap (sweep); predicted-vs-measured scatter and error histogram
(validate). predict, sweep and validate also take --report FILE.html directly (a predict report from the
command itself has the full per-request CDFs; one from --json draws the percentiles). Needs the plotting extra:
pip install 'shadowsim[report]'.

Examples:
  shadowsim sweep ... --json > sweep.json && shadowsim report sweep.json --out sweep.html
  shadowsim report predict.json validate.json --out review.html --title "Qwen3-32B on H200: sign-off"
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from simcore.errors import UserError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", nargs="+", metavar="RESULT.json", help="--json output of predict, sweep or validate")
    p.add_argument("--out", required=True, metavar="FILE.html", help="the HTML file to write")
    p.add_argument("--title", default=None, help="report title (default: shadowsim report)")


def load_result(path: str) -> object:
    """A Prediction, SweepResult or Validation from one saved --json file."""
    from shadowsim.api import Prediction, SweepResult, Validation

    p = Path(path)
    if not p.is_file():
        raise UserError("RESULT.json", f"no such file: {p}", "give the --json output of predict, sweep or validate")
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UserError("RESULT.json", f"{p} is not a text file", "give a --json output") from None
    except json.JSONDecodeError as exc:
        raise UserError("RESULT.json", f"{p} is not JSON ({exc.msg} at line {exc.lineno})",
                        "give the --json output of predict, sweep or validate") from None
    if not isinstance(raw, dict):
        raise UserError("RESULT.json", f"{p} holds no JSON object", "give a --json output")
    if "points" in raw:
        return SweepResult.from_dict(raw)
    if "rows" in raw:
        return Validation.from_dict(raw, str(p))
    return Prediction.from_dict(raw)


def run(args: argparse.Namespace) -> int:
    from shadowsim.html_report import write_report

    out = Path(args.out)
    if out.suffix.lower() not in (".html", ".htm"):
        raise UserError("--out", f"unknown extension {out.suffix!r}", "use FILE.html")
    results = [load_result(r) for r in args.results]
    write_report(results, out, title=args.title)
    print(json.dumps({"report": str(out), "sections": len(results), "bytes": out.stat().st_size}))
    return 0
