"""validation/build_deepseek_inferencex.py: the InferenceX launch flags and client for the TP8 EP1 fp8 B200 rows.

The rules (module docstring of the builder): SemiAnalysisAI/InferenceX @12ba0ae07 ``nvidia-master.yaml`` lists
``dsr1-fp8-b200-sglang`` (TP8 EP1 at 1024×1024 / 1024×8192, C 4–64, and 8192×1024 at C 4: 11 points, the 11
``cfg87`` rows; TP4 at 8192×1024, C 4–32), ``dsr1-fp8-b200-sglang-mtp`` (EAGLE, C 4–512) and
``dsr1-fp4-b200-sglang`` (TP4 EP4 and TP8 EP8: 33 points); @5b302f147/@9ebeafb4e add the B300 twins; ``benchmarks/single_node/dsr1_fp8_b200.sh`` and
``dsr1_fp4_b200.sh`` launch with ``--scheduler-recv-interval`` 10 below 16 clients and 30 from 16 on (fp8 TP4: 10).
"""
from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from shadowsim.commands.validate import read_rows
from simcore.perf.validation import simulate_row




def test_inferencex_file_is_the_build_output_and_its_rules_hold(repo_dir, validation_builder) -> None:
    build = validation_builder("build_deepseek_inferencex")
    fields, rows, counts, eagle = build.build(repo_dir / "validation" / "sglang_deepseek_b200_b300_deployed.csv")
    assert build.render(fields, rows) == (repo_dir / "validation" / "sglang_deepseek_inferencex.csv").read_text()
    assert build.render(fields, eagle) == (repo_dir / "validation" / "sglang_deepseek_inferencex_eagle.csv").read_text()
    # every point of the plain configurations once (B200: 11 + 4 fp8, 18 + 15 nvfp4); 24 distinct runs of the EAGLE
    # configuration; 11 rows are the same run filed twice
    assert counts == {"dsr1-fp8-b200-sglang": 15, "dsr1-fp4-b200-sglang": 33, "dsr1-fp8-b200-sglang-mtp": 24,
                      "same run (left out)": 11, "dsr1-fp8-b300-sglang": 10, "dsr1-fp4-b300-sglang": 21}
    assert all("--speculative-algorithm EAGLE --speculative-num-steps 2 --speculative-num-draft-tokens 3" in r["server_args"]
               and r["tp"] == "8" and r["gpu"] == "b200_sxm" for r in eagle)
    assert not any("speculative" in r["server_args"] for r in rows)
    # B300 (0.5.10.post1): the cfg719/cfg720 (fp8) and cfg717/cfg718 (nvfp4) rows, every point of their configurations
    b300 = Counter(r["id"].rsplit("_", 1)[-1] for r in rows if r["gpu"] == "b300_sxm")
    assert b300 == {"cfg719": 6, "cfg720": 4, "cfg717": 12, "cfg718": 9}
    by = Counter((r["precision"], r["tp"], r["ep"], r["isl"], r["osl"]) for r in rows if r["gpu"] == "b200_sxm")
    assert by[("fp8", "8", "1", "1024", "1024")] == 5 and by[("fp8", "8", "1", "8192", "1024")] == 1
    assert by[("fp8", "4", "1", "8192", "1024")] == 4
    assert sum(v for k, v in by.items() if k[:3] == ("nvfp4", "4", "4")) == 18
    assert sum(v for k, v in by.items() if k[:3] == ("nvfp4", "8", "8")) == 15
    for r in rows:
        c, tp = int(r["concurrency"]), int(r["tp"])
        recv = 10 if (c < 16 or (tp == 4 and r["precision"] == "fp8")) else 30
        assert f"--scheduler-recv-interval {recv} " in r["server_args"]
        assert "--enable-mixed-chunk" not in r["server_args"] and "--kv-cache-dtype fp8_e4m3" in r["server_args"]
        assert f"--ep-size {r['ep']}" in r["server_args"]
        assert (r["client"], r["random_range_ratio"], r["num_requests"], r["warmup_requests"]) == \
            ("bench_serving", "0.8", str(10 * c), str(2 * c))
        # B300 (0.5.10.post1, transformers 5.3.0, the client's tokenizer unrepaired): the server saw ~5.2x the
        # tokens the client counted (client_tokenizer_inflation.py); B200 (0.5.9, transformers 4.57.1) as counted
        factor = {"1024": "5.16", "8192": "5.18"}[r["isl"]] if r["gpu"] == "b300_sxm" else ""
        assert r["server_tokens_per_prompt_token"] == factor
        # the server's tokenizer manager encodes each text prompt (validation/tokenizer_cost.py, B200 text only)
        us = {"1024": "7.26", "8192": "5.93"}[r["isl"]] if r["gpu"] == "b200_sxm" else ""
        assert r["server_tokenize_us_per_token"] == us


def test_the_token_factor_column_is_checked_and_read(tmp_path) -> None:
    from simcore.errors import UserError
    from simcore.perf.validation import rows_from_records

    base = {"id": "r1", "model": "deepseek-ai/DeepSeek-V3", "gpu": "b300_sxm", "tp": "8", "isl": "1024",
            "osl": "1024", "concurrency": "4", "client": "bench_serving", "random_range_ratio": "0.8"}
    fields = [*base, "server_tokens_per_prompt_token"]
    assert rows_from_records([{**base, "server_tokens_per_prompt_token": "5.16"}], fields)[0] \
        .server_tokens_per_prompt_token == 5.16
    assert rows_from_records([{**base, "server_tokens_per_prompt_token": ""}], fields)[0] \
        .server_tokens_per_prompt_token is None
    for bad in ("0", "-1", "nan", "x"):
        with pytest.raises(UserError, match="server_tokens_per_prompt_token"):
            rows_from_records([{**base, "server_tokens_per_prompt_token": bad}], fields)
    with pytest.raises(UserError, match="only read with client bench_serving"):
        rows_from_records([{**base, "client": "aiperf", "server_tokens_per_prompt_token": "5"}], fields)
    # a run that overrides the client (validate --client aiperf) skips such a row with the reason, not the factor
    from simcore.perf.validation import Protocol, validate

    row = rows_from_records([{**base, "server_tokens_per_prompt_token": "5.16"}], fields)[0]
    out = validate([row], protocol=Protocol(client="aiperf"))
    assert out["rows"] == [] and "only read with client bench_serving" in out["skipped"][0]["reason"]


@pytest.mark.slow
def test_the_recv_interval_raises_ttft_toward_the_measurement(repo_dir) -> None:
    # C = 16, 1024 × 1024: measured TTFT 402 ms. Polling every 30 decode steps (~13 ms each) makes an arrival wait
    # ~15 steps on average before its prefill; the same row polled every pass has no such wait.
    row = {r.id: r for r in read_rows(repo_dir / "validation" / "sglang_deepseek_inferencex.csv")}[
        "dsr1_b200_sglang_fp8_agg_1024x1024_c16_cfg87"]
    with_skip = simulate_row(row)
    every_pass = simulate_row(dataclasses.replace(
        row, server_settings={**row.server_settings, "scheduler_recv_interval": 1}))
    assert with_skip.predicted["ttft"] > every_pass.predicted["ttft"] + 100.0
    assert with_skip.ape["tpot"] <= 8.0


def test_the_b300_prompts_as_the_server_saw_them_explain_the_slow_b300_ttft(repo_dir) -> None:
    # TP8/EP8 nvfp4 8192 x 1024 at C = 4 on B300: measured TTFT 966 ms against 246 ms on B200 (a faster GPU, the same
    # flags). As the client counted (~7.4k tokens) the prefill is short and TTFT ~70% low; with the ~38k tokens the
    # server tokenized (x5.18) it lands within 20%.
    row = {r.id: r for r in read_rows(repo_dir / "validation" / "sglang_deepseek_inferencex.csv")}[
        "dsr1_b300_sglang_fp4_agg_8192x1024_c4_cfg718"]
    assert row.server_tokens_per_prompt_token == 5.18 and row.measured["ttft"] == pytest.approx(966.3, abs=0.1)
    as_served = simulate_row(row)
    as_counted = simulate_row(dataclasses.replace(row, server_tokens_per_prompt_token=None))
    assert as_served.ape["ttft"] <= 20.0 < 50.0 <= as_counted.ape["ttft"]
    assert as_counted.predicted["ttft"] < row.measured["ttft"] < 1.2 * as_served.predicted["ttft"]
