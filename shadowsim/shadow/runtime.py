"""Wiring of the live shadow: Kafka source + service + predictions sink + metrics server, for `shadowsim run`
and the demo. Built from one frozen ``ShadowConfig``."""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from simcore.errors import UserError
from exporters.prometheus import MetricsServer, make_registry
from shadowsim.shadow.config import ShadowConfig
from shadowsim.shadow.engine import engine_factory
from shadowsim.shadow.service import ShadowService
from shadowsim.shadow.sink import PredictionSink
from shadowsim.shadow.sources import SourceFactory, kafka_source_factory
from shadowsim.shadow.view import ShadowView, build_view

STATUS_EVERY_S = 5.0
KAFKA_WAIT_S = 15.0


class ShadowRuntime:
    def __init__(self, cfg: ShadowConfig, *, metrics_host: str = "0.0.0.0", make_source: SourceFactory | None = None,
                 clock: Callable[[], float] = time.time, serve_metrics: bool = True) -> None:
        self.cfg = cfg
        k = cfg.kafka
        if make_source is None:
            # kafka-python's consumer blocks forever on an unreachable bootstrap server; fail with a message instead
            # (an orchestrator restarts us; a human fixes the address).
            from streams.broker import wait_until_answers  # noqa: PLC0415

            try:
                wait_until_answers(k.bootstrap_servers.split(",")[0].strip(), KAFKA_WAIT_S)
            except (TimeoutError, ValueError) as exc:
                raise UserError("--bootstrap-servers", f"no Kafka answered at {k.bootstrap_servers} within "
                                f"{KAFKA_WAIT_S:.0f} s", "start one (shadowsim broker) or fix the address") from exc
        make_source = make_source or kafka_source_factory(k.bootstrap_servers, k.topic, k.group, k.dead_letter_topic,
                                                          session_timeout_ms=k.session_timeout_ms)
        self.server: MetricsServer | None = None
        self.registry = make_registry(self.view)
        if serve_metrics:  # bind first: a taken port should fail before we join a consumer group
            try:
                self.server = MetricsServer(self.registry, cfg.metrics_port, metrics_host, self.health)
            except OSError as exc:
                raise UserError("--metrics-port", f"cannot listen on {metrics_host}:{cfg.metrics_port}: {exc.strerror}",
                                "pick a free port, or 0 for any") from exc
        sink = PredictionSink(cfg.predictions_path) if cfg.predictions_path is not None else None
        try:
            self.service = ShadowService(cfg, make_source, engine_factory, clock=clock, sink=sink)
        except Exception as exc:
            if self.server is not None:
                self.server.stop()
            if type(exc).__module__.startswith("kafka"):
                raise UserError("--bootstrap-servers", f"cannot reach Kafka at {k.bootstrap_servers}: {exc}",
                                "start a broker (shadowsim broker) or fix the address") from exc
            raise
        if self.server is not None:
            self.server.start()
        self._last_status = time.monotonic()

    @property
    def metrics_port(self) -> int:
        return self.server.port if self.server is not None else 0

    def view(self) -> ShadowView:
        return build_view(self.service)

    def health(self) -> dict[str, Any]:
        s = self.service
        return {"ok": True, "twins": len(s.twins), "partitions": sorted(f"{t}-{p}" for t, p in s.partitions),
                "records_processed": s.records_processed, "checkpoints": s.checkpoints}

    def _status(self, service: ShadowService) -> None:
        now = time.monotonic()
        if now - self._last_status < STATUS_EVERY_S:
            return
        self._last_status = now
        v = self.view()
        parts = [f"{i.instance}: lag {i.shadow_lag_s or 0:.1f}s ttft-mape {i.mape['free']['ttft']:.0%}"
                 for i in v.instances]
        print(f"[shadowsim] {v.records_processed} records; " + "; ".join(parts), file=sys.stderr, flush=True)

    def run(self, *, stop: threading.Event | None = None, idle_timeout_s: float | None = None,
            max_records: int | None = None, status: bool = False,
            on_batch: Callable[[ShadowService], None] | None = None) -> int:
        def batch_hook(svc: ShadowService) -> None:
            if status:
                self._status(svc)
            if on_batch is not None:
                on_batch(svc)

        return self.service.run(stop=stop, idle_timeout_s=idle_timeout_s, max_records=max_records,
                                on_batch=batch_hook)

    def close(self) -> None:
        try:
            self.service.close()
        finally:
            if self.server is not None:
                self.server.stop()
