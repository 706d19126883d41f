"""Ship an SGLang log, metrics page or trace file — or a live ZMQ feed — into Kafka, where `shadowsim run`
consumes it.

By default the file is decoded here and each event goes out as canonical event JSON keyed by its instance id
(so one instance's events stay in order on one partition). --raw sends the lines as they are, as a log shipper
(Vector, Fluent Bit) would; the consumer decodes them then.

  --follow        keep reading as the file grows, across rotation (like tail -F); Ctrl-C stops;
                  --from-end ships only lines written from now on
  --speed N       replay a recorded file at N times its own timing (event timestamps); 1 = real time
  --zmq ENDPOINT  bridge SGLang's ZMQ feed instead of a file: --zmq-kind kv-events (--kv-events-config) or
                  forward-pass (--enable-forward-pass-metrics); connect to the endpoint SGLang binds.
                  Messages that do not decode go to --dead-letter-topic (default sglang.events.dlq) with
                  the reason in the `error` header; the summary counts them (errors, dead_letters)

Kafka TLS/SASL: the SHADOWSIM_KAFKA_* environment variables, as for `shadowsim run` (docs/operations.md).
Progress is shown on stderr when it is a terminal; --json prints a summary object on stdout at the end.

Examples:
  shadowsim publish server.log --bootstrap-servers 127.0.0.1:9092 --instance-id node-1
  shadowsim publish server.log --follow --raw --instance-id node-1 --bootstrap-servers kafka:9092
  shadowsim publish trace.jsonl --format mooncake --speed 10 --bootstrap-servers 127.0.0.1:9092
  shadowsim publish --zmq tcp://10.0.0.5:5557 --zmq-kind kv-events --instance-id node-1 \\
      --bootstrap-servers 127.0.0.1:9092
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

from shadowsim.errors import UserError

DEFAULT_TOPIC = "sglang.events"
DEFAULT_DLQ_TOPIC = "sglang.events.dlq"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from streams.adapters.zmq import KINDS  # noqa: PLC0415
    from streams.decode import FORMATS  # noqa: PLC0415

    parser.add_argument("file", metavar="FILE", nargs="?", help="the file to ship (omit with --zmq)")
    parser.add_argument("--bootstrap-servers", metavar="HOST:PORT[,...]",
                        help="Kafka to publish to (required; `shadowsim broker` runs one on 127.0.0.1:9092)")
    parser.add_argument("--topic", default=DEFAULT_TOPIC, help=f"topic to publish to (default {DEFAULT_TOPIC})")
    parser.add_argument("--partitions", type=int, default=4, metavar="N",
                        help="partitions when the topic has to be created (default 4)")
    parser.add_argument("--trace-format", "--format", "-f", dest="format", default="auto", choices=FORMATS,
                        help="input format (default: auto-detected; see `shadowsim parse --help`)")
    parser.add_argument("--instance-id", default=None,
                        help="SGLang instance the input belongs to (default: from the input, else 'default')")
    parser.add_argument("--raw", action="store_true", help="send lines as they are instead of decoded events")
    parser.add_argument("--follow", action="store_true", help="follow the file as it grows, across rotation")
    parser.add_argument("--from-end", action="store_true",
                        help="with --follow: skip what the file holds now, ship only new lines")
    parser.add_argument("--speed", type=float, default=None, metavar="N",
                        help="replay at N x the recorded timing (default: as fast as possible)")
    parser.add_argument("--start-ts", default=None, metavar="TIME",
                        help="where a trace with relative times (Mooncake, ShareGPT: from 0) starts, as Unix seconds "
                             "or ISO 8601 (2026-01-31T12:00:00Z); default: now, so the shadow sees current traffic. "
                             "Files with their own clock times (SGLang logs, Azure traces) keep them")
    parser.add_argument("--idle-timeout-s", type=float, default=None, metavar="S",
                        help="with --follow or --zmq: stop after S seconds without new input (default: never)")
    parser.add_argument("--zmq", metavar="ENDPOINT", help="bridge a ZMQ feed, e.g. tcp://127.0.0.1:5557")
    parser.add_argument("--zmq-kind", choices=KINDS, default=None, help="what the ZMQ feed carries (with --zmq)")
    parser.add_argument("--max-messages", type=int, default=None, metavar="N",
                        help="with --zmq: stop after N messages (default: never)")
    parser.add_argument("--dead-letter-topic", default=None, metavar="TOPIC",
                        help=f"with --zmq: topic for messages that do not decode (default {DEFAULT_DLQ_TOPIC}); "
                             "each carries the payload, the reason in header `error` and the endpoint in "
                             "`source_topic`")
    parser.add_argument("--no-dead-letters", action="store_true",
                        help="with --zmq: only count and log undecodable messages, send them nowhere")
    parser.add_argument("--no-progress", action="store_true", help="no progress line, even on a terminal")
    parser.add_argument("--json", action="store_true", help="print a JSON summary on stdout at the end")



def _check(args: argparse.Namespace) -> None:
    if not args.bootstrap_servers:
        raise UserError("--bootstrap-servers", "required",
                        "give your Kafka's host:port, or start one with `shadowsim broker` and use 127.0.0.1:9092")
    if args.zmq:
        if args.file:
            raise UserError("FILE", "give either a FILE or --zmq, not both")
        if not args.zmq_kind:
            raise UserError("--zmq-kind", "required with --zmq", "kv-events or forward-pass")
        if args.follow or args.speed or args.raw:
            raise UserError("--zmq", "--follow, --speed and --raw apply to files only")
        if args.no_dead_letters and args.dead_letter_topic is not None:
            raise UserError("--no-dead-letters", "give either --dead-letter-topic or --no-dead-letters, not both")
        if args.dead_letter_topic is not None and args.dead_letter_topic in ("", args.topic):
            raise UserError("--dead-letter-topic",
                            f"must be a topic other than --topic, got {args.dead_letter_topic!r}",
                            f"the default is {DEFAULT_DLQ_TOPIC}")
        return
    if args.zmq_kind or args.max_messages is not None:
        raise UserError("--zmq-kind", "--zmq-kind and --max-messages apply to --zmq only")
    if args.dead_letter_topic is not None or args.no_dead_letters:
        raise UserError("--dead-letter-topic", "applies to --zmq only",
                        "file publishing counts bad lines in its summary; `shadowsim run` parks bad Kafka records")
    if not args.file:
        raise UserError("FILE", "missing", "give a log, metrics or trace file, or --zmq ENDPOINT")
    path = Path(args.file)
    if path.is_dir():
        raise UserError("FILE", f"{path} is a directory", "give one file; loop in the shell for many")
    if not path.exists() and not args.follow:
        raise UserError("FILE", f"{path} does not exist", "check the path (with --follow it may appear later)")
    if args.from_end and not args.follow:
        raise UserError("--from-end", "applies to --follow only")
    if args.follow and args.speed:
        raise UserError("--speed", "cannot be combined with --follow",
                        "--speed replays a recorded file; --follow ships lines as they are written")
    if args.partitions < 1:
        raise UserError("--partitions", f"must be >= 1, got {args.partitions}")
    if args.speed is not None and not args.speed > 0:
        raise UserError("--speed", f"must be > 0, got {args.speed}", "1 = the file's own timing, 10 = ten times faster")
    from shadowsim.errors import require_text_file

    require_text_file(path, "FILE", "an SGLang log, metrics page, request log, OTLP dump or trace")
    if args.start_ts is not None:
        args.start_ts = parse_start_ts(args.start_ts)
        if args.raw:
            raise UserError("--start-ts", "applies to decoded events, not --raw lines",
                            "drop --raw: the consumer times raw lines by their Kafka record time")


def parse_start_ts(text: str) -> float:
    """``--start-ts``: Unix seconds, or an ISO 8601 time (UTC unless it names a zone)."""
    import math  # noqa: PLC0415

    from streams.adapters.timestamps import parse_iso  # noqa: PLC0415

    try:
        ts = float(text)
    except ValueError:
        parsed = parse_iso(text.strip())
        if parsed is None:
            raise UserError("--start-ts", f"{text!r} is neither Unix seconds nor an ISO 8601 time",
                            "e.g. 1767225600 or 2026-01-01T00:00:00Z") from None
        ts = parsed
    if not math.isfinite(ts) or not 0 <= ts < 4102444800:  # 2100-01-01
        raise UserError("--start-ts", f"{text!r} is outside 1970..2100", "give Unix seconds, e.g. 1767225600")
    return ts


def _dead_letter_topic(args: argparse.Namespace) -> str | None:
    if not args.zmq or args.no_dead_letters:
        return None
    return args.dead_letter_topic or DEFAULT_DLQ_TOPIC


def _producer(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from streams.broker import create_topics, wait_until_answers  # noqa: PLC0415
    from streams.kafka_io import EventProducer  # noqa: PLC0415

    from streams.kafka_security import security_from  # noqa: PLC0415

    security = security_from(None)  # TLS/SASL from SHADOWSIM_KAFKA_* (docs/operations.md, "Kafka security")
    kw = security.kafka_kwargs()
    try:
        wait_until_answers(args.bootstrap_servers, timeout_s=10.0, **kw)
    except (TimeoutError, ValueError) as exc:
        raise UserError("--bootstrap-servers", f"no Kafka answers at {args.bootstrap_servers} ({exc})",
                        "is the broker running? `shadowsim broker` starts one on 127.0.0.1:9092") from None
    topics = {args.topic: args.partitions}
    dlq = _dead_letter_topic(args)
    if dlq is not None:
        topics[dlq] = args.partitions
    try:
        create_topics(args.bootstrap_servers, topics, **kw)
    except Exception as exc:  # noqa: BLE001 - no admin rights on a managed Kafka: the topic may exist anyway
        print(f"shadowsim publish: could not check/create topics {', '.join(topics)}: {exc}", file=sys.stderr)
    return EventProducer(args.bootstrap_servers, args.topic, **kw)


def run(args: argparse.Namespace) -> int:
    _check(args)
    stop = threading.Event()
    main_thread = threading.current_thread() is threading.main_thread()  # signals only work there
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set()) if main_thread else None
    producer = _producer(args)
    summary: dict[str, object]
    try:
        if args.zmq:
            summary = _run_zmq(args, producer, stop)
        else:
            summary = _run_file(args, producer, stop)
    except KeyboardInterrupt:
        summary = {"interrupted": True}
    finally:
        producer.flush()
        producer.close()
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    summary.update({"topic": args.topic, "bootstrap_servers": args.bootstrap_servers})
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        parts = ", ".join(f"{k} {v}" for k, v in summary.items()
                          if k not in ("topic", "bootstrap_servers", "dead_letter_samples"))
        print(f"shadowsim publish: {parts} -> {args.topic}", file=sys.stderr)
        for sample in summary.get("dead_letter_samples", []) or []:  # type: ignore[union-attr]
            print(f"  dead letter: {sample}", file=sys.stderr)
    return 0


def _tqdm_progress():  # type: ignore[no-untyped-def]
    """The publisher's progress drawn by tqdm on a terminal (records sent, with events and dead letters)."""
    from tqdm import tqdm  # noqa: PLC0415

    from streams.publish import Progress  # noqa: PLC0415

    class TqdmProgress(Progress):
        def __init__(self) -> None:
            super().__init__(sys.stderr)
            self.bar = tqdm(unit="rec", desc="publishing", file=sys.stderr, leave=False, dynamic_ncols=True)

        def update(self, stats, force: bool = False) -> None:  # type: ignore[no-untyped-def]
            self.bar.update(stats.records - self.bar.n)
            self.bar.set_postfix(events=stats.events, dead_letters=stats.dead_letters, skipped=stats.skipped,
                                 refresh=False)

        def done(self, stats) -> None:  # type: ignore[no-untyped-def]
            self.update(stats)
            self.bar.close()

    return TqdmProgress()


def _run_file(args: argparse.Namespace, producer, stop: threading.Event) -> dict[str, object]:  # type: ignore[no-untyped-def]
    from streams.publish import FilePublisher, Progress  # noqa: PLC0415

    quiet = args.no_progress or args.json or not sys.stderr.isatty()
    progress = Progress(None) if quiet else _tqdm_progress()
    pub = FilePublisher(producer, fmt=args.format, instance_id=args.instance_id, raw=args.raw, speed=args.speed,
                        progress=progress, start_ts=args.start_ts)
    if args.follow:
        stats = pub.follow(args.file, stop=stop.is_set, from_end=args.from_end, idle_timeout_s=args.idle_timeout_s)
    else:
        stats = pub.publish_file(args.file)
    return stats.as_dict()


def _run_zmq(args: argparse.Namespace, producer, stop: threading.Event) -> dict[str, object]:  # type: ignore[no-untyped-def]
    import dataclasses  # noqa: PLC0415

    from streams.zmq_bridge import ZmqBridge  # noqa: PLC0415

    from streams.kafka_io import EventProducer  # noqa: PLC0415

    dlq_topic = _dead_letter_topic(args)
    from streams.kafka_security import security_from  # noqa: PLC0415

    kw = security_from(None).kafka_kwargs()
    dlq = EventProducer(args.bootstrap_servers, dlq_topic, **kw) if dlq_topic is not None else None
    bridge = ZmqBridge(args.zmq, args.zmq_kind, producer, instance_id=args.instance_id, dead_letters=dlq)
    try:
        stats = bridge.run(max_messages=args.max_messages, idle_timeout_s=args.idle_timeout_s, stop=stop.is_set)
    finally:
        bridge.close()
        if dlq is not None:
            dlq.flush()
            dlq.close()
    summary = dataclasses.asdict(stats)
    summary["dead_letter_topic"] = dlq_topic
    return summary

