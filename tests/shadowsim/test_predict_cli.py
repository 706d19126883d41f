"""`shadowsim predict`: model + GPU + server flags + workload → per-request records and a summary.

Runs the real CLI entry point in-process on small workloads; errors must be one line naming the field, exit 2.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from shadowsim.cli import main
from simcore.gpus import load_gpu
from simcore.memory import size_kv_pool
from simcore.models.loader import load_model
from simcore.settings import ServerSettings

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
BASE = ["predict", "--model", MODEL, "--gpu", "H100"]
KEYS = ("num_requests", "throughput_rps", "output_tokens_per_s", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms",
        "cache_hit_rate", "kv_peak_usage", "num_retractions", "sim_time_s", "wall_time_s")


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main([*BASE, *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_closed_loop_json_summary(capsys: pytest.CaptureFixture[str]) -> None:
    s = _json(capsys, "--concurrency", "8", "--num-requests", "32", "--input-len", "512", "--output-len", "64")
    assert set(KEYS) <= set(s)
    assert s["num_requests"] == 32 and s["output_tokens"] == 32 * 64 and s["prompt_tokens"] == 32 * 512
    for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert set(s[k]) == {"mean", "p50", "p90", "p99"} and s[k]["mean"] > 0
    srv = s["server"]
    assert (srv["gpu"], srv["chunked_prefill_size"]) == ("h100_sxm", 8192)
    # the pool the sizing module computes for SGLang defaults, which is the spec's ≈410k-token example (§4.4)
    pool = size_kv_pool(load_model(MODEL), load_gpu("H100"), ServerSettings())
    assert srv["max_total_num_tokens"] == pool.max_total_num_tokens
    assert 410_000 * 0.98 <= srv["max_total_num_tokens"] <= 410_000 * 1.02
    # §4.5: clamp(tokens / 131072 · 512, 2048, 4096) = clamp(~1600, ...) = 2048
    assert srv["max_running_requests"] == 2048 and srv["schedule_policy"] == "fcfs"
    assert s["cache_hit_rate"] == 0.0  # random prompts share nothing


def test_open_loop_and_server_flags(capsys: pytest.CaptureFixture[str]) -> None:
    s = _json(capsys, "--request-rate", "20", "--num-requests", "40", "--input-len", "256", "--output-len", "16",
              "--shared-prefix-len", "128", "--schedule-policy", "lpm", "--chunked-prefill-size", "1024",
              "--page-size", "16", "--max-total-tokens", "50000", "--seed", "3")
    assert s["server"]["max_total_num_tokens"] == 50000 and s["server"]["page_size"] == 16
    assert s["server"]["schedule_policy"] == "lpm"
    # 39 of 40 requests reuse the 128-token system prompt (page-aligned)
    assert s["cached_tokens"] == 39 * 128
    again = _json(capsys, "--request-rate", "20", "--num-requests", "40", "--input-len", "256", "--output-len", "16",
                  "--shared-prefix-len", "128", "--schedule-policy", "lpm", "--chunked-prefill-size", "1024",
                  "--page-size", "16", "--max-total-tokens", "50000", "--seed", "3")
    del again["wall_time_s"], s["wall_time_s"]
    assert again == s  # same seed, same result


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--concurrency", "2", "--num-requests", "4", "--input-len", "100", "--output-len", "8"]) == 0
    out = capsys.readouterr().out
    assert "h100_sxm" in out and "ttft" in out and "throughput" in out and "p99" in out


def test_trace_records_to_jsonl_and_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 1100, "output_length": 10, "hash_ids": [1, 2, 9]}\n'
        '{"timestamp": 500, "input_length": 1200, "output_length": 5, "hash_ids": [1, 2, 3]}\n'
        'not json\n'
        '{"timestamp": 900, "input_length": 700, "output_length": 5}\n')
    out = tmp_path / "r.jsonl"
    assert main([*BASE, "--trace", str(trace), "--trace-format", "mooncake", "--out", str(out), "--json"]) == 0
    cap = capsys.readouterr()
    s, err = json.loads(cap.out), cap.err
    assert s["num_requests"] == 3
    assert "line 3" in err and "skipped" in err  # the bad line is reported, the others are used
    # the first prompt puts its two whole blocks (1, 2) in the cache, never its partial third block;
    # the second request reuses them: 2 x 512 tokens
    assert s["cached_tokens"] == 1024
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["input_len"] for r in rows] == [1100, 1200, 700]
    assert rows[1]["cached_tokens"] == 1024 and rows[1]["arrival_s"] == 0.5
    assert {"rid", "ttft_s", "tpot_s", "e2e_s", "first_token_s", "finish_s", "queue_time_s"} <= set(rows[0])
    csv_out = tmp_path / "r.csv"
    assert main([*BASE, "--trace", str(trace), "--out", str(csv_out), "--quiet"]) == 0
    with csv_out.open() as f:
        table = list(csv.DictReader(f))
    assert len(table) == 3 and table[1]["cached_tokens"] == "1024"


def test_bad_trace_line_is_reported_with_its_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": [1]}\n'
                     '{"timestamp": 5, "input_length": -4, "output_length": 10, "hash_ids": [1]}\n')
    assert main([*BASE, "--trace", str(trace), "--trace-format", "mooncake"]) == 0
    err = capsys.readouterr().err
    assert "line 2" in err and "input_length" in err and "skipped" in err


@pytest.mark.parametrize("args, field", [
    (["--model", "no/such-model", "--gpu", "H100", "--concurrency", "1"], "model"),
    (["--model", MODEL, "--gpu", "Z9000", "--concurrency", "1"], "--gpu"),
    (["--model", MODEL, "--gpu", "H100", "--concurrency", "1", "--input-len", "5000",
      "--max-total-tokens", "4000"], "--input-len"),
    (["--model", MODEL, "--gpu", "H100"], "workload"),
    (["--model", MODEL, "--gpu", "H100", "--concurrency", "1", "--page-size", "0"], "--page-size"),
    (["--model", MODEL, "--gpu", "H100", "--trace", "/nonexistent.jsonl"], "trace"),
    (["--model", MODEL, "--gpu", "H100", "--concurrency", "1", "--out", "x.txt"], "--out"),
    (["--model", MODEL, "--gpu", "H100", "--concurrency", "1", "--profile", "missing.json"], "--profile"),
])
def test_bad_input_is_one_line_naming_the_field(args: list[str], field: str,
                                               capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["predict", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("shadowsim: error: ") and "\n" not in err
    assert field in err


def test_prompt_larger_than_pool_in_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 3000, "output_length": 10}\n')
    assert main([*BASE, "--trace", str(trace), "--max-total-tokens", "2000"]) == 2
    err = capsys.readouterr().err
    assert "--max-total-tokens" in err and "3000" in err


def test_help_teaches(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    out = capsys.readouterr().out
    assert "--trace-format" in out and "Examples:" in out and "cache_hit_rate" in out


def test_profile_from_file_is_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from simcore.perf.profile import default_profile

    base = default_profile()
    slow = base.model_copy(update={"step_overhead_s": base.step_overhead_s + 0.005})  # +5 ms per forward
    path = tmp_path / "p.json"
    slow.save(path)
    args = ["--concurrency", "1", "--num-requests", "2", "--input-len", "300", "--output-len", "21"]
    shipped = _json(capsys, *args)
    slower = _json(capsys, *args, "--profile", str(path))
    # every decode step 5 ms longer: TPOT grows by 5 ms
    assert slower["tpot_ms"]["mean"] == pytest.approx(shipped["tpot_ms"]["mean"] + 5.0, abs=0.01)


def test_speculative_flags(capsys: pytest.CaptureFixture[str]) -> None:
    """`--speculative-algorithm EAGLE` on Llama: SGLang's auto choice (5 steps, topk 4, 8 draft tokens,
    server_args.py auto_choose_speculative_params), the overlap scheduler off and 48 running requests
    (_handle_speculative_decoding); each request decodes several tokens per step, so TPOT falls."""
    load = ["--concurrency", "4", "--num-requests", "16", "--input-len", "512", "--output-len", "128"]
    plain = _json(capsys, *load)
    spec = _json(capsys, *load, "--speculative-algorithm", "EAGLE", "--speculative-accept-length", "3.0")
    srv = spec["server"]
    assert srv["overlap_schedule"] is False and srv["max_running_requests"] == 48
    assert (srv["speculative"]["num_steps"], srv["speculative"]["eagle_topk"],
            srv["speculative"]["num_draft_tokens"]) == (5, 4, 8)
    assert srv["speculative"]["assumed_accept_length"] == pytest.approx(3.0)
    assert 2.8 < srv["speculative"]["simulated_accept_length"] <= 3.0  # less the caps at each request's end
    assert spec["output_tokens"] == plain["output_tokens"] == 16 * 128
    assert spec["tpot_ms"]["mean"] < 0.7 * plain["tpot_ms"]["mean"]  # measured 4.14 vs 6.65 ms
    assert plain["server"]["speculative"] is None
