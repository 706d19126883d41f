"""Per-request records (sglang-internals 5.1 and 5.3) become arrived / first-token / finished events whose ids are
``<instance>/<rid>:<what>``, so the same request seen in two feeds de-duplicates."""
from __future__ import annotations

import json

import pytest

from streams.adapters.base import ParseContext
from streams.adapters.sglang_log import parse_line
from streams.decode import decode_record

T0 = 1793361601.0  # 2026-10-30 12:00:01 UTC

META = {"id": "r1", "finish_reason": {"type": "stop", "matched": 2}, "prompt_tokens": 1000,
        "completion_tokens": 100, "cached_tokens": 512, "num_retractions": 1, "e2e_latency": 2.5,
        "request_received_ts": T0, "first_token_latency": 0.3, "queue_time": 0.05, "request_finished_ts": T0 + 2.5}


def by_kind(events):
    return {e.kind: e for e in events}


def test_export_metrics_to_file_line_gives_the_whole_request_life():
    line = json.dumps({"request_parameters": json.dumps({"rid": "r1", "sampling_params": {"max_new_tokens": 128,
                                                                                           "ignore_eos": True}}),
                       **META})
    res = decode_record(line.encode(), key=b"sglang-0", source="metrics")
    assert res.dead_letters == [] and res.skipped == 0
    ev = by_kind(res.events)
    a, f, fin = ev["request_arrived"], ev["request_first_token"], ev["request_finished"]
    assert (a.ts, a.prompt_tokens, a.max_new_tokens, a.ignore_eos, a.output_tokens_hint) == (T0, 1000, 128, True, 100)
    assert (f.ts, f.ttft_s) == (pytest.approx(T0 + 0.3), 0.3)
    assert (fin.ts, fin.output_tokens, fin.cached_tokens, fin.num_retractions) == (T0 + 2.5, 100, 512, 1)
    assert (fin.e2e_s, fin.queue_time_s, fin.arrival_ts, fin.finish_reason) == (2.5, 0.05, T0, "stop")
    assert {e.instance_id for e in res.events} == {"sglang-0"}
    assert [e.event_id for e in res.events] == ["sglang-0/r1:arrived", "sglang-0/r1:first_token", "sglang-0/r1:finished"]


def test_log_requests_json_received_and_finished():
    recv = {"timestamp": "2026-10-30T12:00:01", "event": "request.received", "rid": "r2",
            "obj": {"rid": "r2", "input_ids": [1, 2, 3, 4], "sampling_params": {"max_new_tokens": 8}, "priority": 2}}
    ev = decode_record(json.dumps(recv).encode()).events
    assert len(ev) == 1
    assert (ev[0].kind, ev[0].ts, ev[0].prompt_tokens, ev[0].token_ids, ev[0].priority) == (
        "request_arrived", T0, 4, [1, 2, 3, 4], 2)
    fin = {"timestamp": "2026-10-30T12:00:03.500000", "event": "request.finished", "rid": "r2",
           "obj": {"rid": "r2"}, "out": {"meta_info": {"prompt_tokens": 4, "completion_tokens": 8,
                                                       "e2e_latency": 2.5, "cached_tokens": 0}}}
    ev = by_kind(decode_record(json.dumps(fin).encode()).events)
    assert ev["request_finished"].ts == T0 + 2.5
    assert ev["request_arrived"].ts == T0  # finish - e2e
    assert ev["request_finished"].request_id == "r2"


def test_received_without_input_ids_is_skipped_not_dead_lettered():
    recv = {"timestamp": "2026-10-30T12:00:01", "event": "request.received", "rid": "r3", "obj": {"rid": "r3"}}
    res = decode_record(json.dumps(recv).encode())
    assert (res.events, res.skipped, res.dead_letters) == ([], 1, [])


def test_log_requests_text_finish_line_at_level_2_with_truncated_text():
    line = ("[2026-10-30 12:00:03] Finish: obj=GenerateReqInput(text='Hello' ... 'world', "
            "sampling_params={'max_new_tokens': 16, 'ignore_eos': False}, rid='abc123', stream=False), "
            "out={'text': 'abc' ... 'xyz', 'output_ids': [1, 2], 'meta_info': {'id': 'abc123', "
            "'finish_reason': {'type': 'length', 'length': 16}, 'prompt_tokens': 7, 'completion_tokens': 16, "
            "'cached_tokens': 0, 'e2e_latency': 0.18, 'num_retractions': 0, 'weight_version': 'default'}}")
    ev = by_kind(parse_line(line, ParseContext()))
    fin = ev["request_finished"]
    assert (fin.request_id, fin.prompt_tokens, fin.output_tokens, fin.finish_reason) == ("abc123", 7, 16, "length")
    assert fin.ts == T0 + 2 and fin.e2e_s == 0.18
    assert ev["request_arrived"].max_new_tokens == 16 and ev["request_arrived"].ts == pytest.approx(T0 + 2 - 0.18)


def test_log_requests_text_receive_with_input_ids():
    line = ("[2026-10-30 12:00:01] Receive: obj=GenerateReqInput(text=None, input_ids=[9, 8, 7], "
            "sampling_params={'max_new_tokens': 32, 'ignore_eos': True}, rid='q1', priority=5)")
    (e,) = parse_line(line, ParseContext())
    assert (e.request_id, e.prompt_tokens, e.token_ids, e.max_new_tokens, e.ignore_eos, e.priority, e.ts) == (
        "q1", 3, [9, 8, 7], 32, True, 5, T0)


def test_finish_line_with_broken_meta_info_is_dead_lettered():
    line = "[2026-10-30 12:00:03] Finish: obj=GenerateReqInput(rid='x'), out={'meta_info': {'id': 'x', 'prompt"
    assert parse_line(line, ParseContext()) == "Finish line: meta_info is cut off"


def test_req_time_stats_line():
    line = ("[2026-10-30 12:00:05 TP0] ReqTimeStats(rid=mock1, input_len=100, cached_input_len=40, output_len=20, "
            "attempts=1, type=unified): queue_duration=10.00ms, initial_prefill_elapsed=50.00ms, "
            "forward_duration=990.00ms, entry_time=1793361601.000")
    (e,) = parse_line(line, ParseContext())
    assert (e.kind, e.request_id, e.prompt_tokens, e.cached_tokens, e.output_tokens) == (
        "request_finished", "mock1", 100, 40, 20)
    assert e.queue_time_s == pytest.approx(0.01) and e.forward_s == pytest.approx(0.99)
    assert e.arrival_ts == T0 and e.ts == pytest.approx(T0 + 1.0)
