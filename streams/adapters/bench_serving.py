"""``sglang.bench_serving`` output -> ``benchmark_summary`` (+ per-request ``request_finished``).

* Console block (``============ Serving Benchmark Result ============`` ... ``=====``), every version including
  the ``Max reqeuest concurrency`` typo era. Times printed in ms become seconds.
* ``--output-file`` JSON lines (sglang-internals 5.8): the summary keys, and with ``--output-details`` the
  per-request arrays ``input_lens``, ``output_lens``, ``ttfts`` (s), ``itls`` (s, per request). Request ``i`` becomes a
  ``request_finished`` with ``e2e_s = ttft + sum(itls)`` (client-side); bench_serving records no start times or
  request ids, so ``ts`` is the context time and ids are ``<source>#<line>:<i>``.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from streams.adapters import server_info
from streams.adapters.base import LineResult, ParseContext, as_int, build, finite, to_float, to_int

BLOCK_START = "Serving Benchmark Result"

# console label -> (field, converter, scale)
_CONSOLE: dict[str, tuple[str, str, float]] = {
    "Backend": ("backend", "str", 1.0),
    "Traffic request rate": ("request_rate", "rate", 1.0),
    "Max reqeuest concurrency": ("max_concurrency", "optint", 1.0),
    "Max request concurrency": ("max_concurrency", "optint", 1.0),
    "Successful requests": ("completed", "int", 1.0),
    "Benchmark duration (s)": ("duration_s", "float", 1.0),
    "Total input tokens": ("total_input_tokens", "int", 1.0),
    "Total generated tokens": ("total_output_tokens", "int", 1.0),
    "Request throughput (req/s)": ("request_throughput_req_s", "float", 1.0),
    "Input token throughput (tok/s)": ("input_throughput_tok_s", "float", 1.0),
    "Output token throughput (tok/s)": ("output_throughput_tok_s", "float", 1.0),
    "Concurrency": ("concurrency", "float", 1.0),
    "Mean E2E Latency (ms)": ("mean_e2e_latency_s", "float", 1e-3),
    "Median E2E Latency (ms)": ("median_e2e_latency_s", "float", 1e-3),
    "Mean TTFT (ms)": ("mean_ttft_s", "float", 1e-3),
    "Median TTFT (ms)": ("median_ttft_s", "float", 1e-3),
    "P99 TTFT (ms)": ("p99_ttft_s", "float", 1e-3),
    "Mean TPOT (ms)": ("mean_tpot_s", "float", 1e-3),
    "Median TPOT (ms)": ("median_tpot_s", "float", 1e-3),
    "P99 TPOT (ms)": ("p99_tpot_s", "float", 1e-3),
    "Mean ITL (ms)": ("mean_itl_s", "float", 1e-3),
    "Median ITL (ms)": ("median_itl_s", "float", 1e-3),
    "P99 ITL (ms)": ("p99_itl_s", "float", 1e-3),
}
# JSON summary key -> (field, scale)
_JSON: dict[str, tuple[str, float]] = {
    "backend": ("backend", 1.0),
    "max_concurrency": ("max_concurrency", 1.0),
    "completed": ("completed", 1.0),
    "duration": ("duration_s", 1.0),
    "total_input_tokens": ("total_input_tokens", 1.0),
    "total_output_tokens": ("total_output_tokens", 1.0),
    "request_throughput": ("request_throughput_req_s", 1.0),
    "input_throughput": ("input_throughput_tok_s", 1.0),
    "output_throughput": ("output_throughput_tok_s", 1.0),
    "concurrency": ("concurrency", 1.0),
    "mean_e2e_latency_ms": ("mean_e2e_latency_s", 1e-3),
    "median_e2e_latency_ms": ("median_e2e_latency_s", 1e-3),
    "mean_ttft_ms": ("mean_ttft_s", 1e-3),
    "median_ttft_ms": ("median_ttft_s", 1e-3),
    "p99_ttft_ms": ("p99_ttft_s", 1e-3),
    "mean_tpot_ms": ("mean_tpot_s", 1e-3),
    "median_tpot_ms": ("median_tpot_s", 1e-3),
    "p99_tpot_ms": ("p99_tpot_s", 1e-3),
    "mean_itl_ms": ("mean_itl_s", 1e-3),
    "median_itl_ms": ("median_itl_s", 1e-3),
    "p99_itl_ms": ("p99_itl_s", 1e-3),
}
_INT_FIELDS = {"max_concurrency", "completed", "total_input_tokens", "total_output_tokens"}


def looks_like(text: str) -> bool:
    return BLOCK_START in text[:65536]


def _convert(conv: str, v: str, scale: float) -> Any:
    if conv == "str":
        return v
    if conv == "rate":
        return None if v.lower() in ("inf", "trace") else to_float(v)
    if conv == "optint":
        return None if v.lower() in ("not set", "none", "") else to_int(v)
    if conv == "int":
        return to_int(v)
    return to_float(v) * scale


def parse_document(text: str, ctx: ParseContext, line_offset: int = 0) -> Iterator[tuple[int, LineResult]]:
    """Yield (line_no within ``text``, result) for every line of a console printout; each block's summary comes at
    its closing line, with ``event_id`` ``<source>:<line_offset + line_no>``."""
    block: dict[str, Any] | None = None
    last = 0
    for no, raw in enumerate(text.splitlines(), start=1):
        ctx.line_no = line_offset + no
        last = no
        line = raw.strip()
        if BLOCK_START in line:
            block = {}
            yield no, None
            continue
        if block is None:
            yield no, None
            continue
        if line.startswith("=" * 10):
            data = {"kind": "benchmark_summary", "ts": ctx.ts, "instance_id": ctx.instance_id,
                    "source": ctx.source or None, "event_id": ctx.line_event_id(), **block}
            block = None
            yield no, build("benchmark_summary", data)
            continue
        label, sep, value = line.partition(":")
        spec = _CONSOLE.get(label.strip()) if sep else None
        if spec is None:
            yield no, None  # section rulers, P95/Max lines, fields we do not keep
            continue
        field, conv, scale = spec
        try:
            block[field] = _convert(conv, value.strip(), scale)
        except ValueError:
            yield no, f"bench_serving: cannot read {label.strip()!r} value {value.strip()[:30]!r}"
            continue
        yield no, None
    if block is not None:
        yield last, "bench_serving: result block not closed (truncated printout)"


def is_result_json(obj: dict[str, Any]) -> bool:
    return "completed" in obj and "duration" in obj and ("mean_ttft_ms" in obj or "request_throughput" in obj)


def from_json(obj: dict[str, Any], ctx: ParseContext) -> LineResult:
    """One ``--output-file`` JSON line."""
    data: dict[str, Any] = {"kind": "benchmark_summary", "ts": ctx.ts, "instance_id": ctx.instance_id,
                            "source": ctx.source or None, "event_id": ctx.line_event_id()}
    for key, (field, scale) in _JSON.items():
        v = obj.get(key)
        if v is None:
            continue
        if field == "backend":
            if isinstance(v, str):
                data[field] = v
            continue
        if field in _INT_FIELDS:
            iv = as_int(v)
            if iv is not None:
                data[field] = iv
            continue
        f = finite(v)
        if f is not None:
            data[field] = f * scale
    rate = obj.get("request_rate")
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        f = finite(rate)
        if f is not None:
            data["request_rate"] = f
    summary = build("benchmark_summary", data)
    if isinstance(summary, str):
        return summary
    events: list[Any] = list(summary or [])
    info = obj.get("server_info")
    if isinstance(info, dict) and server_info.is_server_info(info):
        cfg = server_info.from_server_info(info, ctx)
        if isinstance(cfg, list):
            events.extend(cfg)
    ins, outs, ttfts = obj.get("input_lens"), obj.get("output_lens"), obj.get("ttfts")
    itls = obj.get("itls")
    if isinstance(ins, list) and isinstance(outs, list) and isinstance(ttfts, list):
        if not (len(ins) == len(outs) == len(ttfts)):
            return "bench_serving: input_lens/output_lens/ttfts differ in length"
        for i, (pi, oi, ti) in enumerate(zip(ins, outs, ttfts)):
            p, o, t = as_int(pi), as_int(oi), finite(ti)
            if p is None or o is None:
                return f"bench_serving: request {i}: lengths are not integers"
            rid = f"{ctx.source or 'bench'}#{ctx.line_no}:{i}"
            rec: dict[str, Any] = {"kind": "request_finished", "ts": ctx.ts, "request_id": rid, "prompt_tokens": p,
                                   "output_tokens": o, "instance_id": ctx.instance_id, "source": ctx.source or None,
                                   "event_id": f"{ctx.line_event_id()}:{i}"}
            if t is not None and t > 0:  # failed requests report ttft 0
                rec["ttft_s"] = t
                gaps = itls[i] if isinstance(itls, list) and i < len(itls) and isinstance(itls[i], list) else None
                if gaps is not None:
                    vals = [finite(g) for g in gaps]
                    if all(v is not None for v in vals):
                        rec["e2e_s"] = t + sum(v for v in vals if v is not None)
            res = build("request_finished", rec)
            if isinstance(res, str):
                return res
            events.extend(res or [])
    return events
