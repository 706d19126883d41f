"""``simulate``: one server, one workload, run to completion; the summary ``shadowsim predict --json`` prints.

The acceptance check at the end replays the whole Mooncake conversation trace (12,031 requests) with an unlimited
KV pool: the simulated cache hit rate must come within 2 points of the trace's own prefix-reuse ceiling (what an
infinite cache could reuse at best) and never exceed it.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from simcore.engine import simulate
from simcore.perf.base import LinearLatencyModel
from simcore.request import RequestSpec
from simcore.settings import ServerSettings, resolve
from simcore.workload import ClosedLoop, TraceReplay, prefix_reuse_ceiling

GiB = 1024**3
KEYS = ("num_requests", "throughput_rps", "output_tokens_per_s", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms",
        "cache_hit_rate", "kv_peak_usage", "num_retractions", "sim_time_s", "wall_time_s")


def _settings(**kw: object) -> ServerSettings:
    return resolve(ServerSettings(**kw), 80 * GiB)


def test_summary_of_a_closed_loop() -> None:
    lat = LinearLatencyModel(base_s=0.01, per_extend_token_s=1e-4, per_decode_req_s=0.0, per_kv_token_s=0.0)
    res = simulate(_settings(), lat, ClosedLoop(4, 40, 200, 21, seed=1), kv_capacity_tokens=100_000)
    s = res.summary()
    assert set(KEYS) <= set(s)
    for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert set(s[k]) == {"mean", "p50", "p90", "p99"}
        assert s[k]["p50"] <= s[k]["p90"] <= s[k]["p99"]
    assert s["num_requests"] == 40 and res.unfinished == 0
    assert s["output_tokens"] == 40 * 21 and s["prompt_tokens"] == 40 * 200
    # every decode step is 10 ms, so TPOT and the ITL between steps are 10 ms unless a prefill interleaves
    assert s["itl_ms"]["p50"] == pytest.approx(10.0)
    assert s["tpot_ms"]["mean"] == pytest.approx(10.0)  # 4 clients in lock step: no prefill between decodes
    assert 0 < s["kv_peak_usage"] < 0.02
    assert s["throughput_rps"] == pytest.approx(40 / max(r.finish_s for r in res.records))
    assert s["sim_time_s"] == pytest.approx(max(r.finish_s for r in res.records))


def test_itl_weights_count_every_generated_token() -> None:
    lat = LinearLatencyModel(base_s=0.01, per_extend_token_s=0.0, per_decode_req_s=0.0, per_kv_token_s=0.0)
    reqs = [RequestSpec(f"r{i}", 0.1 * i, 50, 30, 30) for i in range(8)]
    res = simulate(_settings(), lat, reqs, kv_capacity_tokens=100_000)
    # one inter-token gap per token after the first
    assert sum(res.itl_weights) == 8 * 29
    mean_tpot = sum(r.tpot_s for r in res.records) / 8
    weighted = sum(v * w for v, w in zip(res.itl_values_s, res.itl_weights)) / sum(res.itl_weights)
    assert weighted == pytest.approx(mean_tpot)


def test_sequence_workload_and_until() -> None:
    lat = LinearLatencyModel()
    reqs = [RequestSpec(f"r{i}", float(i), 100, 10, 10) for i in range(10)]
    part = simulate(_settings(), lat, reqs, kv_capacity_tokens=10_000, until=4.5)
    assert len(part.records) == 5 and part.unfinished == 0 and part.sim_time_s == 4.5
    whole = simulate(_settings(), lat, reqs, kv_capacity_tokens=10_000)
    assert len(whole.records) == 10


def test_progress_callback_is_called() -> None:
    seen: list[tuple[float, int]] = []
    reqs = [RequestSpec(f"r{i}", float(i), 100, 10, 10) for i in range(5)]
    res = simulate(_settings(), LinearLatencyModel(), reqs, kv_capacity_tokens=10_000,
                   progress=lambda t, n: seen.append((t, n)), progress_every_s=1.0)
    assert seen[0] == (1.0, 1) and len(res.records) == 5
    assert not math.isnan(res.summary()["ttft_ms"]["mean"])


@pytest.mark.slow
def test_mooncake_cache_hit_rate_reaches_prefix_reuse_ceiling(shared_dir: Path) -> None:
    from simcore.gpus import load_gpu
    from simcore.models import load_model
    from simcore.perf import build_latency_model
    from streams.traces import read_trace

    trace = read_trace(shared_dir / "data" / "mooncake" / "conversation_trace.jsonl")
    assert len(trace.requests) == 12031 and not trace.issues
    ceiling = prefix_reuse_ceiling(trace.requests)
    gpu = load_gpu("h100_sxm")
    lat = build_latency_model(load_model("meta-llama/Llama-3.1-8B-Instruct"), gpu, 1, "bf16")
    res = simulate(resolve(ServerSettings(), gpu.memory_bytes), lat, TraceReplay(trace.requests),
                   kv_capacity_tokens=1_000_000_000, key_unit=512)
    hit = res.summary()["cache_hit_rate"]
    assert len(res.records) == 12031
    assert hit <= ceiling
    assert ceiling - hit <= 0.02, (hit, ceiling)
