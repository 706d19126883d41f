"""Read-only views of the shadow's state, built under the service lock at scrape time.

The exporter and the terminal UI read these frozen records, never the twins themselves, so a scrape sees one
consistent moment and cannot change anything.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from importlib import metadata

from shadowsim.shadow.config import METRICS
from shadowsim.shadow.stats import Histogram

if False:  # pragma: no cover - typing only, avoids an import cycle
    from shadowsim.shadow.service import ShadowService


@dataclass(frozen=True)
class InstanceView:
    instance: str
    model: str
    version: str
    latency_model: str
    calibration_hash: str
    emulated: bool
    latency: dict[str, dict[str, Histogram]]  # metric -> source -> histogram (copies)
    ape: dict[str, dict[str, Histogram]]  # metric -> mode -> histogram (copies)
    mape: dict[str, dict[str, float]]  # mode -> metric -> MAPE
    window_counts: dict[str, dict[str, int]]  # mode -> metric -> samples in window
    thresholds: dict[str, float]
    drift: dict[str, bool]  # kind -> verdict
    drift_explanation: str
    factors: dict[str, float]
    factor_baseline: dict[str, float]
    counters: dict[str, dict[str, int]]  # name -> source -> value
    gauges: dict[str, dict[str, float]]  # queue/running/kv_usage -> source -> value
    events_processed: int
    events_late: int
    requests_estimated: int
    shadow_lag_s: float | None
    last_event_wall_ts: float | None
    simulated_ts: float | None
    alerts: list[dict[str, Any]]


@dataclass(frozen=True)
class ShadowView:
    instances: list[InstanceView]
    dead_letters: dict[str, int]
    records_processed: int
    checkpoints: int


def _version() -> str:
    try:
        return metadata.version("shadowsim")
    except metadata.PackageNotFoundError:  # running from a source tree that was not installed
        return "0.0.0+unknown"


def _copy(h: Histogram) -> Histogram:
    return Histogram(h.buckets, list(h.counts), h.total)


def build_view(service: ShadowService) -> ShadowView:
    """Take the service lock and copy what the exporter and UI show."""
    with service.lock:
        now = service.clock()
        out = []
        for iid in sorted(service.twins):
            t = service.twins[iid]
            eng = t.engine
            v = t.verdict()
            gauges: dict[str, dict[str, float]] = {"queue": {}, "running": {}, "kv_usage": {}}
            if eng is not None:
                for k, val in eng.state().items():
                    if k in gauges:
                        gauges[k]["predicted"] = float(val)
            for k, val in t.observed.items():
                gauges[k]["actual"] = val
            sim_ts = t.simulated_ts
            out.append(InstanceView(
                instance=iid, model=t.model, version=_version(),
                latency_model=eng.latency.name if eng is not None else "none",
                calibration_hash=eng.latency.profile_hash if eng is not None else "none",
                emulated=service.config.emulated,
                latency={m: {s: _copy(h) for s, h in d.items()} for m, d in t.stats.latency.items()},
                ape={m: {s: _copy(h) for s, h in d.items()} for m, d in t.stats.ape.items()},
                mape={mode: t.mape(mode) for mode in ("free", "anchored")},
                window_counts={mode: {m: len(t.windows[(m, mode)]) for m in METRICS} for mode in ("free", "anchored")},
                thresholds=dict(service.config.drift.mape_threshold),
                drift={"model": v.model, "performance": v.performance},
                drift_explanation=v.explanation,
                factors=dict(t.calibrator.factors),
                factor_baseline={c: 1.0 for c in t.calibrator.factors},
                counters={c: dict(d) for c, d in t.stats.counters.items()},
                gauges=gauges,
                events_processed=t.stats.events_processed,
                events_late=t.stats.events_late,
                requests_estimated=t.stats.requests_estimated,
                shadow_lag_s=t.shadow_lag_s(now),
                last_event_wall_ts=t.last_event_wall_ts,
                simulated_ts=sim_ts,
                alerts=list(t.alerts),
            ))
        return ShadowView(out, service.dead_letters(), service.records_processed, service.checkpoints)
