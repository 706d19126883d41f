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
    assert res.dead_letters[0].reason.startswith("otlp_proto: not a TracesData message")


def test_a_root_span_before_finish_is_skipped():
    td = TracesData()
    sp = td.resource_spans.add().scope_spans.add().spans.add()
    sp.name, sp.start_time_unix_nano = "Req 1", START_NS
    res = decode_record(td.SerializeToString())
    assert (res.events, res.dead_letters, res.skipped) == ([], [], 1)
