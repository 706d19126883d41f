"""OTLP spans from SGLang's ``--enable-trace``, as the Collector's Kafka exporter writes them in ``otlp_proto`` and
``otlp_json``: a finished request root span gives arrived / first-token / finished events; other spans are skipped."""
from __future__ import annotations

import json

import pytest
from google.protobuf import json_format
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from streams.decode import decode_record

START_NS = 1_793_361_601_000_000_000  # 2026-10-30 12:00:01 UTC
END_NS = START_NS + 2_500_000_000


def traces() -> TracesData:
    td = TracesData()
    rs = td.resource_spans.add()
    a = rs.resource.attributes.add()
    a.key, a.value.string_value = "service.name", "sglang"
    a = rs.resource.attributes.add()
    a.key, a.value.string_value = "host.name", "gpu-node-1"
    ss = rs.scope_spans.add()
    root = ss.spans.add()
    root.name, root.trace_id, root.span_id = "Req 0123abcd", b"\x01" * 16, b"\x02" * 8
    root.start_time_unix_nano, root.end_time_unix_nano = START_NS, END_NS
    for key, kind, val in [
        ("rid", "string_value", "0123abcd-full-rid"), ("gen_ai.usage.prompt_tokens", "int_value", 1024),
        ("gen_ai.usage.completion_tokens", "int_value", 64), ("gen_ai.usage.cached_tokens", "int_value", 512),
        ("gen_ai.latency.time_to_first_token", "double_value", 0.25), ("gen_ai.latency.e2e", "double_value", 2.5),
        ("gen_ai.request.max_tokens", "int_value", 64),
    ]:
        at = root.attributes.add()
        at.key = key
        setattr(at.value, kind, val)
    fr = root.attributes.add()
    fr.key = "gen_ai.response.finish_reasons"
    fr.value.array_value.values.add().string_value = "length"
    stage = ss.spans.add()
    stage.name, stage.start_time_unix_nano, stage.end_time_unix_nano = "prefill_forward", START_NS, START_NS + 10**8
    return td


def check(events, instance="gpu-node-1"):
    ev = {e.kind: e for e in events}
    assert set(ev) == {"request_arrived", "request_first_token", "request_finished"}
    a, f, fin = ev["request_arrived"], ev["request_first_token"], ev["request_finished"]
    assert (a.ts, a.prompt_tokens, a.max_new_tokens, a.request_id) == (1793361601.0, 1024, 64, "0123abcd-full-rid")
    assert f.ts == pytest.approx(1793361601.25)
    assert (fin.ts, fin.output_tokens, fin.cached_tokens, fin.e2e_s, fin.ttft_s, fin.finish_reason) == (
        1793361603.5, 64, 512, 2.5, 0.25, "length")
    assert {e.instance_id for e in events} == {instance}


def test_otlp_proto_record():
    res = decode_record(traces().SerializeToString(), source="otlp_spans")
    assert res.dead_letters == []
    check(res.events)


def test_otlp_json_record_with_hex_ids_and_string_ints():
    obj = json_format.MessageToDict(traces())
    text = json.dumps(obj)
    assert '"intValue": "1024"' in text  # the OTLP JSON encoding of 64-bit ints
    check(decode_record(text.encode(), key=b"inst-1").events, instance="inst-1")


def test_garbage_that_starts_like_a_proto_is_dead_lettered():
    res = decode_record(b"\n\x05\x12\x03\xff\xff\xff\xff\xff\x00")
    assert res.events == [] and len(res.dead_letters) == 1
    assert res.dead_letters[0].reason.startswith("otlp_proto: neither TracesData nor LogsData")


def test_a_root_span_before_finish_is_skipped():
    td = TracesData()
    sp = td.resource_spans.add().scope_spans.add().spans.add()
    sp.name, sp.start_time_unix_nano = "Req 1", START_NS
    res = decode_record(td.SerializeToString())
    assert (res.events, res.dead_letters, res.skipped) == ([], [], 1)


def logs_data():
    from opentelemetry.proto.logs.v1.logs_pb2 import LogsData

    ld = LogsData()
    rl = ld.resource_logs.add()
    a = rl.resource.attributes.add()
    a.key, a.value.string_value = "k8s.pod.name", "sglang-qwen-0"
    records = rl.scope_logs.add()
    for body in [
        "[2025-01-08 20:17:32 TP0] Decode batch. #running-req: 2, #token: 27373, token usage: 0.09, "
        "gen throughput (token/s): 33.38, #queue-req: 0",
        'INFO:     127.0.0.1:1 - "POST /generate HTTP/1.1" 200 OK',
        "[2025-01-08 20:17:33 TP0] Prefill batch. #new-seq: 1, #new-token: 9, #cached-token: 3, token usage: 0.09, "
        "#running-req: 2, #queue-req: 0",
    ]:
        lr = records.log_records.add()
        lr.body.string_value = body
        lr.time_unix_nano = START_NS
    return ld


def test_otlp_logs_proto_from_the_filelog_receiver():
    res = decode_record(logs_data().SerializeToString(), source="otlp_logs")
    assert res.dead_letters == []
    assert [(e.kind, e.instance_id) for e in res.events] == [("decode_batch", "sglang-qwen-0"),
                                                              ("prefill_batch", "sglang-qwen-0")]
    assert res.events[0].ts == 1736367452.0 and res.events[1].cached_tokens == 3


def test_otlp_logs_json():
    text = json.dumps(json_format.MessageToDict(logs_data()))
    res = decode_record(text.encode(), key=b"inst-2")
    assert [e.instance_id for e in res.events] == ["inst-2", "inst-2"]
