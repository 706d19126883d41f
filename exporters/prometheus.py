"""Prometheus export of the shadow: a collector over read-only views, and the HTTP server that serves it.

``ShadowCollector(view_fn)`` builds fresh metric families from ``view_fn()`` at every scrape (the
prometheus_client collector protocol); nothing is kept between scrapes, so a restored service exports exactly
what its restored state holds. Names, types and labels are the contract in docs/metrics.md.

Labels: the SGLang instance a series describes is in ``sglang_instance`` — never ``instance``, which belongs to
the scrape target (shadowsim's own host:port), so the standard scrape of kube-prometheus-stack or any
Prometheus needs no ``honor_labels``, and SGLang's own targets keep their labels too
(deploy/prometheus/rules/shadowsim-recording.yml joins the two).

``MetricsServer`` is prometheus_client's WSGI app (gzip when asked, OpenMetrics when the scraper's Accept header
asks for it) on a threading server of its own thread, with a socket timeout and a cap on concurrent connections,
plus ``/healthz`` (liveness) and ``/readyz`` (readiness) as JSON.
"""
from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric)
from prometheus_client.registry import Collector

from exporters.view import ShadowView

P = "shadowsim_"
#: The label naming the SGLang instance a series describes (its id in the events: the Kafka key).
INSTANCE_LABEL = "sglang_instance"
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
#: ``kind`` values of shadowsim_recoveries_total (ShadowService.counters)
_RECOVERY_KINDS = ("twin_rebuilds", "twin_resets", "snapshot_fallbacks", "offset_resets")


#: one unit of an instance's series for the budget: (number of samples, the call that adds them to their family)
_Unit = tuple[int, Callable[[], None]]


class _InstanceFamilies:
    """The per-instance metric families of one scrape, and the series one instance view adds to them, as units
    the series budget takes or leaves whole (a histogram is never cut between its buckets)."""

    def __init__(self, build: Any, up: Any, lat: dict[str, Any], ape: Any, mape: Any, thr: Any, drift: Any, fac: Any,
                 base: Any, counters: dict[str, Any], gauges: dict[str, Any], processed: Any, late: Any, lag: Any,
                 last: Any, expired: Any, shed: Any) -> None:
        self.build, self.up, self.lat, self.ape, self.mape, self.thr = build, up, lat, ape, mape, thr
        self.drift, self.fac, self.base, self.counters, self.gauges = drift, fac, base, counters, gauges
        self.processed, self.late, self.lag, self.last, self.expired = processed, late, lag, last, expired
        self.shed = shed

    @staticmethod
    def _one(fam: Any, labels: list[str], value: float) -> _Unit:
        return 1, lambda: fam.add_metric(labels, value)

    def small(self, v: Any) -> list[_Unit]:
        lv = [v.instance, v.model]
        units = [self._one(self.up, lv, 1.0),
                 self._one(self.build, [v.version, v.model, v.instance, v.latency_model, v.calibration_hash,
                                        "true" if v.emulated else "false"], 1.0),
                 self._one(self.processed, [v.instance], float(v.events_processed)),
                 self._one(self.late, [v.instance], float(v.events_late)),
                 self._one(self.expired, [v.instance], float(v.requests_expired)),
                 self._one(self.shed, [v.instance], float(v.requests_shed))]
        if v.shadow_lag_s is not None:
            units.append(self._one(self.lag, [v.instance], v.shadow_lag_s))
        if v.last_event_wall_ts is not None:
            units.append(self._one(self.last, [v.instance], v.last_event_wall_ts))
        for c, fam in self.counters.items():
            units += [self._one(fam, [*lv, src], float(n)) for src, n in v.counters[c].items()]
        for k, fam in self.gauges.items():
            units += [self._one(fam, [*lv, src], x) for src, x in v.gauges.get(k, {}).items()]
        units += [self._one(self.drift, [*lv, kind], 1.0 if on else 0.0) for kind, on in v.drift.items()]
        for mode, by_metric in v.mape.items():
            # No finished request in the window: no error to report. Absent, not 0 (0 reads as perfect).
            units += [self._one(self.mape, [*lv, m, mode], x) for m, x in by_metric.items()
                      if v.window_counts.get(mode, {}).get(m, 0) > 0]
        units += [self._one(self.thr, [*lv, m], x) for m, x in v.thresholds.items()]
        for c, x in v.factors.items():
            units += [self._one(self.fac, [*lv, c], x), self._one(self.base, [*lv, c], v.factor_baseline.get(c, 1.0))]
        return units

    @staticmethod
    def _hist(fam: Any, labels: list[str], h: Any) -> _Unit:
        buckets = h.cumulative()
        return len(buckets) + 2, lambda: fam.add_metric(labels, buckets=buckets, sum_value=h.total)  # + _sum, _count

    def histograms(self, v: Any) -> list[_Unit]:
        lv = [v.instance, v.model]
        units = [self._hist(fam, [*lv, src], h) for m, fam in self.lat.items() for src, h in v.latency[m].items()]
        units += [self._hist(self.ape, [*lv, m, mode], h) for m, by_mode in v.ape.items() for mode, h in by_mode.items()]
        return units


class ShadowCollector(Collector):
    """Collector over ``view_fn()`` (called once per scrape)."""

    def __init__(self, view_fn: Callable[[], ShadowView]) -> None:
        self._view_fn = view_fn

    def collect(self) -> Iterator[Metric]:
        view = self._view_fn()
        il = [INSTANCE_LABEL, "model"]
        build = GaugeMetricFamily(P + "build_info", "build and calibration profile of each twin (=1)",
                                  labels=["version", "model", INSTANCE_LABEL, "latency_model", "calibration_hash",
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
        processed = CounterMetricFamily(P + "events_processed", "events applied to a twin", labels=[INSTANCE_LABEL])
        late = CounterMetricFamily(P + "events_late", "events that arrived behind the simulated time",
                                   labels=[INSTANCE_LABEL])
        lag = GaugeMetricFamily(P + "shadow_lag_seconds", "wall time minus the event time simulated",
                                labels=[INSTANCE_LABEL])
        last = GaugeMetricFamily(P + "last_event_timestamp_seconds", "wall time of the last event applied",
                                 labels=[INSTANCE_LABEL])
        dead = CounterMetricFamily(P + "events_dead_lettered", "records sent to the dead-letter topic",
                                   labels=["reason"])
        expired = CounterMetricFamily(P + "requests_expired", "requests forgotten unjoined (finish never came)",
                                      labels=[INSTANCE_LABEL])
        shed = CounterMetricFamily(P + "requests_shed", "requests refused by the twin's full simulator queue "
                                   "(limits.max_simulated_queue), as SGLang's --max-queued-requests refuses them",
                                   labels=[INSTANCE_LABEL])
        skipped = CounterMetricFamily(P + "records_skipped", "records with nothing of SGLang's in them",
                                      labels=["reason"])
        skipped.add_metric(["not_sglang"], float(view.records_skipped))
        recoveries = CounterMetricFamily(P + "recoveries", "what the service repaired: twins rebuilt or reset, "
                                         "snapshot fallbacks, offset resets", labels=["kind"])
        for kind in _RECOVERY_KINDS:
            recoveries.add_metric([kind], float(view.service_counters.get(kind, 0)))
        # table entries the service forgot by the twins' expiry rule (issue 11): DP-rank routes of requests whose
        # finish never came (shadowsim.shadow.ranks.RankRouter.expire)
        forgotten = CounterMetricFamily(P + "table_entries_expired", "service table entries forgotten by event-time "
                                        "expiry: dp_rank_routes (requests whose finish never came)", labels=["table"])
        forgotten.add_metric(["dp_rank_routes"], float(view.service_counters.get("dp_routes_expired", 0)))
        service = [skipped, recoveries, forgotten]
        fams = _InstanceFamilies(build, up, lat, ape, mape, thr, drift, fac, base, counters, gauges, processed,
                                 late, lag, last, expired, shed)
        dropped = GaugeMetricFamily(P + "series_dropped", "series of this SGLang instance left out of this "
                                    "exposition by the series budget (limits.max_series_per_instance)",
                                    labels=[INSTANCE_LABEL])
        budget = view.max_series_per_instance
        groups: dict[str, list[Any]] = {}
        for v in view.instances:
            groups.setdefault(v.series_group or v.instance, []).append(v)
        for group, views in groups.items():
            # every twin's small series first (counters, gauges, verdicts), then the histograms, each unit whole:
            # a budget too small for all of them leaves out histograms of the last twins before anything else
            units = [u for v in views for u in fams.small(v)] + [u for v in views for u in fams.histograms(v)]
            used = left_out = 0
            for cost, add in units:
                if budget is None or used + cost <= budget:
                    add()
                    used += cost
                else:
                    left_out += cost
            dropped.add_metric([group], float(left_out))  # 0 is a fact here (nothing left out), not "no data"
        service.append(dropped)
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
        yield shed
        yield from service
        yield lag
        yield last


def make_registry(view_fn: Callable[[], ShadowView]) -> CollectorRegistry:
    """A fresh registry holding only the shadow's collector (no process/GC collectors: the contract is ours)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ShadowCollector(view_fn))
    return reg


class _QuietHandler(WSGIRequestHandler):
    """No access log (a scrape every 15 s would flood it); a socket timeout so a stalled client frees its thread."""

    timeout = 10.0

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        return


class _BoundedServer(ThreadingWSGIServer):
    """prometheus_client's threading WSGI server, refusing connections beyond ``max_connections`` at once."""

    max_connections = 16
    _slots: threading.BoundedSemaphore

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


Probe = Callable[[], dict[str, Any]]


class MetricsServer:
    """``/metrics`` (prometheus_client: text or OpenMetrics, gzip), ``/healthz`` and ``/readyz`` (JSON; 200 while the
    probe's ``ok`` is true, else 503), in a daemon thread of its own.

    ``health_fn`` answers liveness (is the loop still turning?), ``ready_fn`` readiness (is this replica doing its
    share?); either defaults to always ok. ``timeout_s`` bounds how long one connection may sit idle, and at most
    ``max_connections`` are served at once (the rest get 503 at once)."""

    def __init__(self, registry: CollectorRegistry, port: int, host: str = "127.0.0.1",
                 health_fn: Probe | None = None, ready_fn: Probe | None = None, *,
                 timeout_s: float = 10.0, max_connections: int = 16) -> None:
        metrics_app = make_wsgi_app(registry)
        probes: dict[str, Probe] = {"/healthz": health_fn or (lambda: {"ok": True}),
                                    "/readyz": ready_fn or (lambda: {"ok": True})}

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "/")
            if path in ("/metrics", "/metrics/"):
                return metrics_app(environ, start_response)  # type: ignore[no-any-return]
            probe = probes.get(path.rstrip("/") or "/")
            if probe is not None:
                try:
                    result = probe()
                except Exception as exc:  # noqa: BLE001 - a failing probe is a failed check, not a 500 page
                    result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                body = json.dumps(result, sort_keys=True, default=str).encode()
                status = "200 OK" if result.get("ok") else "503 Service Unavailable"
                start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                                        ("Cache-Control", "no-store")])
                return [body]
            body = b"shadowsim: see /metrics, /healthz and /readyz\n"
            start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
            return [body]

        handler = type("Handler", (_QuietHandler,), {"timeout": timeout_s})
        server_cls = type("Server", (_BoundedServer,), {
            "max_connections": max_connections, "_slots": threading.BoundedSemaphore(max_connections),
            "address_family": socket.AF_INET6 if ":" in host else socket.AF_INET})
        self._server = make_server(host, port, app, server_cls, handler_class=handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-http", daemon=True)

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
