"""Independent check: `shadowsim validate validation/gpustack_sglang.csv` (GPUStack's SGLang runs, other models/GPUs).

The file is GPUStack's published SGLang benchmarks (vllm bench serve, ShareGPT, 1000-prompt bursts or 4 clients),
built by validation/build_gpustack.py. Of its 51 runs, 14 can be simulated (DeepSeek-R1 H200 TP8, Qwen3-235B-A22B
A100/H100 TP8, Qwen3-32B bf16 A100/H100 and fp8 H100 TP1, Qwen3-14B A100/H100, Qwen3-8B bf16/fp8 H100, and fp8 with
EAGLE3 speculative decoding); the other 37 are skipped with
their reason. No accuracy threshold is asserted: the errors are reported in docs/accuracy.md §3.5. What is
asserted: the file is the build script's output, every row completes, the errors are finite and within a loose
sanity bound (prediction within 5× of the measurement either way).
"""
from __future__ import annotations

import importlib.util
import math
from collections import Counter

import pytest

from shadowsim.commands.validate import read_rows
from simcore.errors import UserError
from simcore.perf.validation import (EXPONENTIAL_SHAPE, SHAREGPT_SHAPE_INPUT, SHAREGPT_SHAPE_OUTPUT, Protocol,
                                     lengths, rows_from_records, validate)


@pytest.fixture(scope="module")
def gpustack_csv(repo_dir):
    return repo_dir / "validation" / "gpustack_sglang.csv"


@pytest.fixture(scope="module")
def result(gpustack_csv):
    return validate(read_rows(gpustack_csv))


def _build_module(repo_dir):
    spec = importlib.util.spec_from_file_location("build_gpustack", repo_dir / "validation" / "build_gpustack.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_csv_is_the_build_scripts_output(repo_dir, shared_dir, gpustack_csv) -> None:
    build = _build_module(repo_dir)
    rows, dropped = build.build(shared_dir)
    assert build.render(rows) == gpustack_csv.read_text()
    assert len(rows) == 51 and len(dropped) == 3  # 54 SGLang runs, 3 without a printed result
    # the protocol read from the pages: 1000-prompt bursts, and 100 prompts at --max-concurrency 4
    burst = next(r for r in rows if r["id"] == "qwen3-32b-h100_1-choosing-the-inference-engine")
    assert (burst["concurrency"], burst["num_requests"], burst["isl"], burst["osl"]) == (1000, 1000, 217, 202)
    latency = next(r for r in rows if r["id"] == "qwen3-8b-h100-latency_3-quantization")
    assert (latency["model"], latency["precision"], latency["concurrency"], latency["num_requests"]) == (
        "Qwen/Qwen3-8B", "fp8_block", 4, 100)


def test_shape_constants_come_from_the_sharegpt_stream(repo_dir, shared_dir) -> None:
    ins, outs = _build_module(repo_dir).shape(shared_dir)
    assert ins == SHAREGPT_SHAPE_INPUT and outs == SHAREGPT_SHAPE_OUTPUT


def test_fourteen_rows_simulate_and_the_rest_are_skipped_with_reasons(result) -> None:
    assert len(result["rows"]) == 14 and len(result["skipped"]) == 37
    kinds = Counter(s["reason"].split(" (")[0].split("'")[0] for s in result["skipped"])
    # GLM-4.5-Air/4.6, gpt-oss, DeepSeek-V3.2: unknown, or known not to be modelled (with the reason); 6 of them
    # run expert parallelism, which is simulated once the model is (simcore/perf/moe_parallel.py), and
    # DeepSeek-V3.2's EP run is also a DP-attention run
    assert sum(n for k, n in kinds.items() if k.startswith("--model:")) == 21  # DeepSeek-V3.2 MTP included
    assert sum(1 for s in result["skipped"] if "sliding-window" in s["reason"]) >= 1
    assert kinds["expert parallelism"] == 0 and kinds["DP attention"] == 7
    # speculative decoding is simulated (simcore/speculative.py): of the 4 runs with it, the EAGLE3 one runs;
    # the others are skipped for torch.compile (2) or an unknown model (DeepSeek-V3.2)
    assert kinds["speculative decoding is not modelled"] == 0 and kinds["torch.compile is not modelled"] == 3
    eagle3 = next(r for r in result["rows"] if r["id"] == "qwen3-8b-h100-latency_5-speculative-decoding")
    plain = next(r for r in result["rows"] if r["id"] == "qwen3-8b-h100-latency_3-quantization")
    # the same FP8 server without speculation decodes slower: measured 5.65 vs 4.07 ms TPOT, and so predicted
    assert eagle3["predicted_tpot_ms"] < 0.8 * plain["predicted_tpot_ms"]
    assert {r["gpu"] for r in result["rows"]} == {"h100_sxm", "h200_sxm", "a100_sxm"}


def test_errors_are_finite_and_within_a_sanity_bound(result) -> None:
    for m in ("ttft", "tpot", "throughput"):
        assert result["summary"][m]["n"] == 14
        assert math.isfinite(result["summary"][m]["mape"])
    for r in result["rows"]:
        for m, unit in (("ttft", "ms"), ("tpot", "ms"), ("throughput", "rps")):
            ratio = r[f"predicted_{m}_{unit}"] / r[f"measured_{m}_{unit}"]
            assert 0.2 < ratio < 5.0, (r["id"], m, ratio)


def test_every_burst_request_is_measured(result) -> None:
    counts = {r.row.id: r.requests for r in result["_results"]}
    assert counts["deepseek-r1-h200_1-choosing-the-inference-engine"] == 1000
    assert counts["qwen3-235b-a22b-h100_1-choosing-the-inference-engine"] == 984  # 16 of 1000 failed in the run
    assert counts["qwen3-8b-h100-latency_1-choosing-the-inference-engine"] == 100  # no warm-up rows


def test_length_distributions_keep_the_row_means() -> None:
    assert lengths("fixed", 217, 202, 8) == (225, 202)
    assert sum(EXPONENTIAL_SHAPE) / len(EXPONENTIAL_SHAPE) == pytest.approx(1.0)
    for dist in ("sharegpt", "exponential"):
        ins, outs = lengths(dist, 217, 202, 8)
        assert sum(ins.values) / len(ins.values) == pytest.approx(225, rel=0.02)
        assert sum(outs.values) / len(outs.values) == pytest.approx(202, rel=0.02)
        assert min(outs.values) >= 4 and max(ins.values) <= 1024 + 8  # bench serve's ShareGPT filter
    with pytest.raises(UserError, match="length distribution"):
        Protocol(length_dist="zipf")


def test_optional_columns_parse_and_steer_the_row() -> None:
    fields = ["id", "model", "gpu", "tp", "isl", "osl", "concurrency", "warmup_requests", "length_dist", "unsupported"]
    rows = rows_from_records([
        {"id": "a", "model": "Qwen/Qwen3-8B", "gpu": "h100_sxm", "tp": "1", "isl": "100", "osl": "20",
         "concurrency": "2", "warmup_requests": "0", "length_dist": "Exponential", "unsupported": ""},
        {"id": "b", "model": "Qwen/Qwen3-8B", "gpu": "h100_sxm", "tp": "1", "isl": "100", "osl": "20",
         "concurrency": "2", "warmup_requests": "", "length_dist": "", "unsupported": "speculative decoding"},
    ], fields)
    assert (rows[0].warmup_requests, rows[0].length_dist, rows[0].unsupported) == (0, "exponential", None)
    assert (rows[1].warmup_requests, rows[1].length_dist, rows[1].unsupported) == (None, "fixed",
                                                                                   "speculative decoding")
    out = validate(rows, protocol=Protocol(requests_per_client=3))
    assert out["skipped"] == [{"id": "b", "reason": "speculative decoding"}]
    assert out["_results"][0].requests == 6  # 2 clients × 3, and no warm-up because the row says 0
    with pytest.raises(UserError, match="unknown length distribution"):
        rows_from_records([{"id": "c", "model": "m", "gpu": "g", "tp": "1", "isl": "1", "osl": "1",
                            "length_dist": "zipf"}], fields)
