"""KV pool sizing (sglang-internals.md §4): how many tokens of KV a server holds, and how many requests it runs.

The numbers to reproduce are the spec's worked examples (§4.1, §4.4) and a real 0.4.3 startup log.
"""
from __future__ import annotations

import pytest

from simcore.errors import UserError
from simcore.gpus import load_gpu
from simcore.memory import (GiB, MiB, default_mem_fraction_static, kv_dtype_bytes, kv_tokens_from_measured,
                            max_running_requests, max_total_num_tokens, mem_fraction_family, size_kv_pool)
from simcore.models.loader import load_model
from simcore.settings import ServerSettings

H100_BYTES = 81559 * MiB  # what the driver reports for an H100-80GB


@pytest.mark.parametrize("family,expected", [("0.5.23", 0.830), ("0.5", 0.835), ("0.4", 0.874)])
def test_default_mem_fraction_h100_examples(family: str, expected: float) -> None:
    # §4.1: TP1, chunked prefill 8192, decode max_bs 256, 58 prefill-graph buckets (0.5.23 only)
    assert default_mem_fraction_static(H100_BYTES, family, 1, 8192, 256) == expected  # type: ignore[arg-type]


def test_default_mem_fraction_other_regimes() -> None:
    # 0.4.10 table: H200 reserves 12 + tp/2 GiB; >= 160 GiB reserves 32 GiB
    h200 = 143771 * MiB
    assert default_mem_fraction_static(h200, "0.4", 2) == round((143771 - 13 * 1024) / 143771, 3)
    assert default_mem_fraction_static(192 * GiB, "0.4") == round((192 * 1024 - 32 * 1024) / (192 * 1024), 3)
    # 0.5: small GPUs do not get the 10 GiB floor; chunking off sizes activations by max_prefill_tokens
    l4 = 22 * GiB
    reserved = 512 + 16384 * 1.5 + 1024 / 8 + 8 * 2
    assert default_mem_fraction_static(l4, "0.5", 1, -1, 8) == round((22 * 1024 - reserved) / (22 * 1024), 3)
    # 0.5.23 arg_groups/memory_hook.py::reserve_for_graph_mb (lines 386-390): an MLA model's prefill graphs reserve
    # 1.5 GiB *instead of* 8 MiB per bucket: 1536 − 58·8 = 1072 MiB more than a dense model, not 1536
    a = default_mem_fraction_static(H100_BYTES, "0.5.23", 8, 8192, 256)
    b = default_mem_fraction_static(H100_BYTES, "0.5.23", 8, 8192, 256, is_mla=True)
    reserved_dense = 512 + 8192 * 1.5 + 1024 + 256 * 2 + 58 * 8
    assert a == round((81559 - reserved_dense) / 81559, 3)
    assert b == round((81559 - (reserved_dense - 58 * 8 + 1536)) / 81559, 3)


def test_disable_cuda_graph_drops_the_graph_reserve_0_5_23() -> None:
    # 0.5.23 memory_hook.py::reserve_for_graph_mb (lines 360-397): the decode (2 MiB × max_bs) and prefill graph
    # terms apply only when their graph backend is enabled; --disable-cuda-graph disables both. L4-sized GPU so the
    # 10 GiB floor does not hide the difference.
    l4 = 22 * GiB
    on = default_mem_fraction_static(l4, "0.5.23", 1, 2048, 8)
    off = default_mem_fraction_static(l4, "0.5.23", 1, 2048, 8, disable_cuda_graph=True)
    base = 512 + 2048 * 1.5 + 1024 / 8
    assert on == round((22 * 1024 - base - 8 * 2 - 58 * 8) / (22 * 1024), 3)
    assert off == round((22 * 1024 - base) / (22 * 1024), 3)
    # the 0.5.9 family keeps its decode-graph term whatever the flag (0.5.9 server_args.py line 1029, unconditional)
    assert default_mem_fraction_static(l4, "0.5", 1, 2048, 8, disable_cuda_graph=True) == round(
        (22 * 1024 - base - 8 * 2) / (22 * 1024), 3)


@pytest.mark.parametrize("version,family", [("0.4.10", "0.4"), ("0.5.1.post1", "0.4"), ("0.5.2", "0.4"),
                                             ("0.5.3", "0.5"), ("0.5.8.post1", "0.5"), ("0.5.23", "0.5.23")])
def test_mem_fraction_rules_follow_the_release_that_introduced_them(version: str, family: str) -> None:
    # The reserved-memory formula is SGLang PR #10975 (2025-09-27), first released in 0.5.3; before it the
    # 0.4.x table by GPU size applied, so a default 0.5.1 server on an H100 at TP2 reserves 9.5 + 2/2 GiB.
    assert mem_fraction_family(version) == family
    pool = size_kv_pool(load_model("Qwen/Qwen3-32B"), load_gpu("H100"),
                        ServerSettings(sglang_version=version, tp_size=2))
    expected = {"0.4": 0.868, "0.5": 0.834, "0.5.23": 0.828}[family]
    assert pool.mem_fraction_static == expected


def test_worked_example_llama_8b_h100() -> None:
    """§4.4: Llama-3.1-8B on one H100-80GB holds about 410k tokens (within 2%); TP=2 about 2.3x that."""
    cell = 8 * (128 + 128) * 32 * 2
    assert cell == 131072
    tokens = max_total_num_tokens(H100_BYTES, 16_060_522_496, cell, 0.83)
    assert 410_000 * 0.98 <= tokens <= 410_000 * 1.02
    tp2 = max_total_num_tokens(H100_BYTES, 16_060_522_496 // 2, cell // 2, 0.83)
    assert 2.2 <= tp2 / tokens <= 2.4


def test_real_startup_log_qwq32b_tp4_l4() -> None:
    """sglang_logs/llms-in-clouds_v0.4.3_qwq32b_tp4_l4_startup.log: avail 21.63 GB → 6.09 GB after weights,
    mem_fraction_static 0.85, QwQ-32B (64 layers, 8 KV heads of 128, TP4 → 2 per rank): #tokens 46611."""
    cell = 2 * (128 + 128) * 64 * 2
    tokens = kv_tokens_from_measured(21.63 * GiB, 6.09 * GiB, cell, 0.85)
    assert abs(tokens - 46611) / 46611 < 0.003  # the log rounds memory to 0.01 GB
    assert max_running_requests(46611, 131072, family="0.4") == 2049  # logged value


def test_page_floor_and_explicit_cap() -> None:
    t = max_total_num_tokens(H100_BYTES, 16 * GiB, 131072, 0.83, page_size=64)
    assert t % 64 == 0
    assert max_total_num_tokens(H100_BYTES, 16 * GiB, 131072, 0.83, max_total_tokens=100_000) == 100_000
    assert max_total_num_tokens(H100_BYTES, 16 * GiB, 131072, 0.83, page_size=64, max_total_tokens=100_001) \
        == 100_000 - 100_000 % 64


def test_no_room_for_kv_is_a_user_error() -> None:
    with pytest.raises(UserError) as e:
        max_total_num_tokens(24 * GiB, 30 * GiB, 131072, 0.9)
    assert "mem_fraction_static" in str(e.value)


def test_max_running_requests() -> None:
    assert max_running_requests(410_000, 131072) == 2048  # estimate clamped up to 2048
    assert max_running_requests(2_000_000, 8192) == 4096  # clamped down to 4096
    assert max_running_requests(2_000_000, 300_000) == 3413
    assert max_running_requests(1000, 8192) == 500  # at most half the tokens
    assert max_running_requests(410_000, 131072, given=256, dp=2) == 128
    assert max_running_requests(100, 4096, given=256) == 50


def test_kv_dtype_bytes() -> None:
    assert kv_dtype_bytes("auto", "bf16") == 2 and kv_dtype_bytes("fp8_e4m3") == 1
    with pytest.raises(UserError):
        kv_dtype_bytes("int3")


def test_size_kv_pool_from_catalogues() -> None:
    model, gpu = load_model("meta-llama/Meta-Llama-3.1-8B"), load_gpu("H100")
    s = size_kv_pool(model, gpu, ServerSettings(sglang_version="0.5.23"))
    assert s.mem_fraction_static == 0.830 and s.cell_bytes_per_token == 131072
    assert 0.98 * 410_000 <= s.max_total_num_tokens <= 1.02 * 410_000
    assert s.max_running_requests == 2048
    fp8 = size_kv_pool(model, gpu, ServerSettings(sglang_version="0.5.23", kv_cache_dtype="fp8_e4m3"))
    assert fp8.max_total_num_tokens == pytest.approx(2 * s.max_total_num_tokens, rel=1e-4)
    capped = size_kv_pool(model, gpu, ServerSettings(max_total_tokens=50_000, mem_fraction_static=0.8))
    assert capped.max_total_num_tokens == 50_000 and capped.mem_fraction_static == 0.8
