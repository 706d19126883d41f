"""The demo's traffic source: publishes pre-computed emulated events to Kafka at their event time (wall clock).

Canonical events go out as event JSON; scheduler log lines as raw text (as a log shipper would send them). One
deliberately malformed record is sent first so that dead-lettering shows up in the metrics.
"""
from __future__ import annotations

import threading
import time
from typing import Any

# A request_finished event with a negative token count: valid JSON, invalid event -> dead letter.
MALFORMED = (b'{"schema_version": 1, "kind": "request_finished", "instance_id": "emu-azure-conv-2", "ts": 0, '
             b'"request_id": "deliberately-malformed-demo-record", "prompt_tokens": -1, "output_tokens": 1}')


class Publisher(threading.Thread):
    def __init__(self, bootstrap_servers: str, topic: str, items: list[tuple[float, str, Any]], t0_ts: float,
                 end_ts: float) -> None:
        super().__init__(name="demo-publisher", daemon=True)
        self.bootstrap_servers, self.topic, self.items = bootstrap_servers, topic, items
        self.t0_ts, self.end_ts = t0_ts, end_ts
        self._stop_ev = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None

    def stop(self) -> None:
        self._stop_ev.set()
        self.join(timeout=10)

    def run(self) -> None:
        from streams.kafka_io import EventProducer  # noqa: PLC0415

        try:
            with EventProducer(self.bootstrap_servers, self.topic, linger_ms=20) as prod:
                prod.send_raw(MALFORMED, b"emu-azure-conv-2")
                last_flush = time.time()
                for ts, iid, ev in self.items:
                    if ts > self.end_ts or self._stop_ev.is_set():
                        break
                    delay = ts - time.time()
                    if delay > 0:
                        prod.flush()  # everything due so far is on the broker before we sleep
                        if self._stop_ev.wait(delay):
                            break
                    if isinstance(ev, bytes):
                        prod.send_raw(ev, iid.encode())
                    else:
                        prod.send(ev)
                    self.sent += 1
                    if time.time() - last_flush > 0.2:
                        prod.flush()
                        last_flush = time.time()
        except BaseException as exc:  # noqa: BLE001 - reported by the demo at the end
            self.error = exc
