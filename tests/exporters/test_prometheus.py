"""The Prometheus exporter: a collector over read-only views, checked sample by sample and by promtool."""
from __future__ import annotations

import gzip
import json
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import generate_latest

from exporters.prometheus import MetricsServer, make_registry
from shadowsim.shadow.stats import InstanceStats
from exporters.view import InstanceView, ShadowView


def _view(window_counts: dict | None = None) -> ShadowView:
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
        window_counts=window_counts or {"free": {"ttft": 1, "tpot": 1, "e2e": 1},
                                        "anchored": {"ttft": 1, "tpot": 1, "e2e": 1}},
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
    lab = {"sglang_instance": "sglang-0", "model": "Qwen/Qwen3-0.6B"}
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
    assert g("shadowsim_events_processed_total", {"sglang_instance": "sglang-0"}) == 42.0
    assert g("shadowsim_events_late_total", {"sglang_instance": "sglang-0"}) == 1.0
    assert g("shadowsim_events_dead_lettered_total", {"reason": "ValidationError"}) == 2.0
    assert g("shadowsim_shadow_lag_seconds", {"sglang_instance": "sglang-0"}) == 0.75
    assert g("shadowsim_last_event_timestamp_seconds", {"sglang_instance": "sglang-0"}) == 1.7e9
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


def test_instance_label_is_sglang_instance_never_the_targets_instance() -> None:
    """`instance` belongs to the scrape target (shadowsim's host:port); the shadowed server is `sglang_instance`."""
    text = generate_latest(make_registry(_view)).decode()
    samples = [ln for ln in text.splitlines() if ln.startswith("shadowsim_") and "{" in ln]
    assert len(samples) > 50
    assert not any(re.search(r'[{,]instance="', ln) for ln in samples)
    service_level = ("shadowsim_events_dead_lettered", "shadowsim_records_skipped", "shadowsim_recoveries",
                     "shadowsim_table_entries_expired")
    per_instance = [ln for ln in samples if not ln.startswith(service_level)]
    assert all('sglang_instance="sglang-0"' in ln for ln in per_instance)


def test_rolling_error_is_absent_without_data_not_zero() -> None:
    """A window without finished requests has no MAPE: the series is missing (a panel shows "no data"), where a 0
    would read as a perfect prediction."""
    empty_ttft = {"free": {"ttft": 0, "tpot": 1, "e2e": 1}, "anchored": {"ttft": 0, "tpot": 0, "e2e": 0}}
    reg = make_registry(lambda: _view(empty_ttft))
    g = reg.get_sample_value
    lab = {"sglang_instance": "sglang-0", "model": "Qwen/Qwen3-0.6B"}
    assert g("shadowsim_prediction_mape_ratio", {**lab, "metric": "ttft", "mode": "free"}) is None
    assert g("shadowsim_prediction_mape_ratio", {**lab, "metric": "e2e", "mode": "anchored"}) is None
    assert g("shadowsim_prediction_mape_ratio", {**lab, "metric": "tpot", "mode": "free"}) == 0.1
    # the threshold it is compared with stays: it is configuration, not data
    assert g("shadowsim_drift_threshold_ratio", {**lab, "metric": "ttft"}) == 0.5


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_http_server_serves_metrics_healthz_and_readyz() -> None:
    state = {"ready": False}
    srv = MetricsServer(make_registry(_view), port=0, host="127.0.0.1",
                        health_fn=lambda: {"ok": True, "twins": 1},
                        ready_fn=lambda: {"ok": state["ready"], "status": "joining"}).start()
    try:
        base = f"http://127.0.0.1:{srv.port}"
        code, headers, body = _get(base + "/metrics")
        assert code == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert 'shadowsim_twin_up{model="Qwen/Qwen3-0.6B",sglang_instance="sglang-0"} 1.0' in body.decode()
        code, _, body = _get(base + "/healthz")
        assert code == 200 and json.loads(body)["twins"] == 1
        code, _, body = _get(base + "/readyz")
        assert code == 503 and json.loads(body) == {"ok": False, "status": "joining"}
        state["ready"] = True
        assert _get(base + "/readyz")[0] == 200
        assert _get(base + "/nothing")[0] == 404
    finally:
        srv.stop()


def test_http_server_speaks_gzip_and_openmetrics() -> None:
    """prometheus_client's own exposition: gzip when asked (Prometheus always asks), OpenMetrics on Accept."""
    srv = MetricsServer(make_registry(_view), port=0, host="127.0.0.1").start()
    try:
        base = f"http://127.0.0.1:{srv.port}/metrics"
        code, headers, body = _get(base, {"Accept-Encoding": "gzip"})
        assert code == 200 and headers.get("Content-Encoding") == "gzip"
        plain = gzip.decompress(body).decode()
        assert "shadowsim_twin_up{" in plain
        code, headers, body = _get(base, {"Accept": "application/openmetrics-text; version=1.0.0"})
        assert headers["Content-Type"].startswith("application/openmetrics-text")
        text = body.decode()
        assert text.rstrip().endswith("# EOF") and "# TYPE shadowsim_requests_finished counter" in text
    finally:
        srv.stop()


def test_a_failing_probe_is_a_503_not_a_crash() -> None:
    def broken() -> dict:
        raise RuntimeError("state unreadable")

    srv = MetricsServer(make_registry(_view), port=0, host="127.0.0.1", health_fn=broken).start()
    try:
        code, _, body = _get(f"http://127.0.0.1:{srv.port}/healthz")
        assert code == 503 and json.loads(body) == {"ok": False, "error": "RuntimeError: state unreadable"}
    finally:
        srv.stop()


def test_http_server_times_out_idle_clients_and_caps_connections() -> None:
    """A client that connects and sends nothing is dropped after the timeout; connections beyond the cap get 503
    at once, and a scrape still works once the idle ones are gone."""
    srv = MetricsServer(make_registry(_view), port=0, host="127.0.0.1", timeout_s=1.0, max_connections=2).start()
    idle = []
    try:
        for _ in range(2):
            idle.append(socket.create_connection(("127.0.0.1", srv.port), timeout=5))
        time.sleep(0.2)
        extra = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        extra.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        assert extra.recv(64).startswith(b"HTTP/1.0 503")
        extra.close()
        started = time.monotonic()
        assert idle[0].recv(1) == b""  # the server hung up on the silent client
        assert time.monotonic() - started < 5
        time.sleep(0.3)
        assert _get(f"http://127.0.0.1:{srv.port}/metrics")[0] == 200
    finally:
        for s in idle:
            s.close()
        srv.stop()
