"""OTLP stage spans → ``forward_pass`` and ``retraction`` events (sglang-internals 5.4, 8.2).

What SGLang's ``--enable-trace`` records per request (``observability/req_time_stats.py``, ``trace.py``):

* a ``schedule`` span event (level 3) each time the request is put into a batch, with attributes ``bid`` (random
  8-hex batch id, the same for every request of the batch), ``batch_size`` (requests in the batch) and
  ``forward_mode`` (``decode`` / ``prefill`` / ``prebuilt``). Events are cached and attached to the next stage span
  the request closes whose interval contains the event time;
* ``decode_loop`` spans (level 3), one per decode step: from the previous step's end (the first: from the
  schedule time) to the time the step's result was processed; attribute ``decode_ct``;
* ``prefill_forward`` (level 1): forward entry → prefill finished; with chunked prefill it contains one
  ``chunked_prefill`` span (level 3) per chunk, which take the ``schedule`` events instead;
* a ``retract`` span event (level 1) when the request is retracted (preempted back to the queue).

Mapping (one ``forward_pass`` per ``bid``, however many of its requests' spans carry it):

* ``decode_loop`` with a ``decode`` schedule event → ``forward_pass`` ``forward_mode="decode"``, ``batch_size`` =
  ``num_decode_reqs`` = ``batch_size``, ``num_extend_tokens`` = 0, ``sum_kv_tokens`` unknown (null),
  ``duration_s`` = span end − span start (step-to-step time: GPU forward plus scheduling; with overlap scheduling
  the event in a step's span is the *next* step's, so the shape is off by one step, which only matters when
  requests join or leave), ``ts`` = span end.
* ``prefill_forward`` with a ``prefill`` schedule event (an unchunked prefill) and ``decode_loop`` spans with a
  ``prefill`` event (the decode requests of a mixed batch) are collected per ``bid`` until ``batch_size`` members
  were seen and the root span of every prefill member gave its token counts (same record or a later one of the
  same stream): then ``num_extend_tokens`` = Σ (prompt − cached), ``num_cached_tokens`` = Σ cached,
  ``forward_mode`` = ``mixed`` when decode members were present, else ``prefill``; ``sum_kv_tokens`` = Σ prompt
  for pure prefills (null for mixed: decode lengths are unknown); ``duration_s`` = span end − schedule time.
* Prefill batches that include a ``chunked_prefill`` span (per-chunk token counts are not traced), a retracted
  request (its re-prefill length is not traced) or a member without ``gen_ai.usage.cached_tokens`` give nothing,
  as do ``prebuilt`` (PD decode) events: a forward pass with unknown new tokens would be read as a decode step.
* ``retract`` event → ``retraction`` with ``num_retracted`` = 1, ``request_id`` = the rid when the request's root
  span was seen (else null), ``ts`` = event time.

Event ids: ``otel:<instance>:<bid>`` (forward passes) and ``otel:<instance>:<trace id>:<event ns>:retract``, so
re-reads de-duplicate. State (pending batches, request token counts, batch ids already emitted) lives in the
parse context's scratch, bounded: at most ``MAX_PENDING`` pending batches and ``MAX_REMEMBERED`` requests / ids.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streams.adapters.base import LineResult, ParseContext, as_int, build

#: stage span name -> the kind of step it times
STEP_SPANS = {"decode_loop": "decode", "prefill_forward": "prefill", "chunked_prefill": "chunk"}
MAX_PENDING = 10_000
MAX_REMEMBERED = 50_000
_SCRATCH_KEY = "otlp_steps"


def _attrs(items: Any) -> dict[str, Any]:
    from streams.adapters.otlp import attributes  # noqa: PLC0415 - otlp imports this module lazily too

    return attributes(items)


def _bounded_put(d: dict[Any, Any], key: Any, value: Any, limit: int) -> None:
    d[key] = value
    while len(d) > limit:
        del d[next(iter(d))]  # dicts keep insertion order: drop the oldest


@dataclass
class _Batch:
    """A prefill/mixed batch whose members are still being collected."""

    inst: str
    bid: str
    batch_size: int
    sched_ns: int
    end_ns: int
    prefill: set[str] = field(default_factory=set)  # trace ids of prefill members
    decode: set[str] = field(default_factory=set)  # trace ids of decode members (mixed batches)


@dataclass
class StepState:
    """Per-stream memory of the step mapping (kept in ``ParseContext.scratch``)."""

    requests: dict[str, tuple[str, int, int | None]] = field(default_factory=dict)  # trace -> (rid, prompt, cached)
    retracted: dict[str, None] = field(default_factory=dict)
    emitted: dict[str, None] = field(default_factory=dict)  # "<inst>/<bid>" already turned into an event
    pending: dict[str, _Batch] = field(default_factory=dict)
    waiting: dict[str, set[str]] = field(default_factory=dict)  # trace -> pending batch keys it is a member of
    dirty: set[str] = field(default_factory=set)  # pending batch keys that changed since the last resolve()

    @classmethod
    def of(cls, ctx: ParseContext) -> StepState:
        st = ctx.scratch.get(_SCRATCH_KEY)
        if not isinstance(st, StepState):
            st = ctx.scratch[_SCRATCH_KEY] = cls()
        return st

    def remember_request(self, trace: str | None, attrs: dict[str, Any]) -> None:
        """Token counts of a finished request's root span, for the prefill batches it took part in."""
        rid = attrs.get("rid") or attrs.get("gen_ai.request.id")
        prompt = as_int(attrs.get("gen_ai.usage.prompt_tokens"))
        if trace is None or not isinstance(rid, str) or prompt is None:
            return
        _bounded_put(self.requests, trace, (rid, prompt, as_int(attrs.get("gen_ai.usage.cached_tokens"))),
                     MAX_REMEMBERED)
        self.dirty.update(self.waiting.pop(trace, ()))

    def add_member(self, b: _Batch, key: str, trace: str, decode: bool) -> None:
        (b.decode if decode else b.prefill).add(trace)
        if not decode:
            self.waiting.setdefault(trace, set()).add(key)
            if len(self.waiting) > MAX_REMEMBERED:
                del self.waiting[next(iter(self.waiting))]
        self.dirty.add(key)

    def drop(self, key: str) -> None:
        """Forget a pending batch for good (emitted or never emittable): later members of it are ignored."""
        b = self.pending.pop(key, None)
        _bounded_put(self.emitted, key, None, MAX_REMEMBERED)
        for t in b.prefill if b is not None else ():
            keys = self.waiting.get(t)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.waiting[t]

    def resolve(self, source: str) -> list[Any]:
        """Forward passes of the pending batches that are now complete."""
        out: list[Any] = []
        dirty, self.dirty = self.dirty, set()
        for key in dirty:
            b = self.pending.get(key)
            if b is None or len(b.prefill) + len(b.decode) < b.batch_size:
                continue
            if any(t in self.retracted for t in b.prefill):
                self.drop(key)  # its re-prefill length is not traced
                continue
            known = [self.requests.get(t) for t in b.prefill]
            if any(k is None for k in known):
                continue  # a root span is still to come
            if any(k[2] is None or k[2] > k[1] for k in known):  # type: ignore[index]
                self.drop(key)  # a member without usable cached_tokens
                continue
            prompt = sum(k[1] for k in known)  # type: ignore[index]
            cached = sum(k[2] for k in known)  # type: ignore[index,misc]
            data = {"kind": "forward_pass", "instance_id": b.inst, "ts": b.end_ns / 1e9, "source": source or None,
                    "event_id": f"otel:{b.inst}:{b.bid}", "forward_mode": "mixed" if b.decode else "prefill",
                    "batch_size": b.batch_size, "num_extend_tokens": prompt - cached, "num_cached_tokens": cached,
                    "sum_kv_tokens": None if b.decode else prompt, "duration_s": max(0.0, b.end_ns - b.sched_ns) / 1e9,
                    "num_prefill_reqs": len(b.prefill), "num_decode_reqs": len(b.decode)}
            res = build("forward_pass", {k: v for k, v in data.items() if v is not None})
            self.drop(key)
            if isinstance(res, list):
                out.extend(res)
        return out


def _ns(v: Any) -> int | None:
    """A ``*UnixNano`` value (int, or a decimal string in OTLP JSON) as int ns, exactly: a float holds ns since
    1970 only to ~256 ns, which would show in millisecond step durations."""
    if isinstance(v, str) and v.isascii() and v.isdigit():
        return int(v)
    return as_int(v)


def _events(span: dict[str, Any], name: str) -> list[tuple[int, dict[str, Any]]]:
    """``(time ns, attributes)`` of the span's events called ``name``, in time order."""
    evs = span.get("events")
    out = []
    for e in evs if isinstance(evs, list) else []:
        if isinstance(e, dict) and e.get("name") == name:
            t = _ns(e.get("timeUnixNano"))
            if t is not None:
                out.append((t, _attrs(e.get("attributes"))))
    return sorted(out, key=lambda x: x[0])


def span_steps(span: dict[str, Any], trace: str | None, inst: str, source: str, st: StepState) -> LineResult:
    """Events from one span's ``retract`` / ``schedule`` events (see the module docstring); ``None`` when it has
    none, a reason when a step span's schedule event is malformed."""
    out: list[Any] = []
    for t_ns, _ in _events(span, "retract"):
        if trace is not None:
            _bounded_put(st.retracted, trace, None, MAX_REMEMBERED)
        req = st.requests.get(trace) if trace is not None else None
        data = {"kind": "retraction", "instance_id": inst, "ts": t_ns / 1e9, "source": source or None,
                "num_retracted": 1, "event_id": f"otel:{inst}:{trace or '-'}:{int(t_ns)}:retract"}
        if req is not None:
            data["request_id"] = req[0]
        res = build("retraction", {k: v for k, v in data.items() if v is not None})
        if isinstance(res, str):
            return res
        out.extend(res or [])
    name = span.get("name")
    step = STEP_SPANS.get(name) if isinstance(name, str) else None
    sched = _events(span, "schedule") if step else []
    if not sched:
        return out or None
    sched_ns, a = sched[-1]
    bid, bs, mode = a.get("bid"), as_int(a.get("batch_size")), a.get("forward_mode")
    start, end = _ns(span.get("startTimeUnixNano")), _ns(span.get("endTimeUnixNano"))
    if not isinstance(bid, str) or not bid or bs is None or bs < 1:
        return out or f"otlp: {span.get('name')} schedule event needs a bid and a batch_size >= 1"
    if start is None or end is None or end < start:
        return out or f"otlp: {span.get('name')} span needs start <= end times"
    key = f"{inst}/{bid}"
    if key in st.emitted or mode not in ("decode", "prefill"):
        return out or None  # another member already gave this batch; prebuilt (PD) forwards are not timed
    if mode == "decode":
        _bounded_put(st.emitted, key, None, MAX_REMEMBERED)
        res = build("forward_pass", {"kind": "forward_pass", "instance_id": inst, "ts": end / 1e9,
                                     "source": source or None, "event_id": f"otel:{inst}:{bid}",
                                     "forward_mode": "decode", "batch_size": bs, "num_extend_tokens": 0,
                                     "num_decode_reqs": bs, "num_prefill_reqs": 0,
                                     "duration_s": (end - start) / 1e9})
        if isinstance(res, str):
            return res
        return out + (res or [])
    if step == "chunk":
        st.drop(key)  # per-chunk token counts are not traced
        return out or None
    b = st.pending.get(key)
    if b is None:
        b = _Batch(inst, bid, bs, sched_ns if start <= sched_ns <= end else start, end)
        _bounded_put(st.pending, key, b, MAX_PENDING)
    b.end_ns = max(b.end_ns, end)
    if trace is not None:
        st.add_member(b, key, trace, decode=step == "decode")
    return out or None
