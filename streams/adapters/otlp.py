"""OTLP trace spans and log records, as the OpenTelemetry Collector's Kafka exporter writes them -> events.

Encodings: ``otlp_proto`` (a serialized ``TracesData`` / ``ExportTraceServiceRequest``: same wire format) and
``otlp_json`` (``{"resourceSpans": [...]}``, camelCase, 64-bit ints as strings). Both are walked as the same dict
shape (proto via ``json_format.MessageToDict``).

SGLang's request root span (``"[role ]Req <rid8>"``, sglang-internals 5.4) carries, once finished, the attributes
``gen_ai.usage.prompt_tokens/completion_tokens/cached_tokens``, ``gen_ai.latency.time_to_first_token`` and
``gen_ai.latency.e2e`` (s), ``gen_ai.request.max_tokens`` and ``gen_ai.response.finish_reasons``. Such a span yields
``request_arrived`` (span start), ``request_first_token`` (start + TTFT) and ``request_finished`` (span end).

Per-step batch shapes come from the stage spans (``streams.adapters.otlp_steps``): a ``decode_loop`` /
``prefill_forward`` span carrying a ``schedule`` event (``bid``, ``batch_size``, ``forward_mode``) gives a
``forward_pass``; a ``retract`` span event gives a ``retraction``. Thread spans and other stages are skipped.

The instance is the resource's ``service.instance.id`` or ``host.name`` unless the caller fixed it.

OTLP *logs* (``LogsData``, e.g. the Collector's filelog receiver shipping SGLang's stdout) carry log lines in the
record bodies; they are parsed like raw lines (``from_logs_dict``).
"""
from __future__ import annotations

import base64
import binascii
from typing import Any

from streams.adapters.base import LineResult, ParseContext, as_int, build, finite

_PROMPT = "gen_ai.usage.prompt_tokens"


def _attr_value(v: Any) -> Any:
    if not isinstance(v, dict):
        return None
    for key in ("stringValue", "intValue", "doubleValue", "boolValue"):
        if key in v:
            return v[key]
    arr = v.get("arrayValue")
    if isinstance(arr, dict):
        return [_attr_value(x) for x in arr.get("values", []) if isinstance(x, dict)]
    return None


def attributes(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(items, list):
        for a in items:
            if isinstance(a, dict) and isinstance(a.get("key"), str):
                out[a["key"]] = _attr_value(a.get("value"))
    return out


def _nanos(v: Any) -> float | None:
    f = finite(v)
    return None if f is None else f / 1e9


def _span_events(span: dict[str, Any], resource_inst: str | None, ctx: ParseContext) -> LineResult:
    attrs = attributes(span.get("attributes"))
    if _PROMPT not in attrs:
        return None  # stage/thread span, or a root span before finish
    rid = attrs.get("rid") or attrs.get("gen_ai.request.id")
    if not isinstance(rid, str) or not rid:
        return "otlp: request span without rid"
    prompt = as_int(attrs.get(_PROMPT))
    output = as_int(attrs.get("gen_ai.usage.completion_tokens"))
    start = _nanos(span.get("startTimeUnixNano"))
    end = _nanos(span.get("endTimeUnixNano"))
    if prompt is None or output is None or start is None or end is None:
        return "otlp: request span needs integer token counts and start/end times"
    inst = _instance(resource_inst, ctx)
    common = {"instance_id": inst, "source": ctx.source or None}
    ttft = finite(attrs.get("gen_ai.latency.time_to_first_token"))
    e2e = finite(attrs.get("gen_ai.latency.e2e"))
    events: list[Any] = []
    arrived: dict[str, Any] = {"kind": "request_arrived", "ts": start, "request_id": rid, "prompt_tokens": prompt,
                               "output_tokens_hint": output, "event_id": f"{inst}/{rid}:arrived", **common}
    mt = as_int(attrs.get("gen_ai.request.max_tokens"))
    if mt is not None:
        arrived["max_new_tokens"] = mt
    parts = [("request_arrived", arrived)]
    if ttft is not None:
        parts.append(("request_first_token", {"kind": "request_first_token", "ts": start + ttft, "request_id": rid,
                                              "ttft_s": ttft, "event_id": f"{inst}/{rid}:first_token", **common}))
    fin: dict[str, Any] = {"kind": "request_finished", "ts": end, "request_id": rid, "prompt_tokens": prompt,
                           "output_tokens": output, "arrival_ts": start, "event_id": f"{inst}/{rid}:finished",
                           **common}
    cached = as_int(attrs.get("gen_ai.usage.cached_tokens"))
    if cached is not None:
        fin["cached_tokens"] = cached
    if ttft is not None:
        fin["ttft_s"] = ttft
    fin["e2e_s"] = e2e if e2e is not None else max(0.0, end - start)
    reasons = attrs.get("gen_ai.response.finish_reasons")
    if isinstance(reasons, list) and reasons and isinstance(reasons[0], str):
        fin["finish_reason"] = reasons[0]
    elif isinstance(reasons, str):
        fin["finish_reason"] = reasons
    parts.append(("request_finished", fin))
    for kind, data in parts:
        res = build(kind, data)
        if isinstance(res, str):
            return res
        events.extend(res or [])
    return events


def _trace_id(v: Any) -> str | None:
    """A span's trace id as 32 lowercase hex digits, whether it came hex (OTLP JSON) or base64 (proto → dict)."""
    if not isinstance(v, str) or not v:
        return None
    if len(v) == 32 and all(c in "0123456789abcdefABCDEF" for c in v):
        return v.lower()
    try:
        raw = base64.b64decode(v, validate=True)
    except (ValueError, binascii.Error):
        return None
    return raw.hex() if raw else None


def is_otlp_json(obj: dict[str, Any]) -> bool:
    return "resourceSpans" in obj or "resource_spans" in obj


def from_traces_dict(obj: dict[str, Any], ctx: ParseContext) -> LineResult:
    """All events in one ``TracesData`` dict (request events from root spans, then ``forward_pass`` /
    ``retraction`` from stage spans); the first bad span's reason if nothing parsed."""
    from streams.adapters import otlp_steps  # local: otlp_steps uses this module's helpers

    events: list[Any] = []
    first_err: str | None = None
    rs_list = obj.get("resourceSpans", obj.get("resource_spans"))
    if not isinstance(rs_list, list):
        return "otlp: resourceSpans is not a list"
    spans: list[tuple[dict[str, Any], str | None]] = []
    for rs in rs_list:
        if not isinstance(rs, dict):
            continue
        res_attrs = attributes((rs.get("resource") or {}).get("attributes") if isinstance(rs.get("resource"), dict)
                               else None)
        inst = res_attrs.get("service.instance.id") or res_attrs.get("host.name")
        inst = inst if isinstance(inst, str) and inst else None
        scopes = rs.get("scopeSpans", rs.get("instrumentationLibrarySpans", []))
        for ss in scopes if isinstance(scopes, list) else []:
            sp_list = ss.get("spans", []) if isinstance(ss, dict) else []
            spans.extend((span, inst) for span in (sp_list if isinstance(sp_list, list) else [])
                         if isinstance(span, dict))
    steps = otlp_steps.StepState.of(ctx)
    for span, inst in spans:  # root spans first: their token counts complete prefill steps of the same payload
        res = _span_events(span, inst, ctx)
        if isinstance(res, str):
            first_err = first_err or res
        elif res:
            events.extend(res)
            steps.remember_request(_trace_id(span.get("traceId")), attributes(span.get("attributes")))
    for span, inst in spans:
        res = otlp_steps.span_steps(span, _trace_id(span.get("traceId")), _instance(inst, ctx), ctx.source, steps)
        if isinstance(res, str):
            first_err = first_err or res
        elif res:
            events.extend(res)
    events.extend(steps.resolve(ctx.source))
    if events:
        return events
    return first_err


def _instance(resource_inst: str | None, ctx: ParseContext) -> str:
    return ctx.instance_id if ctx.scratch.get("instance_fixed") or not resource_inst else resource_inst


def is_otlp_logs_json(obj: dict[str, Any]) -> bool:
    return "resourceLogs" in obj or "resource_logs" in obj


_LOG_INSTANCE_KEYS = ("k8s.pod.name", "container.name", "host.name", "service.instance.id")


def from_logs_dict(obj: dict[str, Any], ctx: ParseContext) -> LineResult:
    """OTLP ``LogsData`` (the Collector's filelog receiver -> Kafka exporter): each record's string body is a log
    line, parsed like a raw line under the resource's pod / container / host name. A batch gives all its events;
    if none parse, the first dead-letter reason."""
    from streams.adapters import sglang_log  # local: sglang_log does not depend on otlp

    events: list[Any] = []
    first_err: str | None = None
    rl_list = obj.get("resourceLogs", obj.get("resource_logs"))
    if not isinstance(rl_list, list):
        return "otlp: resourceLogs is not a list"
    saved = ctx.instance_id
    try:
        for rl in rl_list:
            if not isinstance(rl, dict):
                continue
            res = rl.get("resource")
            attrs = attributes(res.get("attributes") if isinstance(res, dict) else None)
            if not ctx.scratch.get("instance_fixed"):
                inst = next((attrs[k] for k in _LOG_INSTANCE_KEYS if isinstance(attrs.get(k), str) and attrs[k]),
                            None)
                ctx.instance_id = inst or saved
            scopes = rl.get("scopeLogs", [])
            for sl in scopes if isinstance(scopes, list) else []:
                records = sl.get("logRecords", []) if isinstance(sl, dict) else []
                for rec in records if isinstance(records, list) else []:
                    if not isinstance(rec, dict):
                        continue
                    body = _attr_value(rec.get("body"))
                    if not isinstance(body, str):
                        continue
                    t = _nanos(rec.get("timeUnixNano")) or _nanos(rec.get("observedTimeUnixNano"))
                    if t:
                        ctx.last_ts = t
                    out = sglang_log.parse_line(body, ctx)
                    if isinstance(out, str):
                        first_err = first_err or out
                    elif out:
                        events.extend(out)
    finally:
        ctx.instance_id = saved
    if events:
        return events
    return first_err


def from_proto(data: bytes, ctx: ParseContext) -> LineResult:
    """A serialized ``TracesData``/``ExportTraceServiceRequest`` or ``LogsData``. Both start with field 1, so the
    bytes are read as traces first; spans without a trace id mean it was a logs message. Undecodable bytes are a
    dead letter."""
    try:
        from google.protobuf import json_format
        from opentelemetry.proto.logs.v1.logs_pb2 import LogsData
        from opentelemetry.proto.trace.v1.trace_pb2 import TracesData
    except ImportError:  # pragma: no cover - opentelemetry-proto is a dependency
        return "otlp_proto: opentelemetry-proto is not installed"
    def as_logs() -> Any:
        try:
            return LogsData.FromString(data)
        except Exception:  # noqa: BLE001 - the C decoder raises DecodeError and, on some garbage, other types
            return None

    try:
        msg = TracesData.FromString(data)
    except Exception as exc:  # noqa: BLE001
        logs = as_logs()
        if logs is None:
            return f"otlp_proto: neither TracesData nor LogsData ({type(exc).__name__})"
        return from_logs_dict(json_format.MessageToDict(logs), ctx) if logs.resource_logs else None
    if not msg.resource_spans:
        return None
    spans = [sp for rs in msg.resource_spans for ss in rs.scope_spans for sp in ss.spans]
    if spans and not any(sp.trace_id for sp in spans):
        logs = as_logs()  # real spans always have a trace id: this was probably a logs message
        if logs is not None and any(lr.body.HasField("string_value") for r in logs.resource_logs
                                    for sl in r.scope_logs for lr in sl.log_records):
            return from_logs_dict(json_format.MessageToDict(logs), ctx)
    return from_traces_dict(json_format.MessageToDict(msg), ctx)


def looks_like_proto(data: bytes) -> bool:
    """TracesData starts with field 1 (resource_spans), wire type 2: byte 0x0A, then binary (length varints, tags
    0x0A/0x12 below 0x20). Text never starts that way once lines are split."""
    head = data[1:64]
    return data[:1] == b"\n" and len(data) > 2 and any(b < 9 or 13 < b < 32 or b > 126 for b in head)
