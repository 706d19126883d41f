"""Read an SGLang log, metrics page, request log, OTLP dump, bench_serving output or workload trace, and print the
events shadowsim sees in it: one JSON line per event on stdout, and a summary on stderr (events by kind, lines
skipped, lines dead-lettered with their reasons). Run this first on your own logs.

Formats (--format, default auto-detected from the content):
  sglang_log     server logs of any era (0.1.x to 0.5.x), incl. docker-compose / collector prefixes,
                 --log-requests text, ReqTimeStats lines, and JSON lines of the shapes below
  json           JSON lines: shipper envelopes (Vector, Fluent Bit, Filebeat), --log-requests JSON,
                 --export-metrics-to-file lines, traces, canonical shadowsim events
  events         canonical shadowsim event JSON lines only (what this command prints)
  otlp_proto     one serialized OTLP TracesData (request spans) or LogsData (log lines in the record
                 bodies) message, as the OpenTelemetry Collector's Kafka exporter writes it
  otlp_json      OTLP JSON ({"resourceSpans": ...} or {"resourceLogs": ...})
  prometheus     a scrape of SGLang's /metrics
  bench_console  sglang.bench_serving console printout
  mooncake       Mooncake trace JSON lines (timestamp ms, input_length, output_length, hash_ids)
  sharegpt       ShareGPT-derived request streams (input_toks, output_toks, arrival_time_ns[, input_tok_ids])
  azure          Azure LLM inference trace CSV (TIMESTAMP, ContextTokens, GeneratedTokens)

Lines that are not SGLang's (tracebacks, access logs, other programs) are skipped quietly; lines that look like
SGLang's but cannot be parsed are dead-lettered and listed in the summary with the reason and first line numbers.

Log timestamps are read as UTC. Lines without one take the last timestamp seen (or --start-ts).

Examples:
  shadowsim parse server.log | head
  shadowsim parse server.log --no-events            # just the summary
  shadowsim parse trace.jsonl --format mooncake --start-ts 1700000000
  shadowsim parse server.log --json --no-events     # summary as JSON on stdout
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

from shadowsim.errors import UserError
from simcore.events import event_to_json
from streams.decode import FORMATS, iter_file_events

_EXAMPLES_PER_REASON = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="the file to read ('-' = standard input)")
    parser.add_argument("--trace-format", "--format", "-f", dest="format", default="auto", choices=FORMATS, metavar="FORMAT",
                        help="input format, one of the list above (default: auto)")
    parser.add_argument("--instance-id", default=None,
                        help="SGLang instance the events belong to (default: from the input, else 'default')")
    parser.add_argument("--start-ts", type=float, default=None, metavar="UNIX_S",
                        help="time (Unix s) of relative trace times and of lines before the first timestamp")
    parser.add_argument("--no-events", action="store_true", help="print no events, only the summary")
    parser.add_argument("--json", action="store_true", help='write the summary as one {"summary": ...} JSON line on stdout (after the events)')
    parser.add_argument("--strict", action="store_true", help="exit 1 when any line was dead-lettered")


def run(args: argparse.Namespace) -> int:
    if args.file == "-":
        # the format is sniffed from the first bytes and some formats are read whole: buffer stdin in a file
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "stdin"
            path.write_bytes(sys.stdin.buffer.read())
            return _parse(path, args, shown="-")
    path = Path(args.file)
    return _parse(path, args, shown=str(path))


def _parse(path: Path, args: argparse.Namespace, shown: str) -> int:
    if not path.exists():
        raise UserError("FILE", f"{path} does not exist", "give the path of a log, metrics or trace file")
    if path.is_dir():
        raise UserError("FILE", f"{path} is a directory", "give one file; loop in the shell for many")
    from shadowsim.errors import require_text_file

    require_text_file(path, "FILE", "an SGLang log, metrics page, request log, OTLP dump or trace")
    kinds: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    examples: dict[str, list[int | None]] = {}
    skipped = 0
    out = sys.stdout.buffer
    try:
        for item in iter_file_events(path, fmt=args.format, instance_id=args.instance_id, start_ts=args.start_ts):
            if item.event is not None:
                kinds[item.event.kind] += 1
                if not args.no_events:
                    out.write(event_to_json(item.event) + b"\n")
            elif item.dead_letter is not None:
                r = item.dead_letter.reason
                reasons[r] += 1
                ex = examples.setdefault(r, [])
                if len(ex) < _EXAMPLES_PER_REASON:
                    ex.append(item.line_no)
            else:
                skipped += 1
    except OSError as exc:
        raise UserError("FILE", f"cannot read {path}: {exc.strerror or exc}", "check the path and permissions") from None
    out.flush()
    summary = {
        "file": shown,
        "format": args.format,
        "events": sum(kinds.values()),
        "events_by_kind": dict(sorted(kinds.items())),
        "lines_skipped": skipped,
        "dead_letters": sum(reasons.values()),
        "dead_letter_reasons": [
            {"reason": r, "count": n, "first_lines": examples[r]} for r, n in reasons.most_common()
        ],
    }
    if args.json:  # stdout like every --json: after the event lines (if any), one {"summary": ...} line
        print(json.dumps({"summary": summary}), flush=True)
    else:
        _print_summary(summary)
    return 1 if args.strict and reasons else 0


def _print_summary(s: dict) -> None:
    err = sys.stderr
    print(f"{s['file']}: {s['events']} events, {s['lines_skipped']} lines skipped, "
          f"{s['dead_letters']} dead-lettered", file=err)
    for kind, n in s["events_by_kind"].items():
        print(f"  {kind:<20} {n:>8}", file=err)
    if s["dead_letter_reasons"]:
        print("dead letters (looked like SGLang output, could not be parsed):", file=err)
        for r in s["dead_letter_reasons"]:
            lines = ", ".join(str(n) for n in r["first_lines"] if n is not None)
            where = f" (lines {lines}{', ...' if r['count'] > len(r['first_lines']) else ''})" if lines else ""
            print(f"  {r['count']:>6} x {r['reason']}{where}", file=err)
    if s["events"] == 0 and not s["dead_letter_reasons"]:
        print("no SGLang output recognised: is this the right file? try --format (see --help)", file=err)
