"""One JSON object (a JSON line or a Kafka record value) -> events, by recognising its shape.

Order matters: a canonical shadowsim event (``kind`` + ``schema_version``) is validated as is; then shipper
envelopes (``message``/``log`` string); then SGLang's request records, workload traces, OTLP JSON and bench_serving
results. Objects of no known shape are skipped quietly.
"""
from __future__ import annotations

import json
from typing import Any

import pydantic

from simcore.events import EVENT_ADAPTER, KIND_TO_CLASS
from streams.adapters import bench_serving, otlp, request_log, server_info, shipper, traces
from streams.adapters.base import LineResult, ParseContext, validation_reason


def from_canonical(obj: dict[str, Any]) -> LineResult:
    try:
        return [EVENT_ADAPTER.validate_python(obj)]
    except pydantic.ValidationError as exc:
        return validation_reason(str(obj.get("kind")), exc)


def from_object(obj: Any, ctx: ParseContext) -> LineResult:
    if not isinstance(obj, dict):
        return None
    # A canonical event, or an object that claims a known event kind: validate it, and dead-letter it when it fails
    # (a malformed event must not vanish as a quiet skip).
    if ("kind" in obj and "schema_version" in obj) or (isinstance(obj.get("kind"), str) and obj["kind"] in KIND_TO_CLASS):
        return from_canonical(obj)
    if shipper.envelope_line(obj) is not None:
        return shipper.parse_envelope(obj, ctx)
    if isinstance(obj.get("event"), str) or "request_parameters" in obj:
        return request_log.from_json(obj, ctx)
    if traces.is_mooncake(obj):
        return traces.from_mooncake(obj, ctx)
    if traces.is_sharegpt_stream(obj):
        return traces.from_sharegpt_stream(obj, ctx)
    if otlp.is_otlp_json(obj):
        return otlp.from_traces_dict(obj, ctx)
    if otlp.is_otlp_logs_json(obj):
        return otlp.from_logs_dict(obj, ctx)
    if bench_serving.is_result_json(obj):
        return bench_serving.from_json(obj, ctx)
    if server_info.is_server_info(obj):
        return server_info.from_server_info(obj, ctx)
    if "meta_info" in obj and isinstance(obj["meta_info"], dict):  # a bare /generate response
        return request_log.from_meta_info(obj["meta_info"], ctx)
    return None


def parse_json_text(text: str | bytes, ctx: ParseContext) -> LineResult:
    """A JSON document/line. Text that starts like JSON but does not parse is a dead letter."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return "json: not valid JSON"
    return from_object(obj, ctx)
