"""A twin's server settings and KV pool: resolved for its GPU and sized like SGLang when the server has not said.

SGLang picks chunked_prefill_size and the decode CUDA-graph sizes from the GPU's memory (spec §6.1), and sizes its
KV pool from model, GPU, TP and mem_fraction_static (§4). A twin that knows its model and GPU must do the same; the
server's own figures (server_config events) win.
"""
from __future__ import annotations

from shadowsim.shadow.config import InstanceConfig
from shadowsim.shadow.engine import FALLBACK_KV_TOKENS, build_settings, instance_tp, kv_capacity_tokens
from simcore.gpus import load_gpu
from simcore.memory import size_kv_pool
from simcore.models import load_model
from simcore.settings import ServerSettings, resolve


def test_settings_are_resolved_for_the_instance_gpu() -> None:
    h100 = build_settings(InstanceConfig(model="Qwen/Qwen3-8B", gpu="h100_sxm"), {})
    # §6.1 table: an 80 GB GPU gets chunked prefill 8192 and decode graphs up to 256 (tp < 4)
    assert (h100.chunked_prefill_size, h100.cuda_graph_max_bs) == (8192, 256)
    b200 = build_settings(InstanceConfig(model="Qwen/Qwen3-8B"), {"gpu": "b200_sxm"})  # the server's word
    assert (b200.chunked_prefill_size, b200.cuda_graph_max_bs) == (16384, 512)
    unknown = build_settings(InstanceConfig(), {})
    assert (unknown.chunked_prefill_size, unknown.cuda_graph_max_bs) == (4096, 160)  # SGLang's 'unknown GPU' row


def test_kv_pool_comes_from_the_server_then_the_config_then_sglang_sizing() -> None:
    cfg = InstanceConfig(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100_sxm")
    s = build_settings(cfg, {})
    expected = size_kv_pool(load_model(cfg.model), load_gpu("h100_sxm"), s, "bf16").max_total_num_tokens
    assert kv_capacity_tokens(cfg, {}, s) == expected
    assert abs(expected - 410_000) / 410_000 < 0.03  # the spec's worked example (§4.4): ≈ 410k tokens
    assert kv_capacity_tokens(cfg, {"max_total_num_tokens": 123_456}, s) == 123_456
    pinned = InstanceConfig(model=cfg.model, gpu="h100_sxm", kv_capacity_tokens=50_000)
    assert kv_capacity_tokens(pinned, {}, s) == 50_000
    assert kv_capacity_tokens(pinned, {"max_total_num_tokens": 77_000}, s) == 77_000


def test_kv_pool_placeholder_when_nothing_is_known() -> None:
    cfg = InstanceConfig()
    s = resolve(ServerSettings(), None)
    assert kv_capacity_tokens(cfg, {}, s) == FALLBACK_KV_TOKENS
    assert kv_capacity_tokens(InstanceConfig(model="no/such-model", gpu="h100_sxm"), {}, s) == FALLBACK_KV_TOKENS


def test_latency_model_and_kv_sizing_agree_on_tp() -> None:
    # the entry's tp_size beats settings.tp_size, and a server_config event beats both, for the latency model
    # (instance_tp) and for the settings the KV pool is sized from alike
    cfg = InstanceConfig(model="Qwen/Qwen3-8B", gpu="h100_sxm", tp_size=2, settings={"tp_size": 4})
    assert instance_tp(cfg, {}) == build_settings(cfg, {}).tp_size == 2
    assert instance_tp(cfg, {"tp_size": 8}) == build_settings(cfg, {"tp_size": 8}).tp_size == 8
    only_settings = InstanceConfig(model="Qwen/Qwen3-8B", gpu="h100_sxm", settings={"tp_size": 4})
    assert instance_tp(only_settings, {}) == build_settings(only_settings, {}).tp_size == 4
