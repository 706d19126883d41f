"""bench_serving console printouts (real, from SGLang issues) and --output-file JSON lines become
benchmark_summary events in seconds; --output-details arrays become one request_finished per request."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from streams.decode import decode_record, iter_file_events


def test_console_summary_of_the_typo_era(shared_dir: Path):
    (e,) = [i.event for i in iter_file_events(
        shared_dir / "data/sglang_logs/issue2805_v0.4.0.post2_llama3.1-8b_bench-serving-console_sharegpt.txt")
        if i.event]
    assert (e.backend, e.request_rate, e.max_concurrency, e.completed, e.duration_s) == (
        "sglang", None, None, 1648, 170.41)
    assert (e.total_input_tokens, e.total_output_tokens) == (369103, 326408)
    assert e.mean_ttft_s == pytest.approx(44.2948) and e.p99_tpot_s == pytest.approx(1.53327)
    assert e.mean_itl_s == pytest.approx(0.18246)


def test_console_summary_with_rate_concurrency_and_concurrency_line(shared_dir: Path):
    (e,) = [i.event for i in iter_file_events(
        shared_dir / "data/sglang_logs/issue6411_v0.4.6.post4_deepseek-v3_pd-2p1d-h20_bench-serving-console.txt")
        if i.event]
    assert (e.request_rate, e.max_concurrency, e.concurrency, e.completed) == (3.2, 640, 561.68, 4096)
    assert e.mean_tpot_s is None and e.p99_itl_s == pytest.approx(0.29258)


def test_console_block_inside_a_server_log(tmp_path: Path, shared_dir: Path):
    block = (shared_dir / "data/sglang_logs/issue6411_v0.4.6.post4_deepseek-v3_dp8-h20_baseline_bench-serving-console"
             ".txt").read_text()
    log = ("[2025-01-08 20:17:32 TP0] Decode batch. #running-req: 2, #token: 27373, token usage: 0.09, "
           "gen throughput (token/s): 33.38, #queue-req: 0\n")
    p = tmp_path / "mixed.log"
    p.write_text(log + block + log)
    kinds = [(i.line_no, i.event.kind) for i in iter_file_events(p) if i.event]
    n = block.count("\n")
    assert kinds == [(1, "decode_batch"), (n + 1, "benchmark_summary"), (n + 2, "decode_batch")]


def test_output_file_json_with_details():
    run = {"backend": "sglang", "request_rate": 4.0, "max_concurrency": 8, "completed": 2, "duration": 10.0,
           "total_input_tokens": 300, "total_output_tokens": 30, "request_throughput": 0.2,
           "mean_ttft_ms": 150.0, "median_ttft_ms": 140.0, "mean_tpot_ms": 20.0,
           "input_lens": [100, 200], "output_lens": [10, 20], "ttfts": [0.1, 0.2],
           "itls": [[0.02] * 9, [0.03] * 19]}
    res = decode_record(json.dumps(run).encode(), source="bench.jsonl", timestamp_s=50.0)
    summary = res.events[0]
    assert (summary.kind, summary.request_rate, summary.mean_ttft_s, summary.mean_tpot_s) == (
        "benchmark_summary", 4.0, 0.15, 0.02)
    reqs = res.events[1:]
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs] == [(100, 10), (200, 20)]
    assert reqs[0].e2e_s == pytest.approx(0.1 + 9 * 0.02) and reqs[1].e2e_s == pytest.approx(0.2 + 19 * 0.03)
    assert len({r.request_id for r in reqs}) == 2


def test_truncated_console_block_is_dead_lettered(tmp_path: Path):
    p = tmp_path / "cut.txt"
    p.write_text("============ Serving Benchmark Result ============\nBackend:   sglang\nSuccessful requests:  12\n")
    items = list(iter_file_events(p))
    assert [i.dead_letter.reason for i in items if i.dead_letter] == [
        "bench_serving: result block not closed (truncated printout)"]


def test_server_info_json_and_the_copy_inside_a_bench_result():
    info = {"model_path": "Qwen/Qwen3-32B", "served_model_name": "qwen3", "tp_size": 2, "dp_size": 1,
            "page_size": 1, "chunked_prefill_size": 8192, "max_prefill_tokens": 16384, "max_running_requests": 256,
            "context_length": 40960, "schedule_policy": "fcfs", "mem_fraction_static": 0.88,
            "disable_radix_cache": False, "internal_states": [{"memory_usage": {"token_capacity": 500000}}]}
    (cfg,) = decode_record(json.dumps(info).encode(), key=b"i1").events
    assert (cfg.kind, cfg.model, cfg.tp_size, cfg.max_total_num_tokens, cfg.context_len) == (
        "server_config", "qwen3", 2, 500000, 40960)
    assert (cfg.schedule_policy, cfg.mem_fraction_static, cfg.disable_radix_cache) == ("fcfs", 0.88, False)
    run = {"backend": "sglang", "completed": 1, "duration": 1.0, "mean_ttft_ms": 5.0, "server_info": info}
    kinds = [e.kind for e in decode_record(json.dumps(run).encode()).events]
    assert kinds == ["benchmark_summary", "server_config"]


def test_server_info_speculative_sizes_only_with_an_algorithm():
    # /server_info lists every server argument, the speculative sizes with their defaults while speculation is
    # off (sglang 0.5.9 server_args.py: speculative_num_steps etc. None or defaults, speculative_algorithm None)
    info = {"model_path": "Qwen/Qwen3-32B", "tp_size": 2, "speculative_algorithm": None, "speculative_num_steps": 5,
            "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8}
    (cfg,) = decode_record(json.dumps(info).encode(), key=b"i1").events
    assert (cfg.speculative_algorithm, cfg.speculative_num_steps, cfg.speculative_num_draft_tokens) == (None, None,
                                                                                                       None)
    (cfg,) = decode_record(json.dumps({**info, "speculative_algorithm": "EAGLE"}).encode(), key=b"i1").events
    assert (cfg.speculative_algorithm, cfg.speculative_num_steps, cfg.speculative_eagle_topk) == ("EAGLE", 5, 4)
