"""The live shadow: consume SGLang events from Kafka, keep one simulated twin per SGLang instance, and export
predicted-vs-actual metrics to Prometheus.

Each instance's twin advances in *event time*: it simulates a request once the request's output length is known
(when it finishes), so the simulated clock trails the newest event by up to the longest request in flight, and
never by more than --max-wait-s (after which a request is simulated with an estimated length). Predictions per
request, joined with the actual values, are appended to --predictions (JSONL, de-duplicate by instance and
request_id). State is snapshotted to --state-dir every --snapshot-every-s seconds or --snapshot-every-events
records; a restarted process resumes from there. Several processes in one --group share the partitions.

Kafka TLS and SASL come from shadow.yaml's kafka.security section and SHADOWSIM_KAFKA_* environment variables
(SHADOWSIM_KAFKA_SECURITY_PROTOCOL=SASL_SSL, SHADOWSIM_KAFKA_SASL_MECHANISM=SCRAM-SHA-512, ..._SASL_USERNAME,
..._SASL_PASSWORD or ..._SASL_PASSWORD_FILE, ..._SSL_CAFILE; see docs/operations.md, "Kafka security").

Examples:
  shadowsim run --bootstrap-servers kafka:9092 --config shadow.yaml
  shadowsim run --topic sglang.events --group shadow --metrics-port 9400 --predictions preds.jsonl
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from simcore.errors import UserError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-servers", help="Kafka bootstrap servers, host:port[,host:port] "
                   "(default: kafka.bootstrap_servers of --config, else 127.0.0.1:9092)")
    p.add_argument("--topic", help="topic of SGLang events (default sglang.events)")
    p.add_argument("--dead-letter-topic", help="topic for records that do not decode (default sglang.events.dlq)")
    p.add_argument("--group", help="consumer group; processes of one group share the partitions (default shadowsim)")
    p.add_argument("--session-timeout-ms", type=int, help="Kafka group session timeout (default 10000): how long "
                   "a dead member keeps its partitions")
    p.add_argument("--config", type=Path, help="shadow.yaml: model/GPU/TP/precision/profile per instance, event-time "
                   "rules, drift thresholds (see docs/shadow.md; deploy/shadow.yaml is the deployments' example). "
                   "Without it, or for an instance it does not describe, a twin uses the model/GPU of the server's "
                   "server_config events, else the placeholder linear latency model (logged once)")
    p.add_argument("--metrics-port", type=int, help="port of /metrics and /healthz (default 9400; 0 = any free)")
    p.add_argument("--metrics-host", default="127.0.0.1", help="address to serve /metrics, /healthz and /readyz on "
                   "(default 127.0.0.1, this host only; 0.0.0.0 in a container, where Prometheus scrapes from outside)")
    p.add_argument("--state-dir", type=Path, help="directory of the snapshot files (default ./shadow-state)")
    p.add_argument("--predictions", type=Path, help="append per-request predictions joined with actuals (JSONL)")
    p.add_argument("--snapshot-every-s", type=float, help="wall seconds between checkpoints (default 10)")
    p.add_argument("--snapshot-every-events", type=int, help="records between checkpoints (default 5000)")
    p.add_argument("--max-wait-s", type=float, help="event seconds a request may wait for its output length "
                   "before it is simulated with an estimate (default 60)")
    p.add_argument("--allowed-lateness-s", type=float, help="watermark = newest event time - this (default 2)")
    p.add_argument("--exit-when-idle-s", type=float, help="stop after this many wall seconds without records "
                   "(for batch replays and tests; default: run until Ctrl-C / SIGTERM)")
    p.add_argument("--quiet", action="store_true", help="no periodic status line on stderr")


def config_from_args(args: argparse.Namespace) -> Any:
    from shadowsim.shadow.config import load_config  # noqa: PLC0415

    return load_config(args.config, {
        "kafka.bootstrap_servers": args.bootstrap_servers, "kafka.topic": args.topic,
        "kafka.dead_letter_topic": args.dead_letter_topic, "kafka.group": args.group,
        "kafka.session_timeout_ms": args.session_timeout_ms,
        "metrics_port": args.metrics_port, "snapshot.dir": str(args.state_dir) if args.state_dir else None,
        "predictions_path": str(args.predictions) if args.predictions else None,
        "snapshot.every_s": args.snapshot_every_s, "snapshot.every_events": args.snapshot_every_events,
        "time.max_wait_s": args.max_wait_s, "time.allowed_lateness_s": args.allowed_lateness_s,
    })


#: allocations between two young-generation collections of the long-running loop (CPython's default: 700)
GC_YOUNG_THRESHOLD = 50_000


def tune_gc() -> None:
    """Garbage collection for a long-running loop that allocates a few short-lived objects per record: the objects
    of start-up (modules, schemas, the latency tables) move to the permanent generation (``gc.freeze``), so later
    collections do not traverse them again, and a young collection runs every ``GC_YOUNG_THRESHOLD`` allocations
    instead of every 700 (the records' objects die by reference counting; the collector only finds cycles).
    Measured in benchmarks/bench_ingest.py (docs/shadow.md, "Ingest speed")."""
    import gc  # noqa: PLC0415

    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def run(args: argparse.Namespace) -> int:
    try:
        cfg = config_from_args(args)
        from shadowsim.shadow.runtime import ShadowRuntime  # noqa: PLC0415

        rt = ShadowRuntime(cfg, metrics_host=args.metrics_host)
    except UserError as exc:
        print(f"shadowsim: error: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def _stop(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    tune_gc()
    print(f"shadowsim run: topic {cfg.kafka.topic} group {cfg.kafka.group} at {cfg.kafka.bootstrap_servers} "
          f"({cfg.kafka.security.describe()}); metrics on {args.metrics_host}:{rt.metrics_port}/metrics "
          "(/healthz, /readyz)", file=sys.stderr, flush=True)
    try:
        n = rt.run(stop=stop, idle_timeout_s=args.exit_when_idle_s, status=not args.quiet)
    finally:
        rt.close()
    print(f"shadowsim run: stopped after {n} records", file=sys.stderr)
    return 0
