"""Grafana dashboards for shadowsim, as data.

The JSON under deploy/grafana/dashboards/ is generated from this module by `python deploy/tools/render.py`
(tests fail when the committed JSON is stale), so panels share one vocabulary of selectors and units.

Every panel query filters on the dashboard variables `$cluster`, `$model` and `$instance` (regex
matchers, so "All" is `.*`) and uses `$__rate_interval` for rates, which Grafana sizes from the scrape
interval. shadowsim's series name the SGLang instance in `sglang_instance` (the `$instance` variable);
SGLang's own series keep their scrape labels (`instance` = IP:port, `job` from the Service) and `model_name`
instead of `model`, and are joined to `sglang_instance` through the recording rule
`shadowsim:sglang_target:info` (deploy/prometheus/rules/shadowsim-recording.yml): see `_sglang`.
"""
from __future__ import annotations

from typing import Any

DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'cluster=~"$cluster", model=~"$model", sglang_instance=~"$instance"'
SGL = 'cluster=~"$cluster", model_name=~"$model"'
# Pipeline metrics (lag, ingest, dead letters) have no model label.
PIPE = 'cluster=~"$cluster", sglang_instance=~"$instance"'
RI = "$__rate_interval"
#: SGLang's series joined to the shadowed instance id (their own labels stay; `sglang_instance` is added).
JOIN = ('* on (cluster, job, instance) group_left (sglang_instance) '
        'shadowsim:sglang_target:info{cluster=~"$cluster", sglang_instance=~"$instance"}')


def _sglang(expr: str) -> str:
    """An SGLang series (or rate) with `sglang_instance` added by the join, filtered by `$instance`."""
    return f"({expr} {JOIN})"

Panel = dict[str, Any]

_DEFAULT_OPTIONS: dict[str, dict[str, Any]] = {
    "timeseries": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
    "stat": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
             "colorMode": "value", "graphMode": "area", "textMode": "auto"},
    "table": {"showHeader": True, "cellHeight": "sm"},
}


class _Layout:
    """Places panels left to right on Grafana's 24-column grid, wrapping to the next row."""

    def __init__(self) -> None:
        self.x = 0
        self.y = 0
        self.row_h = 0
        self.next_id = 1
        self.panels: list[Panel] = []

    def row(self, title: str) -> None:
        if self.x:
            self.y += self.row_h
        self.x, self.row_h = 0, 0
        self.panels.append({"id": self._id(), "type": "row", "title": title, "collapsed": False,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": []})
        self.y += 1

    def add(self, kind: str, title: str, description: str, targets: list[tuple[str, str]], unit: str,
            w: int = 12, h: int = 8, **options: Any) -> None:
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        panel: Panel = {
            "id": self._id(),
            "type": kind,
            "title": title,
            "description": description,
            "datasource": DS,
            "gridPos": {"h": h, "w": w, "x": self.x, "y": self.y},
            "targets": [
                {"refId": chr(ord("A") + i), "datasource": DS, "expr": expr, "legendFormat": legend,
                 # A table shows the labels of the latest sample; graphs and stats need the range.
                 "range": kind != "table", "instant": kind == "table",
                 "format": "table" if kind == "table" else "time_series"}
                for i, (expr, legend) in enumerate(targets)
            ],
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {**_DEFAULT_OPTIONS[kind], **options},
        }
        self.panels.append(panel)
        self.x += w
        self.row_h = max(self.row_h, h)

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1


def _variables() -> list[dict[str, Any]]:
    def query_var(name: str, label: str, query: str) -> dict[str, Any]:
        return {"name": name, "label": label, "type": "query", "datasource": DS,
                "query": {"query": query, "refId": f"var-{name}"}, "definition": query,
                "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*",
                "current": {"text": "All", "value": "$__all"}, "sort": 1}

    return [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "current": {}, "hide": 0},
        query_var("cluster", "Cluster", "label_values(shadowsim_twin_up, cluster)"),
        query_var("model", "Model", 'label_values(shadowsim_twin_up{cluster=~"$cluster"}, model)'),
        query_var("instance", "Instance",
                  'label_values(shadowsim_twin_up{cluster=~"$cluster", model=~"$model"}, sglang_instance)'),
    ]


def _dashboard(uid: str, title: str, description: str, panels: list[Panel]) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["shadowsim"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": _variables()},
        "annotations": {"list": []},
        "links": [{"title": "shadowsim dashboards", "type": "dashboards", "tags": ["shadowsim"],
                   "asDropdown": True, "includeVars": True, "keepTime": True}],
        "panels": panels,
    }


def _quantile(q: float, metric: str, by: str, sel: str = SEL) -> str:
    return f"histogram_quantile({q}, sum by ({by}, le) (rate({metric}_bucket{{{sel}}}[{RI}])))"


def _sglang_quantile(q: float, metric: str) -> str:
    return (f"histogram_quantile({q}, sum by (sglang_instance, le) "
            f"{_sglang(f'rate({metric}_bucket{{{SGL}}}[{RI}])')})")


def overview() -> dict[str, Any]:
    L = _Layout()
    L.row("Fleet")
    L.add("stat", "Twins", "Number of SGLang instances that have a twin in shadowsim.",
          [(f"count(shadowsim_twin_up{{{SEL}}})", "twins")], "none", w=6, h=4)
    L.add("stat", "Worst TTFT MAPE (free)", "Highest rolling TTFT MAPE of any instance, free-running twin.",
          [(f'max(shadowsim_prediction_mape_ratio{{{SEL}, metric="ttft", mode="free"}})', "TTFT")],
          "percentunit", w=6, h=4)
    L.add("stat", "Worst TPOT MAPE (free)", "Highest rolling TPOT MAPE of any instance, free-running twin.",
          [(f'max(shadowsim_prediction_mape_ratio{{{SEL}, metric="tpot", mode="free"}})', "TPOT")],
          "percentunit", w=6, h=4)
    L.add("stat", "Max shadow lag", "Largest wall-time minus simulated-event-time over all twins.",
          [(f"max(shadowsim_shadow_lag_seconds{{{PIPE}}})", "lag")],
          "s", w=6, h=4)
    L.row("Predicted vs actual, whole fleet")
    L.add("timeseries", "Output throughput (tokens/s)",
          "Generated tokens per second summed over the selected instances: predicted by the twins vs reported.",
          [(f"sum by (source) (rate(shadowsim_output_tokens_total{{{SEL}}}[{RI}]))", "{{source}}")], "none")
    L.add("timeseries", "Finished requests (req/s)", "Finished requests per second, predicted vs actual.",
          [(f"sum by (source) (rate(shadowsim_requests_finished_total{{{SEL}}}[{RI}]))", "{{source}}")],
          "reqps")
    L.add("timeseries", "TTFT p95 by instance (5m)", "Recorded p95 time to first token per instance and source.",
          [(f"shadowsim:ttft_seconds:p95_5m{{{SEL}}}", "{{sglang_instance}} {{source}}")], "s")
    L.add("timeseries", "TPOT p95 by instance (5m)", "Recorded p95 time per output token per instance and source.",
          [(f"shadowsim:tpot_seconds:p95_5m{{{SEL}}}", "{{sglang_instance}} {{source}}")], "s")
    L.row("Error and drift")
    L.add("timeseries", "MAPE by instance and metric (free)",
          "Rolling mean absolute percentage error of the free-running twin, per instance and metric.",
          [(f'shadowsim_prediction_mape_ratio{{{SEL}, mode="free"}}', "{{sglang_instance}} {{metric}}")], "percentunit")
    L.add("timeseries", "MAPE / threshold", "Rolling MAPE divided by its alert threshold: above 1 the drift "
          "alert's condition holds.",
          [(f"shadowsim:prediction_mape_ratio:over_threshold{{{SEL}}}", "{{sglang_instance}} {{metric}} {{mode}}")],
          "none")
    L.add("timeseries", "Drift verdicts", "Drift detector output (1 = drift) per instance and kind.",
          [(f"shadowsim_drift_detected{{{SEL}}}", "{{sglang_instance}} {{kind}}")], "none")
    L.add("timeseries", "Calibration change from profile",
          "Online calibration factor relative to the loaded profile (0.25 = 25 % slower than profiled).",
          [(f"shadowsim:calibration_factor:relative_change{{{SEL}}}", "{{sglang_instance}} {{op_class}}")],
          "percentunit")
    return _dashboard("shadowsim-overview", "shadowsim / Cluster overview",
                      "Fleet-wide view of every shadowed SGLang instance: accuracy, drift and lag.", L.panels)


def instance() -> dict[str, Any]:
    L = _Layout()
    L.row("Latency: predicted vs actual")
    for metric, name, sglang in (("ttft", "TTFT", "sglang:time_to_first_token_seconds"),
                                 ("tpot", "TPOT", None),
                                 ("e2e", "End-to-end latency", "sglang:e2e_request_latency_seconds")):
        targets = [(_quantile(0.5, f"shadowsim_{metric}_seconds", "sglang_instance, source"), "p50 {{sglang_instance}} {{source}}"),
                   (_quantile(0.95, f"shadowsim_{metric}_seconds", "sglang_instance, source"), "p95 {{sglang_instance}} {{source}}")]
        if sglang:
            # SGLang's own histogram, as a cross-check of what the shadow calls "actual".
            targets.append((_sglang_quantile(0.95, sglang), "p95 {{sglang_instance}} SGLang /metrics"))
        L.add("timeseries", f"{name} p50 / p95", f"{name} percentiles from the predicted and actual histograms.",
              targets, "s", w=8)
    L.row("Throughput")
    L.add("timeseries", "Output tokens/s", "Generated tokens per second, predicted vs actual.",
          [(f"sum by (sglang_instance, source) (rate(shadowsim_output_tokens_total{{{SEL}}}[{RI}]))",
            "{{sglang_instance}} {{source}}")], "none", w=8)
    L.add("timeseries", "Prompt tokens/s", "Prompt tokens of finished requests per second.",
          [(f"sum by (sglang_instance, source) (rate(shadowsim_prompt_tokens_total{{{SEL}}}[{RI}]))",
            "{{sglang_instance}} {{source}}"),
           (f"sum by (sglang_instance) {_sglang(f'rate(sglang:prompt_tokens_total{{{SGL}}}[{RI}])')}",
            "{{sglang_instance}} SGLang /metrics")],
          "none", w=8)
    L.add("timeseries", "Finished requests/s", "Finished requests per second, predicted vs actual.",
          [(f"sum by (sglang_instance, source) (rate(shadowsim_requests_finished_total{{{SEL}}}[{RI}]))",
            "{{sglang_instance}} {{source}}")], "reqps", w=8)
    L.row("Prediction error")
    L.add("timeseries", "MAPE over time", "Rolling MAPE per metric and mode, with the configured threshold.",
          [(f"shadowsim_prediction_mape_ratio{{{SEL}}}", "{{sglang_instance}} {{metric}} {{mode}}"),
           (f"shadowsim_drift_threshold_ratio{{{SEL}}}", "threshold {{sglang_instance}} {{metric}}")], "percentunit")
    L.add("timeseries", "Per-request error p90", "p90 of the per-request absolute percentage error.",
          [(_quantile(0.9, "shadowsim_prediction_ape_ratio", "sglang_instance, metric, mode"),
            "{{sglang_instance}} {{metric}} {{mode}}")], "percentunit")
    L.row("Scheduler state: KV, cache, queues")
    L.add("timeseries", "KV usage", "KV pool in use over capacity, twin vs server; SGLang's own token_usage.",
          [(f"shadowsim_kv_usage_ratio{{{SEL}}}", "{{sglang_instance}} {{source}}"),
           (_sglang(f"sglang:token_usage{{{SGL}}}"), "{{sglang_instance}} SGLang /metrics")], "percentunit", w=8)
    L.add("timeseries", "Prefix cache hit rate", "Share of prompt tokens served from the radix cache.",
          [(f"sum by (sglang_instance, source) (rate(shadowsim_cached_tokens_total{{{SEL}}}[{RI}])) / "
            f"sum by (sglang_instance, source) (rate(shadowsim_prompt_tokens_total{{{SEL}}}[{RI}]))",
            "{{sglang_instance}} {{source}}"),
           (_sglang(f"sglang:cache_hit_rate{{{SGL}}}"), "{{sglang_instance}} SGLang /metrics")], "percentunit", w=8)
    L.add("timeseries", "Running and waiting requests", "Requests in the running batch and in the wait queue.",
          [(f"shadowsim_running_requests{{{SEL}}}", "running {{sglang_instance}} {{source}}"),
           (f"shadowsim_queue_requests{{{SEL}}}", "waiting {{sglang_instance}} {{source}}"),
           (_sglang(f"sglang:num_running_reqs{{{SGL}}}"), "running {{sglang_instance}} SGLang /metrics"),
           (_sglang(f"sglang:num_queue_reqs{{{SGL}}}"), "waiting {{sglang_instance}} SGLang /metrics")], "none", w=8)
    L.row("Calibration")
    L.add("timeseries", "Calibration factors", "Online calibration factor per op class, and the profiled one.",
          [(f"shadowsim_calibration_factor{{{SEL}}}", "{{sglang_instance}} {{op_class}}"),
           (f"shadowsim_calibration_factor_baseline{{{SEL}}}", "profile {{sglang_instance}} {{op_class}}")], "none")
    L.add("table", "Twin build and profile", "Version, latency model and calibration hash of each twin.",
          [(f"shadowsim_build_info{{{SEL}}}", "{{sglang_instance}}")], "none")
    return _dashboard("shadowsim-instance", "shadowsim / Instance: predicted vs actual",
                      "Per-instance comparison of the twin's predictions with the live server.", L.panels)


def pipeline() -> dict[str, Any]:
    L = _Layout()
    L.row("Ingest")
    L.add("timeseries", "Events applied/s", "Events applied to each twin per second.",
          [(f"sum by (sglang_instance) (rate(shadowsim_events_processed_total{{{PIPE}}}[{RI}]))", "{{sglang_instance}}")],
          "none", w=8)
    L.add("timeseries", "Late events/s", "Events that arrived behind the watermark, per second.",
          [(f"sum by (sglang_instance) (rate(shadowsim_events_late_total{{{PIPE}}}[{RI}]))", "{{sglang_instance}}")],
          "none", w=8)
    L.add("timeseries", "Dead letters/s", "Records sent to the dead-letter topic per second, by reason.",
          [(f'sum by (reason) (rate(shadowsim_events_dead_lettered_total{{cluster=~"$cluster"}}[{RI}]))',
            "{{reason}}")], "none", w=8)
    L.row("Freshness")
    L.add("timeseries", "Shadow lag", "Wall time minus the event time the twin has simulated up to.",
          [(f"shadowsim_shadow_lag_seconds{{{PIPE}}}", "{{sglang_instance}}")], "s", w=8)
    L.add("timeseries", "Time since last event", "Seconds since the twin applied its last event.",
          [(f"time() - shadowsim_last_event_timestamp_seconds{{{PIPE}}}", "{{sglang_instance}}")], "s", w=8)
    L.add("timeseries", "Targets up", "Scrape health of shadowsim and of the SGLang servers it shadows (joined by instance id).",
          [('up{job="shadowsim", cluster=~"$cluster"}', "{{job}} {{instance}}"),
           (f"max by (job, instance, sglang_instance) (up {JOIN})", "{{job}} {{instance}} ({{sglang_instance}})"),
           (f"sum(shadowsim_twin_up{{{SEL}}})", "twins")], "none", w=8)
    return _dashboard("shadowsim-pipeline", "shadowsim / Pipeline health",
                      "Is the shadow keeping up: events, late and dead-lettered records, lag, scrape health.",
                      L.panels)


DASHBOARDS = {"shadowsim-overview.json": overview, "shadowsim-instance.json": instance,
              "shadowsim-pipeline.json": pipeline}
