"""Builds the read-only views of the shadow's state under the service lock, at scrape time.

The view types are the exporter's input contract and live in ``exporters.view`` (re-exported here for the
shadow's own readers); this module is the only place that reads the twins for them.
"""
from __future__ import annotations

from importlib import metadata

from exporters.view import InstanceView, ShadowView
from shadowsim.shadow.config import METRICS
from shadowsim.shadow.ranks import base_instance_id
from shadowsim.shadow.stats import Histogram

if False:  # pragma: no cover - typing only, avoids an import cycle
    from shadowsim.shadow.service import ShadowService

__all__ = ["InstanceView", "ShadowView", "build_view"]

#: service counters exported as shadowsim_<name>_total (always, 0 included)
SERVICE_COUNTERS = ("twin_rebuilds", "twin_resets", "snapshot_fallbacks", "offset_resets")


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
                requests_expired=t.stats.requests_expired,
                requests_shed=t.stats.requests_shed,
                series_group=base_instance_id(iid),
            ))
        return ShadowView(out, service.dead_letters(), service.records_processed, service.checkpoints,
                          records_skipped=service.records_skipped(),
                          service_counters={**{k: v for k, v in service.counters.items() if k in SERVICE_COUNTERS},
                                            "dp_routes_expired": service.ranks.expired},
                          max_series_per_instance=service.config.limits.max_series_per_instance)
