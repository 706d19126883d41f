"""``decode_record`` (what the Kafka consumer calls on every record) and ``iter_file_events`` (what
``shadowsim parse``/``publish`` call on files): format detection, instance ids, and the never-raise contract."""
from __future__ import annotations

import json
from pathlib import Path

from simcore.events import PrefillBatch, event_to_json
from streams.adapters.base import ParseContext
from streams.decode import DecodeResult, FileItem, decode_record, detect_format, iter_file_events

DECODE = ("[2025-01-08 20:17:32 TP0] Decode batch. #running-req: 2, #token: 27373, token usage: 0.09, "
          "gen throughput (token/s): 33.38, #queue-req: 0")


def test_raw_log_line_record_uses_the_key_as_instance_and_the_topic_as_source():
    res = decode_record(DECODE.encode(), key=b"sglang-7", source="sglang-logs")
    assert isinstance(res, DecodeResult)
    (e,) = res.events
    assert (e.instance_id, e.source, e.kv_tokens) == ("sglang-7", "sglang-logs", 27373)


def test_canonical_event_json_is_validated_as_is():
    ev = PrefillBatch(ts=5.0, instance_id="a", new_seqs=1, new_tokens=2, cached_tokens=0, event_id="x")
    (back,) = decode_record(event_to_json(ev)).events
    assert back == ev
    bad = json.dumps({"kind": "prefill_batch", "schema_version": 1, "ts": 1.0, "new_seqs": -1, "new_tokens": 1,
                      "cached_tokens": 0}).encode()
    res = decode_record(bad)
    assert res.events == [] and res.dead_letters[0].reason.startswith("prefill_batch.new_seqs: Input should be")
    assert res.dead_letters[0].raw == bad


def test_empty_and_foreign_records_are_skipped_and_unknown_format_is_dead_lettered():
    assert decode_record(b"").skipped == 1
    assert decode_record(b'{"level": "info", "msg": "hello"}').skipped == 1
    res = decode_record(DECODE.encode(), fmt="yaml")
    assert res.dead_letters[0].reason == "unknown format 'yaml'"


def test_a_record_with_several_lines_gives_one_outcome_per_line():
    value = "\n".join([DECODE, "Traceback (most recent call last):",
                       "[2025-01-08 20:17:33 TP0] Decode batch. #running-req: x"]).encode()
    res = decode_record(value)
    assert (len(res.events), res.skipped, len(res.dead_letters)) == (1, 1, 1)
    assert res.dead_letters[0].line_no == 3


def test_a_shared_context_carries_the_last_timestamp_between_records():
    ctx = ParseContext(source="topic")
    decode_record(DECODE.encode(), ctx=ctx)
    (e,) = decode_record(b"[gpu=1] Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, #running-req: 0, "
                         b"#queue-req: 0", ctx=ctx).events
    assert e.ts == 1736367452.0


def test_format_detection():
    assert detect_format(b"# HELP sglang:token_usage x\n") == "prometheus"
    assert detect_format(b"TIMESTAMP,ContextTokens,GeneratedTokens\n") == "azure"
    assert detect_format(b'{"resourceSpans": []}') == "otlp_json"
    assert detect_format(b"\n\x8a\x01\x12\x87\x01\n\x10") == "otlp_proto"
    assert detect_format(DECODE.encode()) == "sglang_log"


def test_parse_output_reads_back_as_the_same_events(tmp_path: Path, shared_dir: Path):
    src = shared_dir / "data/sglang_logs/issue2777_v0.4.1_llama2-7b_eagle2_l4_retract-decode-oom_crash.log"
    first = [i.event for i in iter_file_events(src) if i.event]
    out = tmp_path / "events.jsonl"
    out.write_bytes(b"".join(event_to_json(e) + b"\n" for e in first))
    again = [i.event for i in iter_file_events(out, fmt="events")]
    assert again == first and len(first) == 25


def test_file_items_number_every_line(tmp_path: Path):
    p = tmp_path / "x.log"
    p.write_text(DECODE + "\nhello\n" + "[2025-01-08 20:17:33 TP0] Prefill batch. #new-seq: one\n")
    items = list(iter_file_events(p, instance_id="i9"))
    assert [type(i) for i in items] == [FileItem] * 3
    assert [(i.line_no, i.event is not None, i.skipped, i.dead_letter is not None) for i in items] == [
        (1, True, False, False), (2, False, True, False), (3, False, False, True)]
    assert items[0].event.instance_id == "i9" and items[0].event.event_id == "x.log:1"
    assert items[2].dead_letter.raw.startswith(b"[2025-01-08 20:17:33 TP0] Prefill")


def test_pretty_printed_json_document(tmp_path: Path):
    p = tmp_path / "bench.json"
    p.write_text(json.dumps({"backend": "sglang", "completed": 3, "duration": 1.5, "mean_ttft_ms": 10.0},
                            indent=2))
    (item,) = list(iter_file_events(p))
    assert item.event.kind == "benchmark_summary" and item.event.mean_ttft_s == 0.01


def test_an_object_claiming_a_known_kind_but_invalid_is_dead_lettered_not_skipped():
    from streams.decode import decode_record

    res = decode_record(b'{"kind":"decode_batch","bad":1}', key=b"inst-a", source="t")
    assert res.events == []
    assert res.skipped == 0
    assert len(res.dead_letters) == 1
    assert "decode_batch" in res.dead_letters[0].reason
