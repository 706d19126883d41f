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


# --- stage spans -> forward_pass / retraction (sglang-internals 5.4: `schedule` events with bid / batch_size /
# forward_mode, `decode_loop` and `prefill_forward` / `chunked_prefill` spans, `retract` events) -----------------

MS = 1_000_000  # ns


def _set(attrs, key, val):
    at = attrs.add()
    at.key = key
    if isinstance(val, str):
        at.value.string_value = val
    elif isinstance(val, int):
        at.value.int_value = val
    else:
        at.value.double_value = val


class Trace:
    """Builds a TracesData the way SGLang's exporter lays it out (one trace id per request)."""

    def __init__(self, host="gpu-node-1"):
        self.td = TracesData()
        rs = self.td.resource_spans.add()
        _set(rs.resource.attributes, "host.name", host)
        self.spans = rs.scope_spans.add().spans

    def stage(self, trace: int, name: str, start_ms: float, end_ms: float, events=(), **attrs):
        sp = self.spans.add()
        sp.name, sp.trace_id, sp.span_id = name, bytes([trace]) * 16, bytes([trace, len(self.spans)]) * 4
        sp.start_time_unix_nano, sp.end_time_unix_nano = START_NS + int(start_ms * MS), START_NS + int(end_ms * MS)
        for k, v in attrs.items():
            _set(sp.attributes, k, v)
        for ev_name, at_ms, ev_attrs in events:
            e = sp.events.add()
            e.name, e.time_unix_nano = ev_name, START_NS + int(at_ms * MS)
            for k, v in ev_attrs.items():
                _set(e.attributes, k, v)
        return sp

    def root(self, trace: int, rid: str, prompt: int, cached: int | None, output: int, end_ms: float):
        attrs = {"rid": rid, "module": "sglang::request", "gen_ai.usage.prompt_tokens": prompt,
                 "gen_ai.usage.completion_tokens": output}
        if cached is not None:
            attrs["gen_ai.usage.cached_tokens"] = cached
        return self.stage(trace, f"Req {rid[:8]}", 0, end_ms, **attrs)


def sched(at_ms, bid, bs, mode):
    return ("schedule", at_ms, {"bid": bid, "batch_size": bs, "forward_mode": mode})


def steps_payloads():
    """Record 1: stage spans of requests A (trace 1) and B (trace 2): a prefill batch p1 of both, two decode steps
    d1/d2 of both, C (trace 3) retracted, a chunked prefill and a PD prebuilt step. Record 2: the root spans of A,
    B and D plus a mixed batch m1 (D's prefill + A's decode step)."""
    r1 = Trace()
    for t in (1, 2):
        r1.stage(t, "prefill_forward", 0, 80, [sched(0, "p1", 2, "prefill")])
        r1.stage(t, "decode_loop", 81, 101, [sched(81, "d1", 2, "decode")], decode_ct=0)
        r1.stage(t, "decode_loop", 101, 120, [sched(102, "d2", 2, "decode")], decode_ct=1)
    r1.stage(3, "decode_loop", 90, 95, [("retract", 94, {})], decode_ct=4)
    r1.stage(4, "chunked_prefill", 0, 50, [sched(1, "c1", 1, "prefill")])
    r1.stage(5, "decode_loop", 0, 7, [sched(1, "pb", 1, "prebuilt")])
    r2 = Trace()
    r2.root(1, "req-A-0001", 1000, 200, 5, 300)
    r2.root(2, "req-B-0002", 500, 0, 5, 310)
    r2.stage(6, "prefill_forward", 130, 170, [sched(130, "m1", 2, "prefill")])
    r2.stage(1, "decode_loop", 120, 170, [sched(130, "m1", 2, "prefill")], decode_ct=2)
    r2.root(6, "req-D-0006", 64, 32, 1, 400)
    return r1.td, r2.td


def hex_ids(obj):
    """The Collector's OTLP JSON writes trace/span ids as hex, MessageToDict as base64."""
    import base64

    if isinstance(obj, dict):
        return {k: (base64.b64decode(v).hex() if k in ("traceId", "spanId") else hex_ids(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [hex_ids(x) for x in obj]
    return obj


def encode(td, fmt):
    if fmt == "otlp_proto":
        return td.SerializeToString()
    return json.dumps(hex_ids(json_format.MessageToDict(td))).encode()


@pytest.mark.parametrize("fmt", ["otlp_proto", "otlp_json"])
def test_stage_spans_become_forward_passes_and_retractions(fmt):
    from streams.adapters.base import ParseContext

    ctx = ParseContext(source="otlp_spans")  # one stream: the consumer keeps one context per partition and key
    r1, r2 = steps_payloads()
    res1 = decode_record(encode(r1, fmt), source="otlp_spans", ctx=ctx)
    assert res1.dead_letters == []
    fp = [e for e in res1.events if e.kind == "forward_pass"]
    # d1 and d2 once each although two requests' spans carry them; p1 waits for the root spans (token counts);
    # the chunked prefill and the prebuilt step give nothing
    assert [(e.event_id, e.forward_mode, e.batch_size, e.num_decode_reqs, e.num_extend_tokens) for e in fp] == [
        ("otel:gpu-node-1:d1", "decode", 2, 2, 0), ("otel:gpu-node-1:d2", "decode", 2, 2, 0)]
    assert fp[0].duration_s == pytest.approx(0.020) and fp[1].duration_s == pytest.approx(0.019)
    assert fp[0].ts == pytest.approx(1793361601.101) and fp[0].sum_kv_tokens is None
    (rt,) = [e for e in res1.events if e.kind == "retraction"]
    assert (rt.num_retracted, rt.request_id, rt.instance_id) == (1, None, "gpu-node-1")
    assert rt.ts == pytest.approx(1793361601.094) and rt.event_id.endswith(":retract")

    res2 = decode_record(encode(r2, fmt), source="otlp_spans", ctx=ctx)
    assert res2.dead_letters == []
    fp2 = {e.event_id: e for e in res2.events if e.kind == "forward_pass"}
    assert set(fp2) == {"otel:gpu-node-1:p1", "otel:gpu-node-1:m1"}
    p1, m1 = fp2["otel:gpu-node-1:p1"], fp2["otel:gpu-node-1:m1"]
    assert (p1.forward_mode, p1.batch_size, p1.num_prefill_reqs, p1.num_decode_reqs) == ("prefill", 2, 2, 0)
    assert (p1.num_extend_tokens, p1.num_cached_tokens, p1.sum_kv_tokens) == (800 + 500, 200, 1500)
    assert p1.duration_s == pytest.approx(0.080) and p1.ts == pytest.approx(1793361601.080)
    assert (m1.forward_mode, m1.batch_size, m1.num_prefill_reqs, m1.num_decode_reqs) == ("mixed", 2, 1, 1)
    assert (m1.num_extend_tokens, m1.num_cached_tokens, m1.sum_kv_tokens) == (32, 32, None)
    assert m1.duration_s == pytest.approx(0.040)  # schedule (130 ms) -> step end (170 ms)
    assert sum(e.kind == "request_finished" for e in res2.events) == 3


def test_steps_are_emitted_once_when_the_same_payload_is_read_again():
    from streams.adapters.base import ParseContext

    ctx = ParseContext(source="s")
    r1, _ = steps_payloads()
    first = decode_record(r1.SerializeToString(), ctx=ctx)
    again = decode_record(r1.SerializeToString(), ctx=ctx)
    assert len([e for e in first.events if e.kind == "forward_pass"]) == 2
    assert [e.kind for e in again.events] == ["retraction"]  # same event id as before: downstream de-duplicates


def test_prefill_with_a_retracted_member_or_unknown_cached_tokens_gives_no_forward_pass():
    t = Trace()
    t.stage(1, "prefill_forward", 0, 50, [sched(0, "p9", 1, "prefill")])
    t.stage(1, "prefill_waiting", 50, 60, [("retract", 55, {})])
    t.root(1, "req-R", 100, 0, 2, 200)
    t.stage(2, "prefill_forward", 0, 50, [sched(0, "p8", 1, "prefill")])
    t.root(2, "req-U", 100, None, 2, 200)
    res = decode_record(t.td.SerializeToString())
    kinds = [e.kind for e in res.events]
    assert "forward_pass" not in kinds and kinds.count("retraction") == 1 and kinds.count("request_finished") == 2


def test_a_schedule_event_without_bid_is_a_dead_letter_when_nothing_else_parsed():
    t = Trace()
    t.stage(1, "decode_loop", 0, 10, [("schedule", 1, {"batch_size": 3, "forward_mode": "decode"})])
    res = decode_record(t.td.SerializeToString())
    assert res.events == []
    assert [d.reason for d in res.dead_letters] == [
        "otlp: decode_loop schedule event needs a bid and a batch_size >= 1"]


def test_random_span_shapes_never_raise():
    """Hypothesis over OTLP-shaped JSON (the generic property test rarely builds spans with events)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from streams.adapters.base import ParseContext

    scalar = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=6),
                       st.sampled_from(["schedule", "retract", "decode_loop", "prefill_forward", "chunked_prefill",
                                        "decode", "prefill", "AQEBAQEBAQEBAQEBAQEBAQ==", "12", "²"]))
    value = st.one_of(st.fixed_dictionaries({}, optional={"stringValue": scalar, "intValue": scalar,
                                                          "doubleValue": scalar}), scalar)
    attrs = st.lists(st.one_of(st.fixed_dictionaries({"key": st.sampled_from(
        ["bid", "batch_size", "forward_mode", "rid", "gen_ai.usage.prompt_tokens", "gen_ai.usage.cached_tokens",
         "gen_ai.usage.completion_tokens"]), "value": value}), scalar), max_size=4)
    ns = st.one_of(st.integers(0, 2**64).map(str), st.sampled_from(["²", "1e3", "-5", "12"]), scalar)
    event = st.fixed_dictionaries({"name": st.sampled_from(["schedule", "retract"]), "timeUnixNano": ns,
                                   "attributes": attrs})
    span = st.fixed_dictionaries({"name": st.sampled_from(["decode_loop", "prefill_forward", "chunked_prefill",
                                                           "Req 1"]),
                                  "events": st.lists(st.one_of(event, scalar), min_size=1, max_size=3)},
                                 optional={"traceId": scalar, "startTimeUnixNano": ns, "endTimeUnixNano": ns,
                                           "attributes": attrs})
    payload = st.fixed_dictionaries({"resourceSpans": st.lists(st.fixed_dictionaries(
        {"scopeSpans": st.lists(st.fixed_dictionaries({"spans": st.lists(span, max_size=4)}), max_size=2)}),
        max_size=2)})

    ctx = ParseContext()

    @settings(max_examples=120, deadline=None)
    @given(obj=payload)
    def run(obj):
        res = decode_record(json.dumps(obj).encode(), ctx=ctx)
        assert len(res.events) + res.skipped + len(res.dead_letters) >= 1
        assert not any(d.reason.startswith("internal error") for d in res.dead_letters), res.dead_letters

    run()
