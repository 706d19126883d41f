"""The collector's input contract: read-only views of the shadow's state, one consistent moment per scrape.

The exporter (and the demo's terminal UI) read these frozen records, never the twins themselves, so a scrape
cannot change anything. They live here, next to their reader, so exporters/ depends on nothing of the shadow:
``shadowsim.shadow.view.build_view`` builds them under the service lock (shadowsim → exporters, never back).
Units: seconds (``*_s``, ``*_ts`` are Unix seconds), ratios (``mape``, ``thresholds``, 0.1 = 10 %).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


class HistogramView(Protocol):
    """What the collector reads of a histogram: the sum, the count, and Prometheus' cumulative buckets."""

    total: float  # sum of the observed values

    @property
    def count(self) -> int: ...

    def cumulative(self) -> list[tuple[str, int]]:
        """[(le, cumulative count)] ending with ('+Inf', count)."""
        ...


@dataclass(frozen=True)
class InstanceView:
    instance: str
    model: str
    version: str
    latency_model: str  # LatencyModel.name: "table:h100_sxm:tp2:bf16", "linear", "linear-fallback", ...
    calibration_hash: str  # LatencyModel.profile_hash ("none" for the linear model)
    emulated: bool
    latency: dict[str, dict[str, HistogramView]]  # metric -> source -> histogram (copies)
    ape: dict[str, dict[str, HistogramView]]  # metric -> mode -> histogram (copies)
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
    requests_expired: int = 0  # forgotten unjoined after max_wait_s + pending_expiry_margin_s
    requests_shed: int = 0  # refused by the twin's full simulator queue (limits.max_simulated_queue)
    #: the SGLang instance whose series budget this twin's series count against (its DP ranks' twins share it);
    #: empty: ``instance`` itself
    series_group: str = ""


@dataclass(frozen=True)
class ShadowView:
    instances: list[InstanceView]
    dead_letters: dict[str, int]  # reason -> records dead-lettered
    records_processed: int
    checkpoints: int
    records_skipped: int = 0  # records with nothing of SGLang's in them
    #: twin_rebuilds, twin_resets, snapshot_fallbacks, offset_resets (shadowsim.shadow.service.ShadowService.counters),
    #: dp_routes_expired (shadowsim.shadow.ranks.RankRouter.expired)
    service_counters: dict[str, int] = field(default_factory=dict)
    #: at most this many series per SGLang instance (``series_group``) in one exposition; None: no budget
    max_series_per_instance: int | None = None
