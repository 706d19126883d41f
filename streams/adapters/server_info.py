"""``GET /server_info`` JSON (sglang-internals 5.7) -> ``server_config``.

The response holds every resolved server argument at the top level (``model_path``, ``tp_size``, ``page_size``,
``chunked_prefill_size``, ``schedule_policy``, …), older versions also ``max_total_num_tokens``, and per-DP
``internal_states`` (``memory_usage.token_capacity`` = KV pool tokens in newer versions). bench_serving's result
JSON embeds the same object as ``server_info``.
"""
from __future__ import annotations

from typing import Any

from streams.adapters.base import LineResult, ParseContext, as_int, build, drop_idle_speculative, finite

_STR = {"model_path": "model", "served_model_name": "model", "schedule_policy": "schedule_policy",
        "kv_cache_dtype": "kv_cache_dtype", "version": "sglang_version",
        "speculative_algorithm": "speculative_algorithm", "speculative_draft_model_path": "speculative_draft_model_path"}
_INT = {"tp_size": "tp_size", "dp_size": "dp_size", "pp_size": "pp_size", "ep_size": "ep_size",
        "page_size": "page_size", "chunked_prefill_size": "chunked_prefill_size",
        "max_prefill_tokens": "max_prefill_tokens", "max_running_requests": "max_running_requests",
        "context_length": "context_len", "max_total_num_tokens": "max_total_num_tokens",
        "max_total_tokens": "max_total_num_tokens", "cuda_graph_max_bs": "cuda_graph_max_bs",
        "speculative_num_steps": "speculative_num_steps", "speculative_eagle_topk": "speculative_eagle_topk",
        "speculative_num_draft_tokens": "speculative_num_draft_tokens"}
_BOOL = {"disable_radix_cache": "disable_radix_cache", "enable_mixed_chunk": "enable_mixed_chunk",
         "disable_overlap_schedule": "disable_overlap_schedule", "enable_dp_attention": "enable_dp_attention"}


def is_server_info(obj: dict[str, Any]) -> bool:
    return "model_path" in obj and ("tp_size" in obj or "max_running_requests" in obj)


def from_server_info(obj: dict[str, Any], ctx: ParseContext) -> LineResult:
    data: dict[str, Any] = {"kind": "server_config", "ts": ctx.ts, "instance_id": ctx.instance_id,
                            "source": ctx.source or None, "event_id": ctx.line_event_id()}
    for key, field in _STR.items():
        v = obj.get(key)
        if isinstance(v, str) and v and (field != "model" or key == "served_model_name" or "model" not in data):
            data[field] = v
    for key, field in _INT.items():
        v = obj.get(key)
        if v is None or field in data:
            continue
        iv = as_int(v)
        if iv is None:
            return f"server_info: {key} is not an integer"
        data[field] = iv
    for key, field in _BOOL.items():
        if isinstance(obj.get(key), bool):
            data[field] = obj[key]
    drop_idle_speculative(data)
    mfs = finite(obj.get("mem_fraction_static"))
    if mfs is not None:
        data["mem_fraction_static"] = mfs
    states = obj.get("internal_states")
    if "max_total_num_tokens" not in data and isinstance(states, list) and states and isinstance(states[0], dict):
        mem = states[0].get("memory_usage")
        cap = as_int(mem.get("token_capacity")) if isinstance(mem, dict) else None
        if cap is not None:
            data["max_total_num_tokens"] = cap
    return build("server_config", data)
