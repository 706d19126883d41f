"""Prometheus export of the shadow: a collector over read-only views, and a tiny HTTP server.

``ShadowCollector(view_fn)`` builds fresh metric families from ``view_fn()`` at every scrape (the
prometheus_client collector protocol); nothing is kept between scrapes, so a restored service exports exactly
what its restored state holds. Names, types and labels are the contract in docs/metrics.md.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric)
from prometheus_client.registry import Collector

from exporters.view import ShadowView

P = "shadowsim_"
_LATENCY_DOC = {
    "ttft": "time to first token, predicted and actual (SGLang's TTFT buckets)",
    "tpot": "time per output token, predicted and actual (SGLang's inter-token-latency buckets)",
    "e2e": "request end-to-end latency, predicted and actual (SGLang's e2e buckets)",
}
_COUNTER_DOC = {
    "requests_finished": "finished requests",
    "output_tokens": "generated tokens of finished requests",
    "prompt_tokens": "prompt tokens of finished requests",
    "cached_tokens": "prompt tokens served from the prefix cache",
}
_GAUGES = (("queue", "queue_requests", "waiting requests"),
           ("running", "running_requests", "running requests"),
           ("kv_usage", "kv_usage_ratio", "KV pool in use / capacity"))
_SERVICE_COUNTER_DOC = {
    "twin_rebuilds": "twins rebuilt (last checkpoint + journal) after a record failed to apply",
    "twin_resets": "twins restarted empty because their rebuild failed too",
    "snapshot_fallbacks": "partitions resumed from an older snapshot than the newest (or none) because it was unusable",
    "offset_resets": "partitions whose snapshot offset was outside the partition at assignment",
}


class ShadowCollector(Collector):
    """Collector over ``view_fn()`` (called once per scrape)."""

    def __init__(self, view_fn: Callable[[], ShadowView]) -> None:
        self._view_fn = view_fn

    def collect(self) -> Iterator[Metric]:
        view = self._view_fn()
        il = ["instance", "model"]
        build = GaugeMetricFamily(P + "build_info", "build and calibration profile of each twin (=1)",
                                  labels=["version", "model", "instance", "latency_model", "calibration_hash",
                                          "emulated"])
        up = GaugeMetricFamily(P + "twin_up", "a twin exists for this instance (=1)", labels=il)
        lat = {m: HistogramMetricFamily(P + f"{m}_seconds", doc, labels=[*il, "source"])
               for m, doc in _LATENCY_DOC.items()}
        ape = HistogramMetricFamily(P + "prediction_ape_ratio",
                                    "absolute percentage error per finished request, as a ratio (0.1 = 10 %)",
                                    labels=[*il, "metric", "mode"])
        mape = GaugeMetricFamily(P + "prediction_mape_ratio",
                                 "mean absolute percentage error over the rolling event-time window",
                                 labels=[*il, "metric", "mode"])
        thr = GaugeMetricFamily(P + "drift_threshold_ratio", "configured alert threshold for that MAPE",
                                labels=[*il, "metric"])
        drift = GaugeMetricFamily(P + "drift_detected", "drift verdict of the detector (0/1)", labels=[*il, "kind"])
        fac = GaugeMetricFamily(P + "calibration_factor", "current (online) calibration factor; 1.0 = as profiled",
                                labels=[*il, "op_class"])
        base = GaugeMetricFamily(P + "calibration_factor_baseline", "factor of the loaded profile",
                                 labels=[*il, "op_class"])
        counters = {c: CounterMetricFamily(P + f"{c}", doc, labels=[*il, "source"]) for c, doc in _COUNTER_DOC.items()}
        gauges = {k: GaugeMetricFamily(P + name, doc, labels=[*il, "source"]) for k, name, doc in _GAUGES}
        processed = CounterMetricFamily(P + "events_processed", "events applied to a twin", labels=["instance"])
        late = CounterMetricFamily(P + "events_late", "events that arrived behind the simulated time",
                                   labels=["instance"])
        lag = GaugeMetricFamily(P + "shadow_lag_seconds", "wall time minus the event time simulated",
                                labels=["instance"])
        last = GaugeMetricFamily(P + "last_event_timestamp_seconds", "wall time of the last event applied",
                                 labels=["instance"])
        dead = CounterMetricFamily(P + "events_dead_lettered", "records sent to the dead-letter topic",
                                   labels=["reason"])
        expired = CounterMetricFamily(P + "requests_expired", "requests forgotten unjoined (finish never came)",
                                      labels=["instance"])
        service = [CounterMetricFamily(P + "records_skipped", "records with nothing of SGLang's in them",
                                       value=float(view.records_skipped))]
        for name, doc in _SERVICE_COUNTER_DOC.items():
            service.append(CounterMetricFamily(P + name, doc, value=float(view.service_counters.get(name, 0))))
        for v in view.instances:
            lv = [v.instance, v.model]
            build.add_metric([v.version, v.model, v.instance, v.latency_model, v.calibration_hash,
                              "true" if v.emulated else "false"], 1.0)
            up.add_metric(lv, 1.0)
            for m, fam in lat.items():
                for src, h in v.latency[m].items():
                    fam.add_metric([*lv, src], buckets=h.cumulative(), sum_value=h.total)
            for m, by_mode in v.ape.items():
                for mode, h in by_mode.items():
                    ape.add_metric([*lv, m, mode], buckets=h.cumulative(), sum_value=h.total)
            for mode, by_metric in v.mape.items():
                for m, x in by_metric.items():
                    mape.add_metric([*lv, m, mode], x)
            for m, x in v.thresholds.items():
                thr.add_metric([*lv, m], x)
            for kind, on in v.drift.items():
                drift.add_metric([*lv, kind], 1.0 if on else 0.0)
            for c, x in v.factors.items():
                fac.add_metric([*lv, c], x)
                base.add_metric([*lv, c], v.factor_baseline.get(c, 1.0))
            for c, fam in counters.items():
                for src, n in v.counters[c].items():
                    fam.add_metric([*lv, src], float(n))
            for k, fam in gauges.items():
                for src, x in v.gauges.get(k, {}).items():
                    fam.add_metric([*lv, src], x)
            processed.add_metric([v.instance], float(v.events_processed))
            expired.add_metric([v.instance], float(v.requests_expired))
            late.add_metric([v.instance], float(v.events_late))
            if v.shadow_lag_s is not None:
                lag.add_metric([v.instance], v.shadow_lag_s)
            if v.last_event_wall_ts is not None:
                last.add_metric([v.instance], v.last_event_wall_ts)
        for reason, n in sorted(view.dead_letters.items()):
            dead.add_metric([reason], float(n))
        yield build
        yield up
        yield from lat.values()
        yield ape
        yield mape
        yield thr
        yield drift
        yield fac
        yield base
        yield from counters.values()
        yield from gauges.values()
        yield processed
        yield late
        yield dead
        yield expired
        yield from service
        yield lag
        yield last


def make_registry(view_fn: Callable[[], ShadowView]) -> CollectorRegistry:
    """A fresh registry holding only the shadow's collector (no process/GC collectors: the contract is ours)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ShadowCollector(view_fn))
    return reg


class MetricsServer:
    """``/metrics`` (Prometheus text format) and ``/healthz`` (JSON, 200 while ``health_fn`` says ok)."""

    def __init__(self, registry: CollectorRegistry, port: int, host: str = "0.0.0.0",
                 health_fn: Callable[[], dict[str, Any]] | None = None) -> None:
        reg, health = registry, health_fn or (lambda: {"ok": True})

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body, ctype, code = generate_latest(reg), CONTENT_TYPE_LATEST, 200
                elif path == "/healthz":
                    h = health()
                    body, ctype = json.dumps(h).encode(), "application/json"
                    code = 200 if h.get("ok") else 503
                else:
                    body, ctype, code = b"see /metrics and /healthz\n", "text/plain", 404
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:  # scrapes every 15 s would flood the terminal
                return

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-http", daemon=True)

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
