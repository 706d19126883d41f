"""Per-request records -> request events.

Sources (sglang-internals 5.1, 5.3):

* ``--log-requests`` text: ``Receive: obj=GenerateReqInput(...)`` and ``Finish: obj=..., out={... 'meta_info': {...}}``;
* ``--log-requests-format json``: ``{"timestamp", "event": "request.received"|"request.finished", "rid", "obj", "out"}``;
* ``--export-metrics-to-file`` lines: ``{"request_parameters": "<json>", **meta_info}``;
* ``--enable-request-time-stats-logging``: ``ReqTimeStats(rid=..., input_len=...): queue_duration=12.34ms, ...``.

A finished record carries the whole life of a request, so it yields ``request_arrived`` (when the arrival time is
known), ``request_first_token`` (when TTFT is known) and ``request_finished``. Their ``event_id`` is
``"<instance>/<rid>:arrived|first_token|finished"`` whatever the source, so the same request read from two feeds
de-duplicates. Derived arrivals have ``ts`` in the past: a live consumer must treat them as late.
"""
from __future__ import annotations

import ast
import json
import re
from typing import Any

from streams.adapters.base import LineResult, ParseContext, as_int, build, finite
from streams.adapters.timestamps import parse_iso

_RID = re.compile(r"\brid='((?:[^'\\]|\\.)*)'")
_INPUT_IDS = re.compile(r"\binput_ids=\[([\d,\s]*)\]")
_MAX_NEW = re.compile(r"'max_new_tokens': (\d+)")
_IGNORE_EOS = re.compile(r"'ignore_eos': (True|False)")
_PRIORITY = re.compile(r"\bpriority=(-?\d+)")
_RTS_KV = re.compile(r"(\w+)=([^,()]+)")


def _ids(ctx: ParseContext, rid: str, what: str) -> str:
    return f"{ctx.instance_id}/{rid}:{what}"


def _balanced(text: str, start: int) -> str | None:
    """The ``{...}`` block that opens at ``text[start]``, honouring quoted strings; None if unbalanced."""
    depth = 0
    quote = ""
    i = start
    n = len(text)
    while i < n:
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in ("'", '"'):
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start:i + 1]
        i += 1
    return None


def from_meta_info(
    meta: dict[str, Any],
    ctx: ParseContext,
    *,
    params: dict[str, Any] | None = None,
    finish_ts: float | None = None,
) -> LineResult:
    """``meta_info`` of a finished request (+ its request parameters) -> arrived / first_token / finished events."""
    rid = meta.get("id") or (params or {}).get("rid")
    if not isinstance(rid, str) or not rid:
        return "request_finished: meta_info without id"
    prompt = as_int(meta.get("prompt_tokens"))
    output = as_int(meta.get("completion_tokens"))
    if prompt is None or output is None:
        return "request_finished: meta_info without prompt_tokens/completion_tokens"
    e2e = finite(meta.get("e2e_latency"))
    received = finite(meta.get("request_received_ts"))
    finished = finite(meta.get("request_finished_ts")) or finish_ts
    if finished is None and received is not None and e2e is not None:
        finished = received + e2e
    if finished is None:
        finished = ctx.ts
    arrival = received if received is not None else (finished - e2e if e2e is not None else None)
    ttft = finite(meta.get("first_token_latency"))
    fr = meta.get("finish_reason")
    reason = fr.get("type") if isinstance(fr, dict) else (fr if isinstance(fr, str) else None)
    common = {"instance_id": ctx.instance_id, "source": ctx.source or None}
    out: list[Any] = []
    sp = (params or {}).get("sampling_params") or {}
    if not isinstance(sp, dict):
        sp = {}
    if arrival is not None and ctx.scratch.get("derive_arrivals", True):
        arrived = {
            "kind": "request_arrived", "ts": arrival, "request_id": rid, "prompt_tokens": prompt,
            "event_id": _ids(ctx, rid, "arrived"), "output_tokens_hint": output, **common,
        }
        mnt = as_int(sp.get("max_new_tokens"))
        if mnt is not None:
            arrived["max_new_tokens"] = mnt
        if isinstance(sp.get("ignore_eos"), bool):
            arrived["ignore_eos"] = sp["ignore_eos"]
        pr = as_int((params or {}).get("priority"))
        if pr is not None:
            arrived["priority"] = pr
        res = build("request_arrived", arrived)
        if isinstance(res, str):
            return res
        out.extend(res or [])
        if ttft is not None:
            res = build("request_first_token", {
                "kind": "request_first_token", "ts": arrival + ttft, "request_id": rid, "ttft_s": ttft,
                "event_id": _ids(ctx, rid, "first_token"), **common,
            })
            if isinstance(res, str):
                return res
            out.extend(res or [])
    data: dict[str, Any] = {
        "kind": "request_finished", "ts": finished, "request_id": rid, "prompt_tokens": prompt,
        "output_tokens": output, "event_id": _ids(ctx, rid, "finished"), **common,
    }
    for field, key in (("cached_tokens", "cached_tokens"), ("num_retractions", "num_retractions")):
        v = as_int(meta.get(key))
        if v is not None:
            data[field] = v
    if ttft is not None:
        data["ttft_s"] = ttft
    if e2e is not None:
        data["e2e_s"] = e2e
    q = finite(meta.get("queue_time"))
    if q is not None:
        data["queue_time_s"] = q
    if arrival is not None:
        data["arrival_ts"] = arrival
    if reason is not None:
        data["finish_reason"] = str(reason)
    res = build("request_finished", data)
    if isinstance(res, str):
        return res
    out.extend(res or [])
    return out


def _arrived_from_obj(obj: dict[str, Any], rid: str | None, ts: float, ctx: ParseContext) -> LineResult:
    """A received request object (JSON form): needs ``input_ids`` to know the prompt length."""
    rid = rid or obj.get("rid")
    ids = obj.get("input_ids")
    if not isinstance(rid, str) or not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        return None  # metadata-only level: no prompt length to simulate with; nothing to emit
    sp_raw = obj.get("sampling_params")
    sp: dict[str, Any] = sp_raw if isinstance(sp_raw, dict) else {}
    data: dict[str, Any] = {
        "kind": "request_arrived", "ts": ts, "request_id": rid, "prompt_tokens": len(ids), "token_ids": ids,
        "instance_id": ctx.instance_id, "source": ctx.source or None, "event_id": _ids(ctx, rid, "arrived"),
    }
    mnt = as_int(sp.get("max_new_tokens"))
    if mnt is not None:
        data["max_new_tokens"] = mnt
    if isinstance(sp.get("ignore_eos"), bool):
        data["ignore_eos"] = sp["ignore_eos"]
    pr = as_int(obj.get("priority"))
    if pr is not None:
        data["priority"] = pr
    return build("request_arrived", data)


def from_json(obj: dict[str, Any], ctx: ParseContext) -> LineResult:
    """A JSON request record: ``--log-requests-format json`` or an ``--export-metrics-to-file`` line."""
    event = obj.get("event")
    if isinstance(event, str):
        ts = parse_iso(obj["timestamp"]) if isinstance(obj.get("timestamp"), str) else None
        if ts is not None:
            ctx.last_ts = ts
        if event == "request.finished":
            out = obj.get("out")
            meta = out.get("meta_info") if isinstance(out, dict) else None
            if not isinstance(meta, dict):
                return "request.finished: no out.meta_info"
            o = obj.get("obj")
            req: dict[str, Any] = o if isinstance(o, dict) else {}
            if "id" not in meta and isinstance(obj.get("rid"), str):
                meta = {**meta, "id": obj["rid"]}
            return from_meta_info(meta, ctx, params=req, finish_ts=ts)
        if event == "request.received":
            o = obj.get("obj")
            if not isinstance(o, dict):
                return "request.received: no obj"
            return _arrived_from_obj(o, obj.get("rid") if isinstance(obj.get("rid"), str) else None, ctx.ts, ctx)
        return None  # scheduler.status, request.received.openai, ...: nothing to simulate
    if "request_parameters" in obj:
        raw = obj.get("request_parameters")
        params: Any = {}
        if isinstance(raw, str):
            try:
                params = json.loads(raw)
            except ValueError:
                params = {}
        elif isinstance(raw, dict):
            params = raw
        return from_meta_info(obj, ctx, params=params if isinstance(params, dict) else {})
    return None


def _sampling_params(text: str) -> dict[str, Any]:
    """``max_new_tokens`` and ``ignore_eos`` found in the repr of a request object (absent ones left out)."""
    sp: dict[str, Any] = {}
    mm = _MAX_NEW.search(text)
    if mm:
        sp["max_new_tokens"] = int(mm.group(1))
    ie = _IGNORE_EOS.search(text)
    if ie:
        sp["ignore_eos"] = ie.group(1) == "True"
    return sp


def _receive_text(msg: str, ctx: ParseContext) -> LineResult:
    m = _RID.search(msg)
    ids_m = _INPUT_IDS.search(msg)
    if m is None or ids_m is None:
        return None  # metadata-only logging: no prompt length
    try:
        ids = [int(x) for x in ids_m.group(1).replace(" ", "").split(",") if x]
    except ValueError:
        return "request_arrived: unreadable input_ids"
    obj: dict[str, Any] = {"rid": m.group(1), "input_ids": ids, "sampling_params": _sampling_params(msg)}
    pr = _PRIORITY.search(msg)
    if pr:
        obj["priority"] = int(pr.group(1))
    return _arrived_from_obj(obj, m.group(1), ctx.ts, ctx)


def _finish_text(msg: str, ctx: ParseContext) -> LineResult:
    key = "'meta_info': {"
    i = msg.find(key)
    if i < 0:
        return "Finish line without meta_info"
    block = _balanced(msg, i + len(key) - 1)
    if block is None:
        return "Finish line: meta_info is cut off"
    try:
        meta = ast.literal_eval(block)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return "Finish line: meta_info is not a Python literal"
    if not isinstance(meta, dict):
        return "Finish line: meta_info is not a dict"
    obj_part = msg[:i]
    m = _RID.search(obj_part)
    if m and "id" not in meta:
        meta["id"] = m.group(1)
    params: dict[str, Any] = {"sampling_params": _sampling_params(obj_part)}
    return from_meta_info(meta, ctx, params=params, finish_ts=ctx.last_ts)


def _req_time_stats(msg: str, ctx: ParseContext) -> LineResult:
    """``ReqTimeStats(rid=..., input_len=..., cached_input_len=..., output_len=..., attempts=..., type=...):
    queue_duration=12.34ms, forward_duration=567.89ms, entry_time=1730000000.123``."""
    kv = dict(_RTS_KV.findall(msg))
    rid = kv.get("rid", "").strip().strip("'\"")
    if not rid:
        return "ReqTimeStats: missing rid"

    def ms(name: str) -> float | None:
        v = kv.get(name)
        if v is None:
            return None
        v = v.strip()
        scale = 1e-3 if v.endswith("ms") else 1.0
        f = finite(v.removesuffix("ms").removesuffix("s"))
        return None if f is None else f * scale

    prompt = as_int(kv.get("input_len", "").strip())
    output = as_int(kv.get("output_len", "").strip())
    if prompt is None or output is None:
        return "ReqTimeStats: missing input_len/output_len"
    entry = finite(kv.get("entry_time", "").strip())
    queue = ms("queue_duration")
    fwd = ms("forward_duration")
    finish = ctx.ts
    if entry is not None and fwd is not None:
        finish = entry + (queue or 0.0) + fwd
    data: dict[str, Any] = {
        "kind": "request_finished", "ts": finish, "request_id": rid, "prompt_tokens": prompt,
        "output_tokens": output, "instance_id": ctx.instance_id, "source": ctx.source or None,
        "event_id": _ids(ctx, rid, "finished"),
    }
    cached = as_int(kv.get("cached_input_len", "").strip())
    if cached is not None:
        data["cached_tokens"] = cached
    if queue is not None:
        data["queue_time_s"] = queue
    if fwd is not None:
        data["forward_s"] = fwd
    if entry is not None:
        data["arrival_ts"] = entry
    return build("request_finished", data)


def parse_message(msg: str, ctx: ParseContext) -> LineResult:
    """A log message that may be a per-request record (called by ``sglang_log`` after the header)."""
    if msg.startswith("ReqTimeStats("):
        return _req_time_stats(msg, ctx)
    if msg.startswith("Receive: obj="):
        return _receive_text(msg, ctx)
    if msg.startswith("Finish: obj="):
        return _finish_text(msg, ctx)
    if msg.startswith("{"):
        try:
            obj = json.loads(msg)
        except ValueError:
            return None
        if isinstance(obj, dict) and ("event" in obj or "request_parameters" in obj):
            return from_json(obj, ctx)
        return None
    return None
