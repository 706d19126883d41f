"""Independent check: `shadowsim validate validation/gpustack_sglang.csv` (GPUStack's SGLang runs, other models/GPUs).

The file is GPUStack's published SGLang benchmarks (vllm bench serve, ShareGPT, 1000-prompt bursts or 4 clients),
built by validation/build_gpustack.py. Of its 51 runs, 32 can be simulated (DeepSeek-R1 and DeepSeek-V3.2 H200 TP8, the latter also with MTP
and with DP attention 8 (simcore/dp_attention.py),
GLM-4.5-Air A100/H100 TP4, gpt-oss-20b/120b A100/H100 TP1, Qwen3-235B-A22B A100/H100 TP8, Qwen3-32B bf16 A100/H100
and fp8 H100 TP1, Qwen3-14B A100/H100, Qwen3-8B bf16/fp8 H100, and fp8 with EAGLE3); the other 19 are skipped
with their reason. No
accuracy threshold is asserted: the errors are reported in docs/accuracy.md §3.5. What is asserted: the file is
the build script's output, every row completes, the errors are finite and within a loose sanity bound
(prediction within 5× of the measurement either way) except for the gpt-oss and DeepSeek-V3.2 rows, whose
measurements contradict the physics of the same page set (asserted below) and are reported, not bounded.
"""
from __future__ import annotations

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




def test_csv_is_the_build_scripts_output(repo_dir, shared_dir, gpustack_csv, validation_builder) -> None:
    build = validation_builder("build_gpustack")
    rows, dropped = build.build(shared_dir)
    assert build.render(rows) == gpustack_csv.read_text()
    assert len(rows) == 51 and len(dropped) == 3  # 54 SGLang runs, 3 without a printed result
    # the protocol read from the pages: 1000-prompt bursts, and 100 prompts at --max-concurrency 4
    burst = next(r for r in rows if r["id"] == "qwen3-32b-h100_1-choosing-the-inference-engine")
    assert (burst["concurrency"], burst["num_requests"], burst["isl"], burst["osl"]) == (1000, 1000, 217, 202)
    latency = next(r for r in rows if r["id"] == "qwen3-8b-h100-latency_3-quantization")
    assert (latency["model"], latency["precision"], latency["concurrency"], latency["num_requests"]) == (
        "Qwen/Qwen3-8B", "fp8_block", 4, 100)


def test_shape_constants_come_from_the_sharegpt_stream(repo_dir, shared_dir, validation_builder) -> None:
    ins, outs = validation_builder("build_gpustack").shape(shared_dir)
    assert ins == SHAREGPT_SHAPE_INPUT and outs == SHAREGPT_SHAPE_OUTPUT


def test_thirty_two_rows_simulate_and_the_rest_are_skipped_with_reasons(result) -> None:
    assert len(result["rows"]) == 32 and len(result["skipped"]) == 19
    kinds = Counter(s["reason"].split(" (")[0].split("'")[0] for s in result["skipped"])
    # GLM-4.6 and GLM-4.5-Air-FP8 are not in the catalogue; GLM-4.5-Air in bf16 (213 GB of weights) cannot fit
    # two 80 GB H100s, so its TP2 runs are refused with the memory error
    assert sum(n for k, n in kinds.items() if k.startswith("--model:")) == 8
    assert all("GLM-4.6" in s["reason"] or "GLM-4.5-Air-FP8" in s["reason"]
               for s in result["skipped"] if s["reason"].startswith("--model:"))
    assert kinds["mem_fraction_static: no memory left for the KV cache"] == 2
    assert kinds["expert parallelism"] == 0 and kinds["DP attention"] == 0
    # DP attention is simulated: 5 runs at --dp-size 8; the 2 runs with --enable-dp-attention but no --dp-size are
    # plain TP8, as SGLang serves them (ServerArgs._handle_data_parallelism turns DP attention off at dp_size 1)
    rows = {r.row.id: r.row for r in result["_results"]}
    dp = {i for i, row in rows.items() if row.dp_attention == 8}
    assert len(dp) == 5
    # the flags as typed (`--dp-size 8`, or SGLang's `--dp 8`) say the same as the column
    assert all(rows[i].server_settings["dp_size"] == 8 and rows[i].server_settings["enable_dp_attention"] for i in dp)
    assert rows["deepseek-r1-h200_2-parallelism-in-sglang"].dp_attention == 1
    assert rows["deepseek-v3-2-h200_parallelism-tp-dp-attention"].dp_attention == 1
    # speculative decoding is simulated (simcore/speculative.py): of the 4 runs with it, EAGLE3 on Qwen3-8B and
    # MTP on DeepSeek-V3.2 run; the other two are skipped for torch.compile
    assert kinds["speculative decoding is not modelled"] == 0 and kinds["torch.compile is not modelled"] == 3
    assert {r["id"] for r in result["rows"]} >= {"qwen3-8b-h100-latency_5-speculative-decoding", "deepseek-v3-2-h200_mtp"}
    eagle3 = next(r for r in result["rows"] if r["id"] == "qwen3-8b-h100-latency_5-speculative-decoding")
    plain = next(r for r in result["rows"] if r["id"] == "qwen3-8b-h100-latency_3-quantization")
    # the same FP8 server without speculation decodes slower: measured 5.65 vs 4.07 ms TPOT, and so predicted
    # (4.95 vs 4.19 ms with the default acceptance, 0.7 per draft token; docs/accuracy.md §3.12)
    assert eagle3["predicted_tpot_ms"] < 0.9 * plain["predicted_tpot_ms"]
    assert {r["gpu"] for r in result["rows"]} == {"h100_sxm", "h200_sxm", "a100_sxm"}


# Rows whose measurements the sanity bound does not apply to (test_unbounded_rows_contradict_the_physics)
UNBOUNDED_MODELS = ("openai/gpt-oss-20b", "openai/gpt-oss-120b", "deepseek-ai/DeepSeek-V3.2")


def test_errors_are_finite_and_within_a_sanity_bound(result) -> None:
    for m in ("ttft", "tpot", "throughput"):
        assert result["summary"][m]["n"] == 32
        assert math.isfinite(result["summary"][m]["mape"])
    for r in result["rows"]:
        if r["model"] in UNBOUNDED_MODELS:
            continue
        for m, unit in (("ttft", "ms"), ("tpot", "ms"), ("throughput", "rps")):
            ratio = r[f"predicted_{m}_{unit}"] / r[f"measured_{m}_{unit}"]
            assert 0.2 < ratio < 5.0, (r["id"], m, ratio)


def test_unbounded_rows_contradict_the_physics(result) -> None:
    """Why the gpt-oss and DeepSeek-V3.2 rows are reported but not bounded: on the same GPU, SGLang and benchmark,
    gpt-oss-20b decodes 5-8x slower per token than gpt-oss-120b, which reads 6x more expert bytes in a large
    decode step (36 layers x 128 experts against 24 x 32, all of the same 3 x 2880 x 2880 shape), and DeepSeek-V3.2 decodes
    2.6x slower than DeepSeek-R1 at prompts of ~220 tokens, where its sparse attention (top-2048) selects every
    token and does the same work as R1's MLA. The simulator prices the physics, so the ratios to these
    measurements say more about the runs than about the model (docs/accuracy.md §3.5)."""
    meas = {r["id"]: r["measured_tpot_ms"] for r in result["rows"]}
    for gpu in ("a100", "h100"):
        assert meas[f"gpt-oss-20b-{gpu}_1-choosing-the-inference-engine"] > \
            5 * meas[f"gpt-oss-120b-{gpu}_1-choosing-the-inference-engine"]
    assert meas["deepseek-v3-2-h200_1-baseline-of-the-inference-engine"] > \
        2.5 * meas["deepseek-r1-h200_1-choosing-the-inference-engine"]
    # and the simulator keeps the physical order: the larger model is the slower one per decode step at equal
    # batch (checked on the step model directly, not on these burst runs whose batches differ)
    from simcore.gpus import load_gpu
    from simcore.models import load_model
    from simcore.perf import BatchShape, build_latency_model

    shape = BatchShape(num_decode=256, decode_sum_kv=256 * 400, cuda_graph_bs=256)
    step = {m: build_latency_model(load_model(f"openai/{m}"), load_gpu("h100_sxm"), 1, "mxfp4").step_time(shape).gpu_s
            for m in ("gpt-oss-20b", "gpt-oss-120b")}
    assert step["gpt-oss-120b"] > 2 * step["gpt-oss-20b"]


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
