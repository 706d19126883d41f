"""Wiring of the live shadow: Kafka source + service + predictions sink + metrics server, for `shadowsim run`
and the demo. Built from one frozen ``ShadowConfig``.

Probes (served next to /metrics):
  * ``/healthz`` — liveness: the consumer loop has polled within ``LIVENESS_TIMEOUT_S`` (a poll returns within
    its 0.5 s timeout even when Kafka is empty or down, so a longer silence means the loop is stuck). Before the
    first poll, the process counts as alive for ``STARTUP_GRACE_S`` (joining the group, restoring snapshots).
  * ``/readyz`` — readiness: alive, has polled at least once, and the consumer has joined its group with at
    least one partition (a replica beyond the partition count idles and says so).
"""
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
#: Longest silence between two polls of a live loop (a poll itself returns within 0.5 s; a checkpoint or a big
#: batch takes seconds at most).
LIVENESS_TIMEOUT_S = 60.0
#: How long a process that has not polled yet still counts as alive (group join, snapshot restore).
STARTUP_GRACE_S = 120.0


class ShadowRuntime:
    def __init__(self, cfg: ShadowConfig, *, metrics_host: str = "127.0.0.1", make_source: SourceFactory | None = None,
                 clock: Callable[[], float] = time.time, serve_metrics: bool = True,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        k = cfg.kafka
        self._monotonic = monotonic
        self._started = monotonic()
        self._last_poll: float | None = None  # monotonic time the loop last came back from a poll
        self._assigned = 0  # partitions assigned at the last poll
        security: dict[str, Any] = {}
        if make_source is None:
            from streams.kafka_security import security_kwargs  # noqa: PLC0415

            security = security_kwargs(k.security)
            # kafka-python's consumer blocks forever on an unreachable bootstrap server; fail with a message instead
            # (an orchestrator restarts us; a human fixes the address).
            from streams.broker import wait_until_answers  # noqa: PLC0415

            try:
                wait_until_answers(k.bootstrap_servers.split(",")[0].strip(), KAFKA_WAIT_S, **security)
            except (TimeoutError, ValueError) as exc:
                hint = ("start one (shadowsim broker) or fix the address" if k.security.protocol == "PLAINTEXT" else
                        f"fix the address or the {k.security.describe()} settings (kafka.security, SHADOWSIM_KAFKA_*)")
                raise UserError("--bootstrap-servers", f"no Kafka answered at {k.bootstrap_servers} "
                                f"({k.security.describe()}) within {KAFKA_WAIT_S:.0f} s: {exc}", hint) from exc
        make_source = make_source or kafka_source_factory(k.bootstrap_servers, k.topic, k.group, k.dead_letter_topic,
                                                          session_timeout_ms=k.session_timeout_ms,
                                                          max_dead_letter_bytes=cfg.limits.max_dead_letter_bytes,
                                                          **security)
        self.server: MetricsServer | None = None
        self.registry = make_registry(self.view)
        if serve_metrics:  # bind first: a taken port should fail before we join a consumer group
            try:
                self.server = MetricsServer(self.registry, cfg.metrics_port, metrics_host, self.health, self.ready)
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

    def _poll_age_s(self) -> float | None:
        return None if self._last_poll is None else self._monotonic() - self._last_poll

    def health(self) -> dict[str, Any]:
        """Liveness: the loop polled within LIVENESS_TIMEOUT_S (or is still starting). Reads no locked state, so
        it answers even while the loop holds the service lock."""
        age = self._poll_age_s()
        if age is None:
            up_s = self._monotonic() - self._started
            ok, why = up_s < STARTUP_GRACE_S, f"no poll yet, {up_s:.1f} s after start"
        else:
            ok, why = age < LIVENESS_TIMEOUT_S, f"last poll {age:.1f} s ago"
        return {"ok": ok, "status": why, "last_poll_age_s": None if age is None else round(age, 3),
                "liveness_timeout_s": LIVENESS_TIMEOUT_S}

    def ready(self) -> dict[str, Any]:
        """Readiness: alive, polled at least once, and owns at least one partition."""
        live = self.health()
        s = self.service
        parts = sorted(f"{t}-{p}" for t, p in list(s.partitions))
        assigned = self._assigned
        if not live["ok"]:
            ok, why = False, "not live: " + live["status"]
        elif self._last_poll is None:
            ok, why = False, "not polled yet"
        elif assigned == 0:
            ok, why = False, "no partition assigned (joining the group, or more replicas than partitions)"
        else:
            ok, why = True, f"{assigned} partitions assigned"
        return {"ok": ok, "status": why, "partitions": parts, "twins": len(s.twins),
                "records_processed": s.records_processed, "checkpoints": s.checkpoints,
                "last_poll_age_s": live["last_poll_age_s"]}

    def _status(self, service: ShadowService) -> None:
        now = time.monotonic()
        if now - self._last_status < STATUS_EVERY_S:
            return
        self._last_status = now
        v = self.view()
        # no finished request in the window: no MAPE yet ("-"), as /metrics leaves the gauge out
        parts = [f"{i.instance}: lag {i.shadow_lag_s or 0:.1f}s ttft-mape "
                 + (f"{i.mape['free']['ttft']:.0%}" if i.window_counts.get('free', {}).get('ttft', 0) else "-")
                 for i in v.instances]
        print(f"[shadowsim] {v.records_processed} records; " + ("; ".join(parts) or "no twin yet"), file=sys.stderr,
              flush=True)

    def run(self, *, stop: threading.Event | None = None, idle_timeout_s: float | None = None,
            max_records: int | None = None, status: bool = False,
            on_batch: Callable[[ShadowService], None] | None = None) -> int:
        def batch_hook(svc: ShadowService) -> None:
            self._last_poll = self._monotonic()
            self._assigned = len(svc.source.assignment())  # read here, in the loop's thread (kafka-python's rule)
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
