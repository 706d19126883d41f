"""Known-config open-loop runs: `shadowsim validate validation/datacrunch_h200_sglang.csv` (docs/accuracy.md §3.11).

DataCrunch's public SGLang 0.4.0.post1 runs on H200 (Llama-3.3-70B TP4, Llama-3.1-405B TP8; bench_serving random
dataset, Poisson at 1-16 req/s, and offline), built by validation/build_datacrunch.py from the bench_serving
output files copied into validation/datacrunch_h200/. Asserted: the file is the build script's output; the
simulated client draws exactly the lengths the real one drew (the files' token totals); every row simulates with
finite median TTFT / median ITL / output-throughput errors. No accuracy threshold (the figures are in the docs).
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from shadowsim.commands.validate import read_rows
from simcore.benchmark_clients import bench_serving_lengths
from simcore.perf.profile import CalibrationProfile, default_profile
from simcore.perf.validation import validate, weighted_median




def test_file_is_the_build_output(repo_dir, validation_builder) -> None:
    mod = validation_builder("build_datacrunch")
    assert mod.main(["--check"]) == 0
    rows = mod.build_rows()
    assert len(rows) == 15  # 70B: 5 rates + 6 offline; 405B: 4 rates (ShareGPT runs left out)
    r = next(x for x in rows if x["id"] == "llama3.1-405b-tp8_1024x1024_4rps_n1200")
    assert (r["measured_ttft_p50_ms"], r["measured_itl_p50_ms"], r["measured_output_tokens_per_s"]) == \
        ("602.136", "135.229", "1598.64")
    assert "--mem-frac 0.87" in r["server_args"] and r["sglang_version"] == "0.4.0.post1"


def test_simulated_lengths_are_the_real_ones(repo_dir) -> None:
    # bench_serving 0.4.0.post1 sample_random_requests: np.random.seed(1); inputs randint(1, 1025), then outputs
    # randint(0, 1025): the files' totals (client-side counts) are reproduced to the token
    src = repo_dir / "validation" / "datacrunch_h200"
    for line in (src / "llama_3_3_70b_online_output.jsonl").read_text().splitlines()[:5]:
        d = json.loads(line)
        n = d["completed"]
        ins, outs = bench_serving_lengths(1024, 1024, n, 0.0, np.random.RandomState(1), "0.4.0.post1")
        assert sum(ins) == d["total_input_tokens"]
        raw = np.random.RandomState(1)
        raw.randint(1, 1025, size=n)
        raw_outs = raw.randint(0, 1025, size=n)
        assert int(raw_outs.sum()) == d["total_output_tokens"]
        # an output of 0 tokens is simulated as 1 (the server still prefills it)
        assert outs == [max(1, int(x)) for x in raw_outs]


@pytest.fixture(scope="module")
def result(repo_dir):
    return validate(read_rows(repo_dir / "validation" / "datacrunch_h200_sglang.csv"))


def test_every_row_simulates_with_finite_errors(result) -> None:
    assert result["skipped"] == []
    assert len(result["rows"]) == 15
    for m in ("ttft_p50", "itl_p50", "output_tps", "throughput", "e2e"):
        assert result["summary"][m]["n"] == 15
        assert math.isfinite(result["summary"][m]["mape"])
    assert "ttft" in result["summary"] and result["summary"]["ttft"]["n"] == 0  # no mean TTFT in the files
    for r in result["rows"]:
        assert r["client"] == "bench_serving"
        assert 0.2 < r["predicted_itl_p50_ms"] / r["measured_itl_p50_ms"] < 5


def test_weighted_median() -> None:
    # samples 10 ms x1, 20 ms x3, 30 ms x1: half the weight (2.5 of 5) is reached at 20 ms
    assert weighted_median([0.030, 0.010, 0.020], [1, 1, 3]) == 0.020
    assert weighted_median([0.010, 0.020]) == 0.010  # inverted CDF: the first value reaching half
    assert math.isnan(weighted_median([]))


def test_per_row_time_by_version() -> None:
    prof = CalibrationProfile(gpu_per_req_s=1.5e-5, gpu_per_req_s_by_version={"0.4.0": 8e-5, "0.4.6": 5e-5})
    assert prof.for_version("0.4.0.post1").gpu_per_req_s == 8e-5  # smallest last-version key >= 0.4.0
    assert prof.for_version("0.3.6").gpu_per_req_s == 8e-5
    assert prof.for_version("0.4.3").gpu_per_req_s == 5e-5
    assert prof.for_version("0.5.9").gpu_per_req_s == 1.5e-5
    # an empty table keeps the hash of profiles written before the field existed
    assert CalibrationProfile().profile_hash == CalibrationProfile(gpu_per_req_s_by_version={}).profile_hash
    shipped = default_profile()
    assert shipped.for_version("0.5.1.post1") is shipped
