"""SGLang's /metrics pages (the 0.3.5, 0.4.1 and 0.4.3 samples from SGLang's docs) become server_config +
metrics_snapshot; label and metric names of both eras are read."""
from __future__ import annotations

from pathlib import Path

import pytest

from streams.adapters.base import ParseContext
from streams.adapters.prometheus import parse_text
from streams.decode import decode_record, iter_file_events


def events(path: Path):
    return {i.event.kind: i.event for i in iter_file_events(path) if i.event}


def test_0_3_5_page_with_name_label_and_percent_hit_rate(shared_dir: Path):
    ev = events(shared_dir / "data/sglang_logs/sglang-docs_v0.3.5_metrics_gemma2-9b_name-label.prom.txt")
    c, s = ev["server_config"], ev["metrics_snapshot"]
    assert (c.model, c.max_total_num_tokens, c.max_prefill_tokens, c.max_running_requests, c.context_len) == (
        "google/gemma-2-9b-it", 161721, 16384, 4097, 8192)
    assert s.cache_hit_rate == pytest.approx(0.1061)
    assert (s.prompt_tokens_total, s.generation_tokens_total, s.e2e_count) == (506780.0, 424549.0, 2104.0)
    assert s.ttft_sum_s == pytest.approx(656.0780844688416)


def test_0_4_3_loaded_page(shared_dir: Path):
    ev = events(shared_dir / "data/sglang_logs/sglang-docs_v0.4.3_metrics_llama3.1-8b_loaded.prom.txt")
    s = ev["metrics_snapshot"]
    assert s.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert (s.running_reqs, s.queue_reqs, s.token_usage) == (162.0, 2826.0, 0.28)
    assert s.cache_hit_rate == pytest.approx(0.007507552643049313)
    assert s.prompt_tokens_total == 8.128902e06 and s.ttft_count == 11008.0


def test_kafka_record_of_a_scrape_takes_the_record_time_and_dp_ranks_split():
    page = (b"# TYPE sglang:num_running_reqs gauge\n"
            b'sglang:num_running_reqs{model_name="m",dp_rank="0"} 3\n'
            b'sglang:num_running_reqs{model_name="m",dp_rank="1"} 5\n'
            b'sglang:max_total_num_tokens{model_name="m",dp_rank="0"} 1000\n'
            b"python_gc_objects_collected_total 12\n")
    res = decode_record(page, key=b"i1", timestamp_s=1234.5)
    snaps = sorted((e.dp_rank, e.running_reqs) for e in res.events if e.kind == "metrics_snapshot")
    assert snaps == [(0, 3.0), (1, 5.0)]
    assert {e.ts for e in res.events} == {1234.5}
    assert [e.max_total_num_tokens for e in res.events if e.kind == "server_config"] == [1000]


def test_a_broken_sglang_sample_is_dead_lettered():
    assert parse_text("sglang:token_usage{model_name=\"m\"} lots\n", ParseContext()) == (
        "prometheus: bad value 'lots' for sglang:token_usage")


def test_a_dp_rank_label_int_cannot_read_is_no_rank_not_an_internal_error():
    # '²'.isdigit() is True but int('²') raises: the rank label is read only when str.isdecimal
    page = ('sglang:num_running_reqs{model_name="m",dp_rank="²"} 3\n'
            'sglang:num_running_reqs{model_name="m",dp_rank="1"} 5\n')
    snaps = sorted(((e.dp_rank is None, e.dp_rank, e.running_reqs) for e in parse_text(page, ParseContext())
                    if e.kind == "metrics_snapshot"))
    assert snaps == [(False, 1, 5.0), (True, None, 3.0)]
