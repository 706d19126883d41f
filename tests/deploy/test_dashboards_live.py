"""Dashboards and rules, checked against a real Prometheus scraping a running shadow.

Setup (once per module, 15-20 s here):
  * `shadowsim demo --no-ui --duration 75 --metrics-port P` runs in a subprocess: the embedded broker,
    emulated SGLang instances and the live shadow, serving /metrics on P;
  * a loopback HTTP server plays an SGLang server's /metrics with a real SGLang 0.4.3 sample
    (shared/data/sglang_logs) whose counters grow over time, so panels that put SGLang's own series next
    to the shadow's have data;
  * a real `prometheus` (Debian package) runs with deploy/prometheus/prometheus.yml's global and rule settings
    (1 s scrape and rule evaluation, rule files by absolute path, no Alertmanager) and scrapes both jobs the
    way kube-prometheus-stack does (`_operator_job`): job = the Service, instance = IP:port, namespace/service/
    pod/container/endpoint labels from the pod's metadata, then the relabelings of the shipped
    deploy/k8s/servicemonitor.yaml (shadowsim) and deploy/k8s/sglang/servicemonitor.yaml (SGLang) verbatim;
    no honor_labels. Two SGLang pods: one the demo shadows (`SHADOWED_POD`), one it does not (`ORPHAN_POD`).
The setup waits until every contract metric of docs/metrics.md has been scraped and then, up to 30 s, until
every query below has data; the demo is stopped when the module ends. Then the tests:
  * evaluate every panel query and every variable query of every dashboard (variables -> `.*`,
    `$__rate_interval` -> 30s): each must be valid PromQL and return at least one series with a finite
    value (all-NaN draws nothing);
  * evaluate every recording rule: valid, with a finite value;
  * evaluate every alert rule: valid. An alert's full expression is rightly empty in a healthy demo
    (nothing is firing), so each alert also has probes below: its comparison turned into `bool` (which
    returns every compared series, 0 or 1, and so proves the vector matching of both sides works on real
    labels), or, for `unless`, its two operands. A probe must be the alert's text apart from `bool`.
  * assert that every shadowsim_*/sglang:* name used anywhere exists in the scrape, and that Prometheus
    itself evaluated every loaded rule without error.
"""
from __future__ import annotations

import copy
import functools
import http.server
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from tests.deploy import _prom
from tests.deploy._prom import METRIC_RE, Prometheus

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

DEMO_DURATION_S = 75
SHADOWED_POD = "emu-azure-conv-2"  # a demo instance: the pod name is the id its events carry
ORPHAN_POD = "sglang-unshadowed-0"  # an SGLang pod whose events never reach the shadow
SGLANG_SERVICE = "sglang-llama"
NAMESPACE = "llm"
SGLANG_SAMPLE = "sglang_logs/sglang-docs_v0.4.3_metrics_llama3.1-8b_loaded.prom.txt"
VARIABLES = {"$cluster": ".*", "$model": ".*", "$instance": ".*", "$__rate_interval": "30s"}

# Alert -> queries that must return series. Each is the alert's expression, or a part of it, with a
# comparison made `bool` (see the module docstring).
ALERT_PROBES: dict[str, list[str]] = {
    "ShadowsimTTFTPredictionDrift": [
        'shadowsim_prediction_mape_ratio{metric="ttft"} > bool ignoring (mode) group_left '
        'shadowsim_drift_threshold_ratio{metric="ttft"}'],
    "ShadowsimTPOTPredictionDrift": [
        'shadowsim_prediction_mape_ratio{metric="tpot"} > bool ignoring (mode) group_left '
        'shadowsim_drift_threshold_ratio{metric="tpot"}'],
    "ShadowsimE2EPredictionDrift": [
        'shadowsim_prediction_mape_ratio{metric="e2e"} > bool ignoring (mode) group_left '
        'shadowsim_drift_threshold_ratio{metric="e2e"}'],
    "ShadowsimDriftDetected": ["shadowsim_drift_detected == bool 1"],
    "ShadowsimPerformanceDrift": [
        "abs(shadowsim_calibration_factor / shadowsim_calibration_factor_baseline - 1) > bool 0.25 "
        "and shadowsim_calibration_factor_baseline > 0"],
    "ShadowsimShadowLagHigh": ["shadowsim_shadow_lag_seconds > bool 30"],
    "ShadowsimDeadLettersRising": [
        "sum by (cluster, job, reason) (increase(shadowsim_events_dead_lettered_total[10m])) > bool 10"],
    "ShadowsimStalled": ["time() - max by (cluster, job) (shadowsim_last_event_timestamp_seconds) > bool 600"],
    "ShadowsimTwinMissing": ["max by (cluster, job, instance, sglang_instance) (shadowsim:sglang_target:info)",
                             "max by (cluster, sglang_instance) (shadowsim_twin_up)"],
    "ShadowsimSeriesDropped": ["max by (cluster, job, sglang_instance) (shadowsim_series_dropped) > bool 0"],
    "ShadowsimDown": ['up{job="shadowsim"} == bool 0'],
}


def _substitute(expr: str) -> str:
    for var, value in VARIABLES.items():
        expr = expr.replace(var, value)
    return expr


def _series(prom: Prometheus, expr: str) -> list[Any]:
    resp = prom.query(expr)
    assert resp["status"] == "success", f"invalid PromQL {expr!r}: {resp.get('error')}"
    result = resp["data"]["result"]
    return result if isinstance(result, list) else [result]


def _has_data(prom: Prometheus, expr: str) -> bool:
    """At least one series with a finite value: a panel of only NaN (0/0, a quantile of no
    observations) draws nothing, so it counts as empty."""
    return any(math.isfinite(float(s["value"][1])) for s in _series(prom, expr))


def _growing(sample: str, factor: float) -> bytes:
    """The SGLang sample with every counter and histogram value multiplied by ``factor``.

    A static sample would make every rate() zero and every SGLang percentile NaN; scaling cumulative values by
    a growing factor keeps buckets cumulative and the real distribution's shape, and gives non-zero rates.
    """
    out = []
    for line in sample.splitlines():
        name = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line)
        if name and name[0].endswith(("_bucket", "_count", "_sum", "_total")):
            head, value = line.rsplit(" ", 1)
            line = f"{head} {float(value) * factor!r}"
        out.append(line)
    return ("\n".join(out) + "\n").encode()


def _queries_without_data(prom: Prometheus) -> list[str]:
    """Panel targets, recording rules and alert probes that have no finite value yet (alerts themselves are
    rightly empty while nothing fires, so they are not waited for)."""
    exprs = [t["expr"] for d in _prom.load_dashboards().values() for p in _prom.panels(d) for t in p["targets"]]
    exprs += [r["expr"] for r in _prom.load_rules() if "record" in r]
    exprs += [p for probes in ALERT_PROBES.values() for p in probes]
    return [e for e in exprs if not _has_data(prom, _substitute(e))]


class _SglangMetrics(http.server.BaseHTTPRequestHandler):
    sample = ""
    started = 0.0

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        body = _growing(self.sample, 1.0 + (time.monotonic() - self.started) / 60.0)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _start_source(port: int, log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "shadowsim", "demo", "--no-ui", "--duration", str(DEMO_DURATION_S),
           "--metrics-port", str(port)]
    # Own process group: the demo starts a broker and emulators, and teardown must end all of them.
    # cwd = the test's temp dir: the demo writes its snapshots and broker data relative to it.
    return subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=log.parent,
                            start_new_session=True)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT first: Python turns it into KeyboardInterrupt, so the demo's cleanup runs and stops its broker
    (which lives in a session of its own); SIGTERM, then SIGKILL, only if it hangs."""
    for sig, wait_s in ((signal.SIGINT, 20), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue


def _relabelings(monitor: Path) -> list[dict[str, Any]]:
    """A ServiceMonitor's endpoint relabelings in Prometheus' relabel_config spelling."""
    doc = yaml.safe_load(monitor.read_text())
    keys = {"sourceLabels": "source_labels", "targetLabel": "target_label", "replacement": "replacement",
            "action": "action", "regex": "regex", "separator": "separator"}
    return [{keys[k]: v for k, v in r.items()} for r in doc["spec"]["endpoints"][0].get("relabelings", [])]


def _operator_job(name: str, service: str, pods: dict[str, str], monitor: Path) -> dict[str, Any]:
    """A scrape job as the Prometheus Operator generates it for a ServiceMonitor endpoint: Kubernetes' metadata
    (here static `__meta_kubernetes_*` target labels, one target per pod address) turned into namespace, service,
    pod, container and endpoint labels, job = the Service's name, instance = the address; then the monitor's own
    relabelings. ``pods``: pod name -> address."""
    meta = [("__meta_kubernetes_namespace", "namespace"), ("__meta_kubernetes_service_name", "service"),
            ("__meta_kubernetes_pod_name", "pod"), ("__meta_kubernetes_pod_container_name", "container"),
            ("__meta_kubernetes_service_name", "job")]
    relabel = [{"source_labels": [src], "target_label": dst, "action": "replace"} for src, dst in meta]
    relabel.append({"target_label": "endpoint", "replacement": "http", "action": "replace"})
    return {"job_name": f"serviceMonitor/{NAMESPACE}/{name}/0", "metrics_path": "/metrics",
            "static_configs": [{"targets": [address], "labels": {
                "__meta_kubernetes_namespace": NAMESPACE, "__meta_kubernetes_service_name": service,
                "__meta_kubernetes_pod_name": pod, "__meta_kubernetes_pod_container_name": name}}
                for pod, address in pods.items()],
            "relabel_configs": relabel + _relabelings(monitor)}


def _test_config(metrics_port: int, sglang_ports: dict[str, int]) -> dict[str, Any]:
    shipped = yaml.safe_load((_prom.DEPLOY / "prometheus" / "prometheus.yml").read_text())
    cfg = copy.deepcopy(shipped)
    cfg["global"].update(scrape_interval="1s", evaluation_interval="1s")
    cfg["rule_files"] = [str(p) for p in _prom.RULE_FILES]
    cfg.pop("alerting", None)
    k8s = _prom.DEPLOY / "k8s"
    cfg["scrape_configs"] = [
        _operator_job("shadowsim", "shadowsim", {"shadowsim-5d8f-abcde": f"127.0.0.1:{metrics_port}"},
                      k8s / "servicemonitor.yaml"),
        _operator_job("sglang", SGLANG_SERVICE, {pod: f"127.0.0.1:{port}" for pod, port in sglang_ports.items()},
                      k8s / "sglang" / "servicemonitor.yaml"),
    ]
    return cfg


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, shared_dir: Path) -> Iterator[Prometheus]:
    _prom.require_binary("prometheus")
    work = tmp_path_factory.mktemp("live")
    handler = type("H", (_SglangMetrics,), {"sample": (shared_dir / "data" / SGLANG_SAMPLE).read_text(),
                                            "started": time.monotonic()})
    sglang = {pod: http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) for pod in (SHADOWED_POD, ORPHAN_POD)}
    for server in sglang.values():
        threading.Thread(target=server.serve_forever, daemon=True).start()
    metrics_port = _prom.free_port()
    source = _start_source(metrics_port, work / "source.log")
    prom = _prom.start_prometheus(_test_config(metrics_port, {p: s.server_address[1] for p, s in sglang.items()}),
                                  work)
    prom.ports = {"shadowsim": metrics_port, **{p: s.server_address[1] for p, s in sglang.items()}}  # type: ignore[attr-defined]
    try:
        wanted = {_prom.scraped_name(m, k) for m, k in _prom.contract_metrics().items()} | {
            "sglang:time_to_first_token_seconds_bucket"}
        deadline = time.monotonic() + DEMO_DURATION_S - 10
        missing = wanted
        while time.monotonic() < deadline:
            missing = wanted - prom.names()
            if not missing:
                break
            if source.poll() is not None:
                pytest.fail(f"metrics source exited early ({source.returncode}):\n"
                            f"{(work / 'source.log').read_text()[-3000:]}")
            time.sleep(1)
        if missing:
            pytest.fail(f"never scraped: {sorted(missing)}\nsource log:\n{(work / 'source.log').read_text()[-3000:]}")
        # Then wait for data behind every query (rate() needs two samples in its window, recording rules a
        # few evaluations), up to 30 s; the tests report whatever is still empty after that.
        deadline = time.monotonic() + 30
        time.sleep(3)
        while time.monotonic() < deadline and _queries_without_data(prom):
            time.sleep(1)
        yield prom
    finally:
        prom.stop()
        _stop_group(source)
        for server in sglang.values():
            server.shutdown()


@functools.cache
def _all_exprs() -> list[tuple[str, str]]:
    """(where, expr) for every panel target and variable of every dashboard and every rule."""
    out = []
    for name, dash in _prom.load_dashboards().items():
        for panel in _prom.panels(dash):
            out.extend((f"{name}: {panel['title']} [{t['refId']}]", t["expr"]) for t in panel["targets"])
        for var in dash["templating"]["list"]:
            if var["type"] == "query":
                out.append((f"{name}: variable {var['name']}", var["query"]["query"]))
    out.extend((r.get("record") or r["alert"], r["expr"]) for r in _prom.load_rules())
    return out


def test_kube_prometheus_stack_labels_are_kept_and_joined(live: Prometheus) -> None:
    """A standard scrape keeps every target's own `instance` (IP:port) and `job` (the Service); shadowsim's series
    name the shadowed server in `sglang_instance`, and the recording rule joins SGLang's targets to it."""
    ports = live.ports  # type: ignore[attr-defined]
    twins = _series(live, "shadowsim_twin_up")
    assert {s["metric"]["sglang_instance"] for s in twins} == {"emu-mooncake-0", "emu-azure-code-1", SHADOWED_POD}
    assert {(s["metric"]["job"], s["metric"]["instance"], s["metric"]["cluster"]) for s in twins} == {
        ("shadowsim", f"127.0.0.1:{ports['shadowsim']}", "prod")}
    sglang = _series(live, "sglang:num_running_reqs")
    assert {(s["metric"]["job"], s["metric"]["instance"], s["metric"]["pod"], s["metric"]["namespace"])
            for s in sglang} == {(SGLANG_SERVICE, f"127.0.0.1:{ports[p]}", p, NAMESPACE) for p in (SHADOWED_POD, ORPHAN_POD)}
    info = {(s["metric"]["instance"], s["metric"]["sglang_instance"]) for s in _series(live, "shadowsim:sglang_target:info")}
    assert info == {(f"127.0.0.1:{ports[p]}", p) for p in (SHADOWED_POD, ORPHAN_POD)}
    # ShadowsimTwinMissing's condition holds for the pod nobody shadows, and only for it.
    alert = next(r["expr"] for r in _prom.load_rules() if r.get("alert") == "ShadowsimTwinMissing")
    assert {s["metric"]["sglang_instance"] for s in _series(live, alert)} == {ORPHAN_POD}
    # A dashboard's SGLang overlay, joined: SGLang's own running-requests gauge under the shadowed id.
    joined = _series(live, 'sglang:num_running_reqs * on (cluster, job, instance) group_left (sglang_instance) '
                           'shadowsim:sglang_target:info{sglang_instance="%s"}' % SHADOWED_POD)
    assert len(joined) == 1 and joined[0]["metric"]["sglang_instance"] == SHADOWED_POD


def test_every_metric_used_exists_in_the_scrape(live: Prometheus) -> None:
    names = live.names()
    recorded = {r["record"] for r in _prom.load_rules() if "record" in r}
    used = {m for _, expr in _all_exprs() for m in METRIC_RE.findall(expr)}
    assert len(used) > 25
    unknown = sorted(m for m in used if m not in names and m not in recorded
                     and not any(m + suffix in names for suffix in ("_bucket", "_count", "_sum")))
    assert unknown == [], f"metric names used in dashboards/rules but absent from the scrape: {unknown}"
    undefined = sorted(m for m in used if m.startswith("shadowsim:") and m not in recorded)
    assert undefined == [], f"recording rules used but never defined: {undefined}"


def test_every_dashboard_panel_and_variable_returns_series(live: Prometheus) -> None:
    checked, empty = 0, []
    for name, dash in _prom.load_dashboards().items():
        for panel in _prom.panels(dash):
            assert panel["targets"], f"{name}: panel {panel['title']!r} has no query"
            for target in panel["targets"]:
                if not _has_data(live, _substitute(target["expr"])):
                    empty.append(f"{name}: {panel['title']} [{target['refId']}] {target['expr']}")
                checked += 1
        for var in dash["templating"]["list"]:
            if var["type"] != "query":
                continue
            # label_values(SELECTOR, LABEL): Grafana asks the series API; at least one series must carry LABEL.
            inner = var["query"]["query"][len("label_values("):-1]
            selector, label = (s.strip() for s in inner.rsplit(",", 1))
            resp = live.get("/api/v1/series", **{"match[]": _substitute(selector)})
            assert resp["status"] == "success", resp
            if not any(label in s for s in resp["data"]):
                empty.append(f"{name}: variable {var['name']} ({var['query']['query']})")
            checked += 1
    assert checked >= 40
    assert empty == [], "queries without data:\n" + "\n".join(empty)


def test_every_recording_rule_returns_series(live: Prometheus) -> None:
    rules = [r for r in _prom.load_rules() if "record" in r]
    assert len(rules) >= 10
    empty = [r["record"] for r in rules if not _has_data(live, r["expr"])]
    assert empty == [], f"recording rules without data: {empty}"
    # Prometheus itself has evaluated them: the recorded series exist.
    stored = [r["record"] for r in rules if not _series(live, r["record"])]
    assert stored == [], f"recorded series missing: {stored}"


def test_every_alert_is_valid_and_its_probes_return_series(live: Prometheus) -> None:
    alerts = {r["alert"]: r["expr"] for r in _prom.load_rules() if "alert" in r}
    assert set(ALERT_PROBES) == set(alerts), "every alert needs probes here, and only alerts that exist"
    empty = []
    for name, expr in alerts.items():
        _series(live, expr)  # valid (empty is fine: a healthy demo fires nothing)
        flat = " ".join(expr.split())
        for probe in ALERT_PROBES[name]:
            assert probe.replace(" bool", "") in flat, f"{name}: probe {probe!r} is not part of {flat!r}"
            if not _has_data(live, probe):
                empty.append(f"{name}: {probe}")
    assert empty == [], "alert probes without data:\n" + "\n".join(empty)


def test_prometheus_evaluated_every_loaded_rule_without_error(live: Prometheus) -> None:
    groups = live.get("/api/v1/rules")["data"]["groups"]
    loaded = {r["name"]: r for g in groups for r in g["rules"]}
    expected = {r.get("record") or r["alert"] for r in _prom.load_rules()}
    assert set(loaded) == expected
    unhealthy = {n: r.get("lastError") for n, r in loaded.items() if r["health"] != "ok"}
    assert unhealthy == {}
