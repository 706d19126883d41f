"""SGLang's Prometheus ``/metrics`` text (sglang-internals 5.2) -> ``server_config`` + ``metrics_snapshot``.

One scrape becomes, per (model, dp_rank): a ``server_config`` from the startup constants
(``max_total_num_tokens``, ``max_prefill_tokens``, ``max_running_requests``, ``context_len``, ``page_size``) and a
``metrics_snapshot`` of the gauges and counters. Both the 0.3.x names (``num_requests_running``, label ``name=``)
and the current ones (``num_running_reqs``, label ``model_name=``) are read. ``cache_hit_rate`` was a percentage in
0.3.x and a fraction later: values above 1 are divided by 100.

The text format has no scrape time; the snapshot's ``ts`` is the sample timestamp when the exporter wrote one,
else the context's current time (the caller passes the scrape or Kafka record time).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from streams.adapters.base import LineResult, ParseContext, build

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

_CONFIG = {
    "sglang:max_total_num_tokens": "max_total_num_tokens",
    "sglang:max_prefill_tokens": "max_prefill_tokens",
    "sglang:max_running_requests": "max_running_requests",
    "sglang:context_len": "context_len",
    "sglang:page_size": "page_size",
}
_SNAPSHOT = {
    "sglang:num_running_reqs": "running_reqs",
    "sglang:num_requests_running": "running_reqs",
    "sglang:num_queue_reqs": "queue_reqs",
    "sglang:num_requests_waiting": "queue_reqs",
    "sglang:token_usage": "token_usage",
    "sglang:num_used_tokens": "num_used_tokens",
    "sglang:gen_throughput": "gen_throughput_tok_s",
    "sglang:cache_hit_rate": "cache_hit_rate",
    "sglang:prompt_tokens_total": "prompt_tokens_total",
    "sglang:generation_tokens_total": "generation_tokens_total",
    "sglang:num_requests_total": "num_requests_total",
    "sglang:time_to_first_token_seconds_count": "ttft_count",
    "sglang:time_to_first_token_seconds_sum": "ttft_sum_s",
    "sglang:e2e_request_latency_seconds_count": "e2e_count",
    "sglang:e2e_request_latency_seconds_sum": "e2e_sum_s",
}

def looks_like(text: str) -> bool:
    head = text[:4096]
    return "# TYPE sglang:" in head or "# HELP sglang:" in head or head.startswith("sglang:")

def parse_document(text: str, ctx: ParseContext) -> Iterator[tuple[int, LineResult]]:
    """Yield (line_no, result) for every line; the events come with the last line."""
    groups: dict[tuple[str | None, int | None], dict[str, dict[str, Any]]] = {}
    sample_ts: float | None = None
    last_no = 0
    for no, raw in enumerate(text.splitlines(), start=1):
        last_no = no
        line = raw.strip()
        if not line or line.startswith("#"):
            yield no, None
            continue
        if not line.startswith("sglang:"):
            yield no, None  # python_gc_*, process_*, other exporters
            continue
        m = _SAMPLE.match(line)
        if m is None:
            yield no, "prometheus: not a sample line"
            continue
        name, labels_txt, value_txt, ts_ms = m.groups()
        try:
            value = float(value_txt)
        except ValueError:
            yield no, f"prometheus: bad value {value_txt[:30]!r} for {name}"
            continue
        labels = dict(_LABEL.findall(labels_txt or ""))
        if ts_ms is not None:
            sample_ts = int(ts_ms) / 1000.0
        field_c = _CONFIG.get(name)
        field_s = _SNAPSHOT.get(name)
        if field_c is None and field_s is None:
            yield no, None
            continue
        if value != value or value in (float("inf"), float("-inf")):
            yield no, f"prometheus: non-finite {name}"
            continue
        model = labels.get("model_name") or labels.get("name")
        dp = labels.get("dp_rank")
        key = (model, int(dp) if dp and dp.isdecimal() else None)
        g = groups.setdefault(key, {"config": {}, "snapshot": {}})
        if field_c is not None:
            g["config"][field_c] = int(value) if value == int(value) and value >= 0 else value
        if field_s is not None:
            if field_s == "cache_hit_rate" and value > 1.0:
                value = value / 100.0
            g["snapshot"][field_s] = value
        yield no, None
    ts = sample_ts if sample_ts is not None else ctx.ts
    events: list[Any] = []
    for k, ((model, dp), g) in enumerate(sorted(groups.items(), key=lambda kv: (str(kv[0][0]), kv[0][1] or -1))):
        base = {"ts": ts, "instance_id": ctx.instance_id, "source": ctx.source or None}
        if dp is not None:
            base["dp_rank"] = dp
        if g["config"]:
            res = build("server_config", {"kind": "server_config", **base, **g["config"], "model": model,
                                          "event_id": f"{ctx.source}:metrics:{k}:config"})
            if isinstance(res, str):
                yield last_no, res
            else:
                events.extend(res or [])
        if g["snapshot"]:
            res = build("metrics_snapshot", {"kind": "metrics_snapshot", **base, **g["snapshot"], "model": model,
                                             "event_id": f"{ctx.source}:metrics:{k}:snapshot"})
            if isinstance(res, str):
                yield last_no, res
            else:
                events.extend(res or [])
    if events:
        yield last_no, events

def parse_text(text: str, ctx: ParseContext) -> LineResult:
    """Whole-page convenience: all events, or the first dead-letter reason if no event came out."""
    events: list[Any] = []
    first_err: str | None = None
    for _, res in parse_document(text, ctx):
        if isinstance(res, list):
            events.extend(res)
        elif isinstance(res, str) and first_err is None:
            first_err = res
    if events:
        return events
    return first_err
