"""Kafka I/O benchmark: produce → consume → validate through the embedded Tansu broker.

Figures (events per second, one process, 2-core CI box in mind):

* ``produce_ev_s``   — ``EventProducer.send`` of canonical JSON (acks=all) until ``flush()`` returns;
* ``consume_ev_s``   — ``EventConsumer.poll_batch`` (group member, decode + validation via ``streams.decode``);
* ``e2e_ev_s``       — events / (produce start → last event validated), producer and consumer overlapping;
* ``decode_ev_s``    — the same decoding without Kafka, for comparison;
* ``reorder_ev_s``   — ``ReorderBuffer`` push + release over 8 interleaved instances.

Run: ``python -m benchmarks.bench_kafka [N_EVENTS]`` (default 50,000). Prints a table and one JSON line.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

N_DEFAULT = 50_000


def _payloads(n: int) -> list[tuple[bytes, bytes]]:
    out = []
    for i in range(n):
        inst = f"inst-{i % 8}".encode()
        out.append((b'{"schema_version":1,"kind":"decode_batch","instance_id":"%s","ts":%d.25,"running_reqs":%d,'
                    b'"kv_tokens":%d,"event_id":"e%d"}' % (inst, 1_700_000_000 + i // 100, i % 64, i * 7, i), inst))
    return out


def _drain(consumer: Any, n: int) -> None:
    """Poll ``consumer`` until ``n`` more events have been decoded, committing each batch as a shadow would."""
    count = 0
    while count < n:
        recs = consumer.poll_batch(1.0)
        count += sum(len(r.events) for r in recs)
        if recs:
            consumer.commit({(r.topic, r.partition): r.next_offset for r in recs})


def bench(n: int = N_DEFAULT) -> dict[str, float]:
    from streams.broker import EmbeddedBroker
    from streams.decode import decode_record
    from streams.kafka_io import EventConsumer, EventProducer
    from streams.reorder import ReorderBuffer

    payloads = _payloads(n)
    res: dict[str, float] = {"events": n}

    t = time.perf_counter()
    decoded = [decode_record(v, key=k, source="bench", fmt="events").events[0] for v, k in payloads]
    res["decode_ev_s"] = n / (time.perf_counter() - t)

    clock = [0.0]
    buf = ReorderBuffer(allowed_lateness_s=2.0, clock=lambda: clock[0])
    t = time.perf_counter()
    released = 0
    for ev in decoded:
        released += len(buf.push(ev))
    released += len(buf.flush())
    res["reorder_ev_s"] = n / (time.perf_counter() - t)
    assert released == n

    with EmbeddedBroker() as broker:
        bs = broker.bootstrap_servers
        broker.create_topics({"bench": 4, "bench.dlq": 4, "bench2": 4})
        # 1. produce alone
        t = time.perf_counter()
        with EventProducer(bs, "bench", linger_ms=20) as prod:
            for v, k in payloads:
                prod.send_raw(v, k)
            prod.flush()
        res["produce_ev_s"] = n / (time.perf_counter() - t)
        # 2. consume alone (after the group join, which is excluded: ~3 s on Tansu)
        consumer = EventConsumer(bs, "bench", "bench-g", dead_letter_topic="bench.dlq", session_timeout_ms=6000,
                                 record_format="events", max_poll_records=5000)
        got = consumer.poll_batch(5.0)
        while not consumer.assignment():
            got += consumer.poll_batch(0.5)
        early = sum(len(r.events) for r in got)  # polled during the join: outside the timed window
        t = time.perf_counter()
        _drain(consumer, n - early)
        res["consume_ev_s"] = (n - early) / (time.perf_counter() - t) if early < n else float("nan")
        consumer.close()
        # 3. end to end: a joined consumer waits; the producer starts; stop at the last validated event
        consumer = EventConsumer(bs, "bench2", "bench-g2", dead_letter_topic=None, session_timeout_ms=6000,
                                 record_format="events", max_poll_records=5000)
        while not consumer.assignment():
            consumer.poll_batch(0.5)

        def produce() -> None:
            with EventProducer(bs, "bench2", linger_ms=20) as prod:
                for v, k in payloads:
                    prod.send_raw(v, k)

        t = time.perf_counter()
        feeder = threading.Thread(target=produce)
        feeder.start()
        _drain(consumer, n)
        res["e2e_ev_s"] = n / (time.perf_counter() - t)
        feeder.join()
        consumer.close()
    return res


def main(n: int = N_DEFAULT) -> dict[str, float]:
    """Run the benchmark on ``n`` events, print the table and the JSON line, return the figures."""
    res = bench(n)
    print(f"kafka I/O through embedded Tansu, {n:,} events (canonical decode_batch JSON, 8 instances, 4 partitions)")
    for key in ("produce_ev_s", "consume_ev_s", "e2e_ev_s", "decode_ev_s", "reorder_ev_s"):
        print(f"  {key:<14} {res[key]:>12,.0f} events/s")
    print(json.dumps({"bench": "kafka", **{k: round(v, 1) for k, v in res.items()}}))
    return res


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else N_DEFAULT)
