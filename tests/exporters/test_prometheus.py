"""The Prometheus exporter: a collector over read-only views, checked sample by sample and by promtool."""
from __future__ import annotations

import shutil
import subprocess
import urllib.request

import pytest
from prometheus_client import generate_latest

from exporters.prometheus import MetricsServer, make_registry
from shadowsim.shadow.stats import InstanceStats
from exporters.view import InstanceView, ShadowView


def _view() -> ShadowView:
    st = InstanceStats()
    for x in (0.15, 0.3, 0.5):
        st.latency["ttft"]["actual"].observe(x)
    st.latency["ttft"]["predicted"].observe(0.2)
    st.ape["ttft"]["free"].observe(0.25)
    st.counters["requests_finished"]["actual"] = 3
    st.counters["output_tokens"]["predicted"] = 120
    iv = InstanceView(
        instance="sglang-0", model="Qwen/Qwen3-0.6B", version="0.1.0", latency_model="linear",
        calibration_hash="none", emulated=True, latency=st.latency, ape=st.ape,
        mape={"free": {"ttft": 0.25, "tpot": 0.1, "e2e": 0.2}, "anchored": {"ttft": 0.05, "tpot": 0.02, "e2e": 0.03}},
        window_counts={"free": {"ttft": 1, "tpot": 1, "e2e": 1}, "anchored": {"ttft": 1, "tpot": 1, "e2e": 1}},
        thresholds={"ttft": 0.5, "tpot": 0.2, "e2e": 0.3}, drift={"model": False, "performance": True},
        drift_explanation="", factors={"prefill": 1.0, "decode": 1.4}, factor_baseline={"prefill": 1.0, "decode": 1.0},
        counters=st.counters, gauges={"queue": {"predicted": 2.0, "actual": 3.0}, "running": {"actual": 7.0},
                                      "kv_usage": {"predicted": 0.25}},
        events_processed=42, events_late=1, requests_estimated=0, shadow_lag_s=0.75, last_event_wall_ts=1.7e9,
        simulated_ts=1.7e9 - 0.75, alerts=[])
    return ShadowView([iv], {"ValidationError": 2}, 42, 1)


def test_samples_follow_the_metrics_contract() -> None:
    reg = make_registry(_view)
    g = reg.get_sample_value
    lab = {"instance": "sglang-0", "model": "Qwen/Qwen3-0.6B"}
    assert g("shadowsim_build_info", {**lab, "version": "0.1.0", "latency_model": "linear",
                                      "calibration_hash": "none", "emulated": "true"}) == 1.0
    # SGLang's TTFT buckets: 0.15 and 0.3 fall in le=0.4; 0.5 in le=0.6.
    assert g("shadowsim_ttft_seconds_bucket", {**lab, "source": "actual", "le": "0.2"}) == 1.0
    assert g("shadowsim_ttft_seconds_bucket", {**lab, "source": "actual", "le": "0.4"}) == 2.0
    assert g("shadowsim_ttft_seconds_bucket", {**lab, "source": "actual", "le": "+Inf"}) == 3.0
    assert g("shadowsim_ttft_seconds_sum", {**lab, "source": "actual"}) == pytest.approx(0.95)
    assert g("shadowsim_prediction_ape_ratio_count", {**lab, "metric": "ttft", "mode": "free"}) == 1.0
    assert g("shadowsim_prediction_mape_ratio", {**lab, "metric": "ttft", "mode": "anchored"}) == 0.05
    assert g("shadowsim_drift_threshold_ratio", {**lab, "metric": "tpot"}) == 0.2
    assert g("shadowsim_drift_detected", {**lab, "kind": "performance"}) == 1.0
    assert g("shadowsim_drift_detected", {**lab, "kind": "model"}) == 0.0
    assert g("shadowsim_calibration_factor", {**lab, "op_class": "decode"}) == 1.4
    assert g("shadowsim_calibration_factor_baseline", {**lab, "op_class": "decode"}) == 1.0
    assert g("shadowsim_requests_finished_total", {**lab, "source": "actual"}) == 3.0
    assert g("shadowsim_output_tokens_total", {**lab, "source": "predicted"}) == 120.0
    assert g("shadowsim_queue_requests", {**lab, "source": "actual"}) == 3.0
    assert g("shadowsim_kv_usage_ratio", {**lab, "source": "predicted"}) == 0.25
    assert g("shadowsim_events_processed_total", {"instance": "sglang-0"}) == 42.0
    assert g("shadowsim_events_late_total", {"instance": "sglang-0"}) == 1.0
    assert g("shadowsim_events_dead_lettered_total", {"reason": "ValidationError"}) == 2.0
    assert g("shadowsim_shadow_lag_seconds", {"instance": "sglang-0"}) == 0.75
    assert g("shadowsim_last_event_timestamp_seconds", {"instance": "sglang-0"}) == 1.7e9
    assert g("shadowsim_twin_up", lab) == 1.0


def test_every_contract_metric_is_exported() -> None:
    import pathlib
    import re

    doc = (pathlib.Path(__file__).parents[2] / "docs" / "metrics.md").read_text()
    names = set(re.findall(r"^\| `(shadowsim_[a-z_]+)`", doc, flags=re.M))
    assert len(names) >= 20
    text = generate_latest(make_registry(_view)).decode()
    exported = set(re.findall(r"^# TYPE (shadowsim_[a-z_]+) ", text, flags=re.M))
    exported |= {n + "_total" for n in exported}  # counters are declared without the suffix
    assert names <= exported, names - exported


def test_promtool_check_metrics_reports_nothing() -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: run .ci/run (installs Debian's prometheus package) or apt-get install prometheus"
    text = generate_latest(make_registry(_view))
    res = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), (res.stdout, res.stderr)


def test_http_server_serves_metrics_and_healthz() -> None:
    srv = MetricsServer(make_registry(_view), port=0, host="127.0.0.1",
                        health_fn=lambda: {"ok": True, "twins": 1}).start()
    try:
        base = f"http://127.0.0.1:{srv.port}"
        body = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
        assert 'shadowsim_twin_up{instance="sglang-0",model="Qwen/Qwen3-0.6B"} 1.0' in body
        health = urllib.request.urlopen(base + "/healthz", timeout=10).read()
        assert b'"twins": 1' in health
    finally:
        srv.stop()
