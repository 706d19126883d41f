"""Stand-in for `shadowsim demo`'s /metrics: serves every metric of docs/metrics.md with moving values.

Only for developing the dashboards while the demo is being built, and for checking the live test
itself (`SHADOWSIM_DASHBOARD_SOURCE=fake`). The real dashboard test scrapes the real demo.

    python tests/deploy/_fake_exporter.py PORT DURATION_S
"""
from __future__ import annotations

import random
import sys
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
               0.100, 0.200, 0.400, 0.600, 0.800, 1, 2, 4, 6, 8)
E2E_BUCKETS = TTFT_BUCKETS + (600, 1200, 1800, 2400)
INSTANCES = ("sglang-0", "sglang-1")
MODEL = "Qwen/Qwen3-8B"


def build(registry: CollectorRegistry) -> dict[str, object]:
    im = ["instance", "model"]
    return {
        "build": Gauge("shadowsim_build_info", "build",
                       ["version", "model", "instance", "latency_model", "calibration_hash"], registry=registry),
        "ttft": Histogram("shadowsim_ttft_seconds", "ttft", im + ["source"], buckets=TTFT_BUCKETS, registry=registry),
        "tpot": Histogram("shadowsim_tpot_seconds", "tpot", im + ["source"], buckets=ITL_BUCKETS, registry=registry),
        "e2e": Histogram("shadowsim_e2e_seconds", "e2e", im + ["source"], buckets=E2E_BUCKETS, registry=registry),
        "ape": Histogram("shadowsim_prediction_ape_ratio", "ape", im + ["metric", "mode"],
                         buckets=(0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2), registry=registry),
        "mape": Gauge("shadowsim_prediction_mape_ratio", "mape", im + ["metric", "mode"], registry=registry),
        "thr": Gauge("shadowsim_drift_threshold_ratio", "thr", im + ["metric"], registry=registry),
        "drift": Gauge("shadowsim_drift_detected", "drift", im + ["kind"], registry=registry),
        "cal": Gauge("shadowsim_calibration_factor", "cal", im + ["op_class"], registry=registry),
        "calb": Gauge("shadowsim_calibration_factor_baseline", "calb", im + ["op_class"], registry=registry),
        "fin": Counter("shadowsim_requests_finished_total", "fin", im + ["source"], registry=registry),
        "out": Counter("shadowsim_output_tokens_total", "out", im + ["source"], registry=registry),
        "prompt": Counter("shadowsim_prompt_tokens_total", "prompt", im + ["source"], registry=registry),
        "cached": Counter("shadowsim_cached_tokens_total", "cached", im + ["source"], registry=registry),
        "queue": Gauge("shadowsim_queue_requests", "queue", im + ["source"], registry=registry),
        "running": Gauge("shadowsim_running_requests", "running", im + ["source"], registry=registry),
        "kv": Gauge("shadowsim_kv_usage_ratio", "kv", im + ["source"], registry=registry),
        "events": Counter("shadowsim_events_processed_total", "events", ["instance"], registry=registry),
        "late": Counter("shadowsim_events_late_total", "late", ["instance"], registry=registry),
        "dead": Counter("shadowsim_events_dead_lettered_total", "dead", ["reason"], registry=registry),
        "lag": Gauge("shadowsim_shadow_lag_seconds", "lag", ["instance"], registry=registry),
        "last": Gauge("shadowsim_last_event_timestamp_seconds", "last", ["instance"], registry=registry),
        "twin": Gauge("shadowsim_twin_up", "twin", im, registry=registry),
    }


def tick(m: dict, rng: random.Random) -> None:
    for inst in INSTANCES:
        m["twin"].labels(inst, MODEL).set(1)
        m["build"].labels("0.1.0", MODEL, inst, "linear", "abc123").set(1)
        for source in ("predicted", "actual"):
            m["ttft"].labels(inst, MODEL, source).observe(rng.uniform(0.05, 0.5))
            m["tpot"].labels(inst, MODEL, source).observe(rng.uniform(0.01, 0.03))
            m["e2e"].labels(inst, MODEL, source).observe(rng.uniform(1, 5))
            m["fin"].labels(inst, MODEL, source).inc()
            m["out"].labels(inst, MODEL, source).inc(rng.randint(50, 200))
            m["prompt"].labels(inst, MODEL, source).inc(1000)
            m["cached"].labels(inst, MODEL, source).inc(rng.randint(0, 800))
            m["queue"].labels(inst, MODEL, source).set(rng.randint(0, 5))
            m["running"].labels(inst, MODEL, source).set(rng.randint(1, 32))
            m["kv"].labels(inst, MODEL, source).set(rng.uniform(0.2, 0.9))
        for metric in ("ttft", "tpot", "e2e"):
            m["thr"].labels(inst, MODEL, metric).set(0.2)
            for mode in ("free", "anchored"):
                m["ape"].labels(inst, MODEL, metric, mode).observe(rng.uniform(0, 0.3))
                m["mape"].labels(inst, MODEL, metric, mode).set(rng.uniform(0.02, 0.15))
        for kind in ("model", "performance"):
            m["drift"].labels(inst, MODEL, kind).set(0)
        for op in ("prefill", "decode"):
            m["cal"].labels(inst, MODEL, op).set(rng.uniform(0.95, 1.05))
            m["calb"].labels(inst, MODEL, op).set(1.0)
        m["events"].labels(inst).inc(10)
        m["late"].labels(inst).inc(0)
        m["lag"].labels(inst).set(rng.uniform(0.1, 1))
        m["last"].labels(inst).set(time.time())
    m["dead"].labels("JSONDecodeError").inc(0)


def main(argv: list[str]) -> int:
    port, duration = int(argv[0]), float(argv[1])
    registry = CollectorRegistry()
    metrics = build(registry)
    rng = random.Random(1)
    start_http_server(port, addr="127.0.0.1", registry=registry)
    end = time.monotonic() + duration
    while time.monotonic() < end:
        tick(metrics, rng)
        time.sleep(0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
