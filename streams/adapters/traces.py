"""Workload trace files -> ``request_arrived`` events (what a shadow replays when no live server is attached).

* Mooncake (FAST'25) JSON lines: ``{"timestamp": ms, "input_length", "output_length", "hash_ids": [...]}``; each hash
  id names one 512-token prefix block, so prefix sharing is kept (``block_hashes``, ``block_size_tokens=512``).
* ShareGPT-derived request streams (LLMServingSim workloads): ``{"input_toks", "output_toks", "arrival_time_ns",
  "input_tok_ids"?: [...]}`` with real token ids.
* Azure LLM inference trace 2023 CSV: ``TIMESTAMP,ContextTokens,GeneratedTokens``.

Trace times are relative (Mooncake, ShareGPT: from 0) or wall-clock (Azure, read as UTC); ``ctx.default_ts`` is
added to relative times so a replay can be placed anywhere. Requests get ``max_new_tokens`` = the recorded output
length and ``ignore_eos=True``, because replaying a trace means forcing the recorded lengths.
"""
from __future__ import annotations

from typing import Any

from simcore.request import RequestSpec
from streams import traces as trace_files
from streams.adapters.base import LineResult, ParseContext, build

MOONCAKE_BLOCK_TOKENS = 512


def _arrived(ctx: ParseContext, ts: float, prompt: int, output: int | None, **extra: Any) -> LineResult:
    rid = f"{ctx.source or 'trace'}#{ctx.line_no}"
    data: dict[str, Any] = {
        "kind": "request_arrived", "ts": ts, "request_id": rid, "prompt_tokens": prompt,
        "instance_id": ctx.instance_id, "source": ctx.source or None, "event_id": ctx.line_event_id(),
        "ignore_eos": True, **extra,
    }
    if output is not None:
        data["max_new_tokens"] = output
        data["output_tokens_hint"] = output
    return build("request_arrived", data)


def is_mooncake(obj: dict[str, Any]) -> bool:
    return "input_length" in obj and "timestamp" in obj and ("output_length" in obj or "hash_ids" in obj)


# The per-object conversion and its checks live in streams.traces (the project's single trace reader); these
# wrappers only turn its RequestSpec into a request_arrived event or its TraceLineError into a dead-letter reason.
def _from_spec(ctx: ParseContext, spec: RequestSpec, **extra: Any) -> LineResult:
    return _arrived(ctx, ctx.default_ts + spec.arrival_s, spec.input_len, spec.output_len, **extra)


def from_mooncake(obj: dict[str, Any], ctx: ParseContext) -> LineResult:
    try:
        spec = trace_files.from_mooncake(obj, "")
    except trace_files.TraceLineError as e:
        return f"mooncake: {e.field}: {e.message}"
    extra: dict[str, Any] = {}
    if spec.key is not None:
        extra["block_hashes"] = list(spec.key)
        extra["block_size_tokens"] = MOONCAKE_BLOCK_TOKENS
    return _from_spec(ctx, spec, **extra)


def is_sharegpt_stream(obj: dict[str, Any]) -> bool:
    return "input_toks" in obj and "arrival_time_ns" in obj


def from_sharegpt_stream(obj: dict[str, Any], ctx: ParseContext) -> LineResult:
    try:
        spec = trace_files.from_sharegpt(obj, "")
    except trace_files.TraceLineError as e:
        return f"sharegpt: {e.field}: {e.message}"
    extra: dict[str, Any] = {} if spec.key is None else {"token_ids": list(spec.key)}
    return _from_spec(ctx, spec, **extra)


AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def parse_azure_line(line: str, ctx: ParseContext) -> LineResult:
    """One CSV row of the Azure trace (wall-clock times, read as UTC); the header row is skipped."""
    try:
        row = trace_files.parse_azure_row(line)
    except trace_files.TraceLineError as e:
        return f"azure: {e.field}: {e.message}"
    if row is None:
        return None
    ts, prompt, output = row
    ctx.last_ts = ts
    return _arrived(ctx, ts, prompt, output)
