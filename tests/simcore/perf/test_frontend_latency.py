"""The fixed front-end latency per request (CalibrationProfile.frontend_s): HTTP, chat template, tokenizer and
the first token's way back, outside the scheduler loop. It is added by `simcore.engine.simulate` only."""
from __future__ import annotations

import pytest

from simcore.engine import simulate
from simcore.gpus import load_gpu
from simcore.models import load_model
from simcore.perf import CalibrationProfile, build_latency_model
from simcore.perf.base import GpuTimeScaling, LatencyModel
from simcore.request import RequestSpec
from simcore.settings import ServerSettings, resolve

QWEN8 = load_model("Qwen/Qwen3-8B")
H100 = load_gpu("h100_sxm")


def _ttft(profile: CalibrationProfile, **kw: float) -> float:
    lm = build_latency_model(QWEN8, H100, 1, "bf16", profile=profile)
    settings = resolve(ServerSettings(sglang_version="0.5.9"), H100.memory_bytes)
    req = RequestSpec(rid="a", arrival_s=1.0, input_len=241, output_len=8, ignore_eos=True)
    res = simulate(settings, lm, [req], kv_capacity_tokens=100_000, **kw)
    return res.records[0].ttft_s


def test_an_idle_server_adds_exactly_the_frontend_latency_to_ttft() -> None:
    base = CalibrationProfile(cpu_base_s=0.001)
    with_frontend = base.model_copy(update={"frontend_s": 0.004})
    t0, t1 = _ttft(base), _ttft(with_frontend)
    # one request on an idle server: it reaches the scheduler 4 ms later and everything after is unchanged
    assert t1 - t0 == pytest.approx(0.004, abs=1e-12)
    # an explicit tokenizer delay adds on top (predict --tokenize-ms)
    assert _ttft(with_frontend, tokenize_s=0.002) - t0 == pytest.approx(0.006, abs=1e-12)


def test_the_hash_of_older_profiles_does_not_change() -> None:
    p = CalibrationProfile(gpu_per_req_s=1.5e-5)
    payload_without = p.model_dump(exclude={"name", "source", "fit_stats", "frontend_s", "gpu_per_req_s_by_version",
                                            "launch_s_per_mla_layer", "extend_s_per_layer",
                                            "extend_s_per_layer_by_version", "fp4_moe_autotuned_scale",
                                            "fp8_moe_prefill_scale"})
    import hashlib
    import json
    expected = hashlib.sha256(json.dumps(payload_without, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert p.profile_hash == expected[:12]
    assert p.model_copy(update={"frontend_s": 0.004}).profile_hash != p.profile_hash
    assert p.model_copy(update={"gpu_per_req_s_by_version": {"0.4.0": 8e-5}}).profile_hash != p.profile_hash
    assert p.model_copy(update={"launch_s_per_mla_layer": 1.3541e-3}).profile_hash != p.profile_hash
    assert p.model_copy(update={"extend_s_per_layer_by_version": {"0.4.0": 2.3e-4}}).profile_hash != p.profile_hash
    assert p.model_copy(update={"fp4_moe_autotuned_scale": 0.8}).profile_hash != p.profile_hash
    assert p.model_copy(update={"fp8_moe_prefill_scale": 2.0}).profile_hash != p.profile_hash


class _Scaled(GpuTimeScaling):
    def __init__(self, base: LatencyModel) -> None:
        self.base = base


def test_wrappers_pass_the_frontend_latency_through() -> None:
    lm = build_latency_model(QWEN8, H100, 1, "bf16", profile=CalibrationProfile(frontend_s=0.003))
    assert lm.frontend_s == 0.003  # type: ignore[attr-defined]
    assert _Scaled(lm).frontend_s == 0.003
