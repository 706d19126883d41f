"""Every real SGLang log in ../shared/data/sglang_logs parses: each ``Prefill batch``/``Decode batch`` line becomes
exactly one event with the right values, nothing raises, nothing is dead-lettered.

The expected counts were checked by hand against ``grep -c`` of the files (see CATALOG.json for what each file is).
"""
from __future__ import annotations

import calendar
import re
from collections import Counter
from pathlib import Path

import pytest

from streams.decode import iter_file_events

# file -> expected events by kind. Batch-line counts equal `grep -cE 'Prefil+ batch|Decode batch'`.
EXPECTED: dict[str, dict[str, int]] = {
    "dgx-spark_newest_laguna-int4_dflash-spec_swa_gb10.log":
        {"server_config": 5, "prefill_batch": 57, "decode_batch": 56},
    "dgx-spark_newest_laguna-nvfp4_dflash_startup-fail.log": {"server_config": 1},
    "issue1191_v0.2.x_mixtral-8x7b_tp8-l4_gpu-prefix_startup.log": {"server_config": 9, "prefill_batch": 1},
    "issue1386_v0.3.0-era_qwen2-72b_tp8_time-only-TP-prefix_startup.log": {"server_config": 9},
    "issue2777_v0.4.1_llama2-7b_eagle2_l4_multiturn_crash.log": {"prefill_batch": 14},
    "issue2777_v0.4.1_llama2-7b_eagle2_l4_retract-decode-oom_crash.log":
        {"prefill_batch": 23, "decode_batch": 1, "retraction": 1},
    "issue2795_v0.4.1.post3_deepseek-v3_2x8-h800_decode.log": {"decode_batch": 19},
    "issue2805_v0.4.0.post2_llama3.1-8b_bench-serving-console_sharegpt.txt": {"benchmark_summary": 1},
    "issue3868_v0.4.3-era_deepseek-v3-bf16_multinode-h20_torchcompile_slow-decode.log": {"decode_batch": 18},
    "issue4161_v0.4.3.post2_deepseek-r1_tp16-2node-h800_full-startup-to-segfault.log":
        {"server_config": 9, "prefill_batch": 10, "decode_batch": 6},
    "issue4184_v0.4.3-era-2025-03_deepseek-r1_tp16-2node_retraction-decode-oom-node1.log": {"retraction": 12},
    "issue565_v0.1.17_llama3-8b_tp4_gpu_id-prefix_startup-prefil-typo_crash.log":
        {"server_config": 4, "prefill_batch": 1},
    "issue6411_v0.4.6.post4_deepseek-v3_dp8-h20_baseline_bench-serving-console.txt": {"benchmark_summary": 1},
    "issue6411_v0.4.6.post4_deepseek-v3_pd-2p1d-h20_bench-serving-console.txt": {"benchmark_summary": 1},
    "issue6691_v0.4.6.post1_qwen3-32b_pd-prefill_mooncake-error.log": {"prefill_batch": 1},
    "issue6901_v0.4.6.post5_deepseek-v3_tp8_h200_mtp_docker-compose-prefix_prefill.log": {"prefill_batch": 4},
    "issue6933_v0.4.6.post5_llama4-scout_tp8-h100_mixed-prefill-decode_oom.log":
        {"decode_batch": 1, "prefill_batch": 2},
    "issue6949_v0.4.6.post1_qwq32b_tp8_h20_eagle_decode-accept-len.log": {"decode_batch": 7},
    "issue6949_v0.4.6.post1_qwq32b_tp8_h20_no-eagle_decode.log": {"decode_batch": 12},
    "issue7707_v0.4.8_deepseek-r1_pd-decode_dp8-attn_tbo_decode-prealloc_crash.log": {"decode_batch": 9},
    "llms-in-clouds_v0.4.3_qwq32b_tp4_l4_startup.log": {"server_config": 9, "prefill_batch": 1},
    "sglang-docs_v0.3.5_metrics_gemma2-9b_name-label.prom.txt": {"server_config": 1, "metrics_snapshot": 1},
    "sglang-docs_v0.4.1_metrics_llama3.1-8b_idle.prom.txt": {"metrics_snapshot": 1},
    "sglang-docs_v0.4.3_metrics_llama3.1-8b_loaded.prom.txt": {"metrics_snapshot": 1},
}
BATCH_LINE = re.compile(rb"Prefil+ batch|Decode batch")


def utc(y: int, mo: int, d: int, h: int, mi: int, s: int) -> float:
    return float(calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)))


@pytest.fixture(scope="module")
def logs(shared_dir: Path) -> Path:
    return shared_dir / "data" / "sglang_logs"


def parsed(path: Path):
    events, dead, skipped = [], [], 0
    for item in iter_file_events(path):
        if item.event is not None:
            events.append((item.line_no, item.event))
        elif item.dead_letter is not None:
            dead.append(item.dead_letter)
        else:
            skipped += 1
    return events, dead, skipped


def test_the_catalog_has_no_file_we_do_not_cover(logs: Path):
    files = {p.name for p in logs.iterdir() if p.name != "CATALOG.json"}
    assert files == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_file_gives_the_expected_events_and_no_dead_letters(logs: Path, name: str):
    events, dead, _ = parsed(logs / name)
    assert dead == []
    assert dict(Counter(e.kind for _, e in events)) == EXPECTED[name]
    # independent check: one batch event per line that grep finds
    raw_lines = (logs / name).read_bytes().split(b"\n")
    batch_lines = [i + 1 for i, line in enumerate(raw_lines) if BATCH_LINE.search(line)]
    assert [n for n, e in events if e.kind in ("prefill_batch", "decode_batch")] == batch_lines


def test_newest_era_comma_style_with_swa_pending_tokens_and_spec_decoding(logs: Path):
    events, _, _ = parsed(logs / "dgx-spark_newest_laguna-int4_dflash-spec_swa_gb10.log")
    prefill = next(e for _, e in events if e.kind == "prefill_batch")
    assert prefill.ts == utc(2026, 8, 1, 23, 43, 46)
    assert (prefill.new_seqs, prefill.new_tokens, prefill.cached_tokens) == (1, 7, 0)
    assert (prefill.token_usage, prefill.swa_token_usage, prefill.pending_tokens) == (0.0, 0.0, 0)
    assert prefill.cuda_graph is True and prefill.input_throughput_tok_s == 1.81
    decode = next(e for _, e in events if e.kind == "decode_batch")
    assert decode.ts == utc(2026, 8, 2, 0, 2, 22)
    assert (decode.running_reqs, decode.kv_tokens, decode.swa_tokens) == (1, 181, 181)
    assert (decode.accept_len, decode.accept_rate, decode.gen_throughput_tok_s) == (2.75, 0.12, 0.10)
    configs = [e for _, e in events if e.kind == "server_config"]
    totals = next(c for c in configs if c.max_total_num_tokens is not None)
    assert (totals.max_total_num_tokens, totals.chunked_prefill_size, totals.max_prefill_tokens) == (185897, 8192, 16384)
    assert (totals.max_running_requests, totals.context_len, totals.available_gpu_mem_gb) == (48, 65536, 6.22)
    args = configs[0]  # server_args=ServerArgs(...) comes first
    assert args.model == "poolside/Laguna-S-2.1-INT4" and args.tp_size == 1 and args.page_size == 1
    # the resolved speculative settings of line 13 (speculative_algorithm='DFLASH', speculative_num_steps=1, ...)
    assert (args.speculative_algorithm, args.speculative_num_steps, args.speculative_eagle_topk,
            args.speculative_num_draft_tokens) == ("DFLASH", 1, 1, 16)
    assert args.speculative_draft_model_path == "poolside/Laguna-S-2.1-DFlash-INT4"
    kv = [c for c in configs if c.kv_cache_size_gb is not None]
    assert kv[0].kv_cache_dtype == "bfloat16" and kv[0].kv_cache_size_gb == pytest.approx(20.42)


def test_a_server_without_speculation_carries_no_speculative_settings(logs: Path):
    # SGLang 0.4.3.post2 logs speculative_algorithm=None with speculative_num_steps=5, speculative_eagle_topk=8,
    # speculative_num_draft_tokens=64 (its defaults) when off: the event carries none of them
    name = "issue4161_v0.4.3.post2_deepseek-r1_tp16-2node-h800_full-startup-to-segfault.log"
    assert b"speculative_algorithm=None" in (logs / name).read_bytes()
    events, _, _ = parsed(logs / name)
    args = [e for _, e in events if e.kind == "server_config" and e.model is not None]
    assert args and all((e.speculative_algorithm, e.speculative_num_steps, e.speculative_eagle_topk,
                         e.speculative_num_draft_tokens) == (None,) * 4 for e in args)


def test_dp_and_tp_rank_prefixes(logs: Path):
    events, _, _ = parsed(logs / "issue7707_v0.4.8_deepseek-r1_pd-decode_dp8-attn_tbo_decode-prealloc_crash.log")
    first = events[0][1]
    assert (first.dp_rank, first.tp_rank, first.kv_tokens, first.token_usage) == (5, 5, 2765, 0.01)
    assert (first.retracted_reqs, first.cuda_graph, first.gen_throughput_tok_s) == (0, True, 15.02)
    assert first.ts == utc(2025, 7, 2, 11, 36, 23)
    assert [e.dp_rank for _, e in events] == [5, 7, 6, 4, 0, 1, 5, 2, 7]
    assert all(e.dp_rank == e.tp_rank for _, e in events)


def test_oldest_era_gpu_id_prefix_no_timestamps_and_prefil_typo(logs: Path):
    events, _, _ = parsed(logs / "issue565_v0.1.17_llama3-8b_tp4_gpu_id-prefix_startup-prefil-typo_crash.log")
    configs = [e for _, e in events if e.kind == "server_config"]
    assert sorted(c.tp_rank for c in configs) == [0, 1, 2, 3]
    assert {(c.max_total_num_tokens, c.max_prefill_tokens, c.context_len) for c in configs} == {(405784, 65536, 8192)}
    prefill = next(e for _, e in events if e.kind == "prefill_batch")
    assert (prefill.tp_rank, prefill.new_seqs, prefill.new_tokens, prefill.cache_hit_rate) == (0, 1, 7, 0.0)
    assert prefill.ts == 0.0  # no timestamp anywhere in the file: the documented default


def test_time_only_prefix_of_the_0_3_era(logs: Path):
    events, _, _ = parsed(logs / "issue1386_v0.3.0-era_qwen2-72b_tp8_time-only-TP-prefix_startup.log")
    totals = [e for _, e in events if e.kind == "server_config" and e.max_total_num_tokens]
    assert sorted(c.tp_rank for c in totals) == list(range(8))
    assert {c.max_total_num_tokens for c in totals} == {1218251}
    assert {c.ts for c in totals} == {14 * 3600 + 39 * 60 + 48.0}  # no date: seconds into day 0


def test_docker_compose_prefix(logs: Path):
    events, _, _ = parsed(logs / "issue6901_v0.4.6.post5_deepseek-v3_tp8_h200_mtp_docker-compose-prefix_prefill.log")
    assert [e.queue_reqs for _, e in events] == [40, 56, 71, 86]
    assert [e.running_reqs for _, e in events] == [7, 10, 13, 16]
    assert {(e.new_seqs, e.new_tokens, e.cached_tokens) for _, e in events} == {(3, 15000, 0)}
    assert [e.token_usage for _, e in events] == [0.06, 0.09, 0.11, 0.14]
    assert events[0][1].ts == utc(2025, 6, 5, 15, 8, 56)


def test_retraction_old_wording_with_ratio_before_and_after(logs: Path):
    events, _, _ = parsed(logs / "issue2777_v0.4.1_llama2-7b_eagle2_l4_retract-decode-oom_crash.log")
    r = next(e for _, e in events if e.kind == "retraction")
    assert (r.num_retracted, r.old_new_token_ratio, r.new_token_ratio) == (1, 0.6348, 0.7838)
    assert r.ts == utc(2025, 1, 7, 20, 16, 26) and r.tp_rank == 0
    events, _, _ = parsed(logs / "issue4184_v0.4.3-era-2025-03_deepseek-r1_tp16-2node_retraction-decode-oom-node1.log")
    assert sorted({e.tp_rank for _, e in events}) == list(range(8, 16))
    assert events[0][1].old_new_token_ratio == 0.1474 and events[0][1].new_token_ratio == 0.1845


def test_pd_prefill_line_with_extra_fields_and_trailing_space(logs: Path):
    events, _, _ = parsed(logs / "issue6691_v0.4.6.post1_qwen3-32b_pd-prefill_mooncake-error.log")
    (_, e), = events
    assert (e.new_seqs, e.new_tokens, e.cached_tokens, e.running_reqs, e.queue_reqs) == (1, 23, 0, 0, 0)


def test_speculative_accept_len_series(logs: Path):
    events, _, _ = parsed(logs / "issue6949_v0.4.6.post1_qwq32b_tp8_h20_eagle_decode-accept-len.log")
    assert [e.accept_len for _, e in events][:3] == [2.38, 2.23, 2.45]
    assert [e.kv_tokens for _, e in events][:3] == [9448, 9537, 9635]


def test_cache_hit_rate_percent_becomes_a_fraction_and_startup_totals(logs: Path):
    events, _, _ = parsed(logs / "issue4161_v0.4.3.post2_deepseek-r1_tp16-2node-h800_full-startup-to-segfault.log")
    totals = [e for _, e in events if e.kind == "server_config" and e.max_total_num_tokens]
    assert {(c.max_total_num_tokens, c.chunked_prefill_size, c.max_running_requests, c.context_len)
            for c in totals} == {(201681, 8192, 2049, 163840)}
    prefills = [e for _, e in events if e.kind == "prefill_batch"]
    assert [p.new_tokens for p in prefills][:4] == [7, 11, 16, 16]
    assert all(p.cache_hit_rate == 0.0 for p in prefills)


def test_event_ids_are_stable_across_rereads(logs: Path):
    path = logs / "issue2795_v0.4.1.post3_deepseek-v3_2x8-h800_decode.log"
    a, _, _ = parsed(path)
    b, _, _ = parsed(path)
    assert [e.event_id for _, e in a] == [e.event_id for _, e in b]
    assert a[0][1].event_id == f"{path.name}:1"
    assert len({e.event_id for _, e in a}) == 19
