"""Workload traces in ../shared/data (Mooncake, Azure 2023, ShareGPT-derived streams) become request_arrived
events with the recorded lengths, times and prefix information."""
from __future__ import annotations

import calendar
from itertools import islice
from pathlib import Path

import pytest

from streams.decode import iter_file_events


def first(path: Path, n: int, **kw):
    items = list(islice(iter_file_events(path, **kw), n))
    assert all(i.dead_letter is None for i in items), [i.dead_letter for i in items if i.dead_letter]
    return [i.event for i in items if i.event is not None]


def test_mooncake_conversation_trace_keeps_block_hashes(shared_dir: Path):
    ev = first(shared_dir / "data/mooncake/conversation_trace.jsonl", 5, start_ts=1000.0)
    assert [e.prompt_tokens for e in ev] == [6758, 7322, 7236, 2290, 6760]
    assert [e.output_tokens_hint for e in ev] == [500, 490, 794, 316, 3]
    assert ev[0].block_hashes == list(range(14)) and ev[0].block_size_tokens == 512
    assert ev[1].block_hashes[0] == 0  # shared first block: real prefix sharing
    assert {e.ts for e in ev} == {1000.0}
    assert ev[0].ignore_eos is True and ev[0].max_new_tokens == 500
    assert ev[0].request_id == "conversation_trace.jsonl#1"


def test_mooncake_whole_file_counts(shared_dir: Path):
    n = sum(1 for i in iter_file_events(shared_dir / "data/mooncake/synthetic_trace.jsonl") if i.event)
    assert n == 3993


def test_azure_code_trace(shared_dir: Path):
    ev = first(shared_dir / "data/azure_llm_2023/AzureLLMInferenceTrace_code.csv", 3)
    assert [(e.prompt_tokens, e.output_tokens_hint) for e in ev] == [(4808, 10), (3180, 8)]
    assert ev[0].ts == pytest.approx(calendar.timegm((2023, 11, 16, 18, 17, 3, 0, 0, 0)) + 0.97996)


def test_sharegpt_stream_with_token_ids(shared_dir: Path):
    ev = first(shared_dir / "data/llmservingsim/workloads/sharegpt-llama-3.1-8b-300-sps10.jsonl", 2)
    assert ev[0].prompt_tokens == 2358 and len(ev[0].token_ids) == 2358
    assert ev[0].output_tokens_hint == 531 and ev[0].ts == pytest.approx(0.046926808)
    plain = first(shared_dir / "data/llmservingsim/workloads/workload_me2_01_mixed.jsonl", 2)
    assert [(e.prompt_tokens, e.output_tokens_hint, e.token_ids) for e in plain] == [
        (27369, 1626, None), (1390, 527, None)]


def test_bad_trace_rows_are_dead_lettered(tmp_path: Path):
    p = tmp_path / "bad.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808\nnot-a-date,1,2\n")
    items = list(iter_file_events(p))
    assert [i.dead_letter.reason for i in items if i.dead_letter] == [
        "azure: line: expected 3 columns TIMESTAMP,ContextTokens,GeneratedTokens, got 2",
        "azure: TIMESTAMP: cannot read 'not-a-date'; use YYYY-MM-DD HH:MM:SS.ffffff"]
    p = tmp_path / "bad.jsonl"
    p.write_text('{"timestamp": 0, "input_length": "many", "output_length": 3, "hash_ids": [1]}\n')
    (item,) = list(iter_file_events(p, fmt="mooncake"))
    assert item.dead_letter.reason == "mooncake: input_length: must be an integer, got 'many'"
