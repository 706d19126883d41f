"""SGLang server log lines -> events, for every era from 0.1.x to 0.5.23.

Handles, in one pass over a line:

* prefixes of every era and collector (``streams.adapters.log_prefix``); CRLF and ANSI colour codes are stripped;
* ``Prefill batch`` (``.``/``,``/`` [iter]``, 0.1's ``Prefil batch``) and ``Decode batch`` lines, parsed as
  ``key: value`` lists, so new or reordered fields in a future release do not break parsing;
* retraction lines (0.4 ``Decode out of memory happened.`` and 0.5 ``KV cache pool is full. Retract requests.``);
* startup lines: ``max_total_num_tokens=...``, ``KV Cache is allocated...``, ``server_args=ServerArgs(...)``;
* per-request lines (``ReqTimeStats(...)``, ``--log-requests`` ``Receive:``/``Finish:`` text and JSON) are
  delegated to ``streams.adapters.request_log``.

Anything else (tracebacks, uvicorn access lines, warnings, other programs) is skipped quietly. A line whose message
*starts* like one of the above but cannot be parsed is dead-lettered with the reason.
"""
from __future__ import annotations

import re
import typing
from typing import Any

import annotated_types
import pydantic

try:
    import cython  # compiled (setup.py NATIVE_MODULES, with sglang_log.pxd): Cython's directives; interpreted: no-ops
except ImportError:  # pragma: no cover - a machine without Cython runs the .py as it is
    from simcore import _pure_cython as cython

from streams.adapters import request_log
from streams.adapters.base import (_VALIDATORS, LineResult, ParseContext, build, drop_idle_speculative, to_float,
                                   to_int, validation_reason)
from streams.adapters.log_prefix import (_MINUTE_CACHE, _NO_RANKS, _TAGS_CACHE, _fast_header, _minute, _ranks_of,
                                         split_header)
from simcore.events import KIND_TO_CLASS

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# ``Prefill batch``, ``Prefil batch`` (0.1.17 typo), ``Decode batch``, optional `` [iter]``, then ``.`` or ``,``.
_BATCH = re.compile(r"(Prefill?|Decode) batch(?: ?\[(\d+)\])?[.,]? ?")
_SERVER_ARG = re.compile(r"(?<!\w)(\w+)=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^,()\[\]{}]*)")  # (?<!\w): linear on long words


# Batch-line keys -> event field. Unknown keys are ignored on purpose: new SGLang releases add fields (PD, MFU,
# occupancy) and we must keep parsing the ones we know. Values are converted by pydantic (see ``_batch``).
_GRAPH_KEYS = dict.fromkeys(("cuda graph", "cpu graph", "npu graph", "musa graph"), "cuda_graph")
_PREFILL_FIELDS: dict[str, str] = {
    "#new-seq": "new_seqs",
    "#new-token": "new_tokens",
    "#cached-token": "cached_tokens",
    "token usage": "token_usage",
    "full token usage": "token_usage",
    "swa token usage": "swa_token_usage",
    "mamba usage": "mamba_usage",
    "#running-req": "running_reqs",
    "#queue-req": "queue_reqs",
    "#pending-token": "pending_tokens",
    "cache hit rate": "cache_hit_rate",  # a fraction, or a percentage before 0.4.x (see ``_batch``)
    "input throughput (token/s)": "input_throughput_tok_s",
    **_GRAPH_KEYS,
}
_DECODE_FIELDS: dict[str, str] = {
    "#running-req": "running_reqs",
    "#token": "kv_tokens",
    "#full token": "kv_tokens",
    "token usage": "token_usage",
    "full token usage": "token_usage",
    "#swa token": "swa_tokens",
    "swa token usage": "swa_token_usage",
    "accept len": "accept_len",
    "accept rate": "accept_rate",
    "gen throughput (token/s)": "gen_throughput_tok_s",
    "#queue-req": "queue_reqs",
    "#retracted-req": "retracted_reqs",
    **_GRAPH_KEYS,
}
_PREFILL_REQUIRED = ("new_seqs", "new_tokens", "cached_tokens")
_DECODE_REQUIRED = ("running_reqs",)

# server_args names -> server_config fields.
_SERVER_ARGS_MAP = {
    "model_path": "model",
    "served_model_name": "model",
    "tp_size": "tp_size",
    "dp_size": "dp_size",
    "pp_size": "pp_size",
    "ep_size": "ep_size",
    "page_size": "page_size",
    "chunked_prefill_size": "chunked_prefill_size",
    "max_prefill_tokens": "max_prefill_tokens",
    "max_running_requests": "max_running_requests",
    "max_total_tokens": "max_total_num_tokens",
    "context_length": "context_len",
    "schedule_policy": "schedule_policy",
    "mem_fraction_static": "mem_fraction_static",
    "kv_cache_dtype": "kv_cache_dtype",
    "disable_radix_cache": "disable_radix_cache",
    "enable_mixed_chunk": "enable_mixed_chunk",
    "disable_overlap_schedule": "disable_overlap_schedule",
    "enable_dp_attention": "enable_dp_attention",
    "cuda_graph_max_bs": "cuda_graph_max_bs",
    "speculative_algorithm": "speculative_algorithm",
    "speculative_num_steps": "speculative_num_steps",
    "speculative_eagle_topk": "speculative_eagle_topk",
    "speculative_num_draft_tokens": "speculative_num_draft_tokens",
    "speculative_draft_model_path": "speculative_draft_model_path",
}
_STARTUP_INT = {"max_total_num_tokens", "chunked_prefill_size", "max_prefill_tokens", "max_running_requests",
                "context_len"}


def _kv_pairs(body: str) -> dict[str, str]:
    """'#new-seq: 1, token usage: 0.00, PD-decode: pre-allocated usage: 0.1, ' -> {key: value-text}."""
    out: dict[str, str] = {}
    for item in body.split(", "):
        k, sep, v = item.rpartition(": ")
        if not sep:
            continue
        if ": " in k:  # group labels such as "PD-decode: pre-allocated usage"
            k = k.rpartition(": ")[2]
        out[k] = v
    return out


# ``key: value`` items of a batch line. Values are handed to pydantic as text: its (Rust) lax conversion parses
# "7", "0.81", "True" and rejects "x", "nan", negatives with a message naming the field — faster than converting in
# Python, and the same checks as for every other source.
# The key is greedy: it cannot hold a colon, so it ends at the first one either way, and the greedy form (the same
# matches, checked on fuzzed text in tests/streams/adapters/test_sglang_log.py) scans a quarter faster than ``+?``.
_ITEM = re.compile(r"\s*([^,:]+): ([^,]*)")
#: the form of ``_ITEM`` before issue 11's speed work: the reference the test compares with
_ITEM_REFERENCE = re.compile(r"\s*([^,:]+?): ([^,]*)")


# The rank labels retraction and server_config events carry (batch events carry every rank label).
_TP_DP = ("tp_rank", "dp_rank")


def _envelope(ctx: ParseContext, ranks: dict[str, int], rank_keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The fields every event of one log line starts with: time, instance, source, line id, and the rank labels
    of the line's prefix (``rank_keys``: those the event kind has; None: all of them)."""
    ts = ctx.last_ts
    source = ctx.source
    data: dict[str, Any] = {
        "ts": ts if ts is not None else ctx.default_ts,  # ctx.ts
        "instance_id": ctx.instance_id,
        "source": source or None,
        "event_id": f"{source or '-'}:{ctx.line_no}",  # ctx.line_event_id()
    }
    if ranks:
        if rank_keys is None:
            data.update(ranks)
        else:
            data.update((k, ranks[k]) for k in rank_keys if k in ranks)
    return data


#: (kind, keys) -> (form regex, plan) of the batch-line forms learned so far (``_shape``), at most ``MAX_SHAPES``
_SHAPES: dict[tuple[str, tuple[str, ...]], tuple[re.Pattern[str], tuple[tuple[str, int], ...], Any]] = {}
MAX_SHAPES = 256
_STARTS_WITH_SPACE = re.compile(r"\s")  # what ``\s`` matches, as the form's ``\s*`` reads it


def _shape(kind: str, items: list[tuple[str, str]], fields: dict[str, str]
           ) -> tuple[re.Pattern[str], tuple[tuple[str, int], ...], Any] | None:
    """The form of a batch line with these ``_ITEM`` items: a regex whose ``fullmatch`` reads the values of every
    line with the same keys in one match, the plan (field, group) of the keys ``fields`` knows, in line order, and
    the fast path's plan of the form (``_fast_plan``; None where the validator reads every such line).

    Why a line the form matches gives exactly ``_ITEM.findall``'s items: the form is ``\\s*K1: ([^,]*)``, then
    ``,\\s*Ki: ([^,]*)`` for each further key, then an optional ``,\\s*``, each key written literally. No key holds
    ``,`` or ``:`` (``_ITEM``'s key class) nor starts with whitespace (checked here). So on such a line ``findall``
    reads, at each key's start, the same greedy ``\\s*`` (the next character is the key's first, not whitespace), a
    key running exactly to the ``:`` after it, ``: ``, and a value running to the next comma, where the form's group
    ends too (its next character is a comma); the next search fails at that comma and starts over after it. After
    the last value, a comma and whitespace alone give no item (a key needs ``: `` after it). The keys are those of
    the line it was learned from; at most ``MAX_SHAPES`` forms per process, so hostile lines cannot grow it
    without bound (beyond it, lines take ``findall``: as correct, only slower; a flood of distinct key sets can use
    the cap up for good). tests/streams/adapters/test_fast_paths.py compares both on real and fuzzed lines."""
    if not items:
        return None
    keys = tuple(k for k, _ in items)
    got = _SHAPES.get((kind, keys))
    if got is not None:
        return got
    if len(_SHAPES) >= MAX_SHAPES or any(_STARTS_WITH_SPACE.match(k) for k in keys):
        return None
    form = r"\s*" + r",\s*".join(re.escape(k) + ": ([^,]*)" for k in keys) + r"(?:,\s*)?"
    plan = tuple((fields[k], i) for i, k in enumerate(keys) if k in fields)
    got = _SHAPES[(kind, keys)] = (re.compile(form), plan, _fast_plan(kind, keys, fields))
    return got


# ---------------------------------------------------------------------------------------------------------------
# Batch events built without pydantic's validation pass, every bound still checked (issue 11, speed).
#
# pydantic's validator is a third of a batch line's decoding. For the values a batch line's learned form
# (``_shape``) reads, this builds the same event the validator would: the same field values (the same Python types),
# the same ``model_fields_set``, ``__dict__`` in the schema's order. It accepts a value only in the plainest
# lexical form, where pydantic's lax conversion is known to give exactly this value: ASCII digits for an int (at most
# 18), ASCII digits with an optional ``.`` and digits for a float (at most 15 digits: the mantissa is below 2**53
# and its power of ten exact, so one IEEE division gives the correctly rounded value, which is what ``float()`` and
# pydantic give), ``True`` / ``False`` for a bool; then the field's own bounds, read from the schema's ``Ge`` /
# ``Le`` / ``MaxLen`` at import. Anything else — another form, a bound crossed, a non-ASCII text, a rank key the
# class lacks — returns None and the line goes through the validator as before, so every value the schema refuses is
# refused with the validator's own reason, and nothing the fast path accepts is refused by the validator.
# tests/streams/adapters/test_batch_events.py checks both on every real log line and on seeded mutated lines.

_RULE_INT, _RULE_FLOAT, _RULE_BOOL, _RULE_PERCENT = 0, 1, 2, 3  # how a value's text becomes the field's value


def _bounds(metadata: list[Any]) -> tuple[Any, Any] | None:
    """(lo, hi) of a field's ``Ge`` and ``Le`` (each or both may be missing: then ±inf); None when it has any other
    constraint (the fast path then never builds that field)."""
    lo: Any = -float("inf")
    hi: Any = float("inf")
    for m in metadata:
        if isinstance(m, annotated_types.Ge):
            lo = m.ge
        elif isinstance(m, annotated_types.Le):
            hi = m.le
        else:
            return None
    return lo, hi


def _annotation_and_metadata(cls: type, name: str) -> tuple[Any, list]:
    """A field's type and constraint metadata, an ``Optional[X]`` unwrapped to X with X's own metadata."""
    info = cls.model_fields[name]  # type: ignore[attr-defined]
    ann, meta = info.annotation, list(info.metadata)
    args = typing.get_args(ann)
    if args and type(None) in args and len(args) == 2:  # Optional[X]: X, with X's own metadata
        (ann,) = [a for a in args if a is not type(None)]
        if typing.get_origin(ann) is typing.Annotated:
            inner = typing.get_args(ann)
            ann = inner[0]
            for extra in inner[1:]:
                meta += list(getattr(extra, "metadata", [extra]))
    return ann, meta


def _field_rule(cls: type, name: str) -> tuple[int, Any, Any] | None:
    """(rule, lo, hi) of one field of an event class: ``int``, ``float`` or ``bool``, optional or not, with only
    ``Ge`` / ``Le`` bounds; None for any other field type or constraint."""
    ann, meta = _annotation_and_metadata(cls, name)
    if ann is bool:
        return (_RULE_BOOL, None, None) if not meta else None
    if ann not in (int, float):
        return None
    b = _bounds(meta)
    if b is None:
        return None
    return (_RULE_INT if ann is int else _RULE_FLOAT), b[0], b[1]


def _text_limit(cls: type, name: str) -> int | None:
    """The ``MaxLen`` of a (possibly optional) text field; None when it has another form or constraint."""
    ann, meta = _annotation_and_metadata(cls, name)
    if ann is not str or len(meta) != 1 or not isinstance(meta[0], annotated_types.MaxLen):
        return None
    return int(meta[0].max_length)


class _FastClass:
    """What the fast path needs of one batch event class: its field defaults in schema order, the bounds of the
    envelope (``ts``, ``instance_id``, ``source``, ``event_id``), of the rank labels and ``forward_iter`` (a C struct
    when compiled: sglang_log.pxd)."""

    def __init__(self, cls: type) -> None:
        fields = cls.model_fields  # type: ignore[attr-defined]
        self.cls = cls
        self.template = {n: (None if f.is_required() else f.get_default(call_default_factory=True))
                         for n, f in fields.items()}
        ts = _field_rule(cls, "ts")
        iters = _field_rule(cls, "forward_iter")
        self.id_max, self.source_max = _text_limit(cls, "instance_id"), _text_limit(cls, "source")
        self.event_id_max = _text_limit(cls, "event_id")
        if (ts is None or ts[0] != _RULE_FLOAT or iters is None or iters[0] != _RULE_INT or iters[1] != 0
                or None in (self.id_max, self.source_max, self.event_id_max)):
            raise TypeError(f"{cls.__name__}: the batch fast path does not know this schema")
        self.ts_lo, self.ts_hi = float(ts[1]), float(ts[2])
        self.iter_hi = min(iters[2], 10**18 - 1)  # at most 18 digits are read here; longer ones go to pydantic
        self.ranks = {}
        for n in fields:
            if n.endswith("_rank"):
                r = _field_rule(cls, n)
                if r is None or r[0] != _RULE_INT:
                    raise TypeError(f"{cls.__name__}.{n}: the batch fast path does not know this field")
                self.ranks[n] = (r[1], r[2])


class _Field:
    """One field of a fast plan: the event field, the key's index in the line's form, how its text is read
    (``_RULE_*``) and its bounds (``lo`` / ``hi`` for floats, ``int_hi`` for ints: their lower bound is 0)."""

    def __init__(self, name: str, group: int, rule: int, lo: float, hi: float, int_hi: int) -> None:
        self.name, self.group, self.rule, self.lo, self.hi, self.int_hi = name, group, rule, lo, hi, int_hi


def _fast_plan(kind: str, keys: tuple[str, ...], fields: dict[str, str]) -> tuple[Any, ...] | None:
    """The fast path's plan of one learned form: (class info, the fields the line sets, in line order with each
    field's first key only, as ``_batch`` keeps the first, as ``_Field``s), the fields it sets, the form's keys; None
    when a field has
    no rule here or a required field is missing (then the validator and ``_batch`` give their reasons)."""
    info = _FAST_CLASSES.get(kind)
    if info is None:
        return None
    entries = []
    seen: set[str] = set()
    for i, k in enumerate(keys):
        f = fields.get(k)
        if f is None or f in seen:
            continue
        seen.add(f)
        if f == "cache_hit_rate":
            r = _field_rule(info.cls, f)
            if r is None or r[0] != _RULE_FLOAT:
                return None
            entries.append(_Field(f, i, _RULE_PERCENT, float(r[1]), float(r[2]), 0))
            continue
        r = _field_rule(info.cls, f)
        if r is None:
            return None
        lo, hi = r[1], r[2]
        if r[0] == _RULE_INT:
            if lo > 0:  # the digits read here are >= 0; another lower bound is the validator's to check
                return None
            entries.append(_Field(f, i, r[0], 0.0, 0.0, min(hi, 10**18 - 1)))
        elif r[0] == _RULE_FLOAT:
            entries.append(_Field(f, i, r[0], float(lo), float(hi), 0))
        else:
            entries.append(_Field(f, i, r[0], 0.0, 0.0, 0))
    required = _PREFILL_REQUIRED if kind == "prefill_batch" else _DECODE_REQUIRED
    if any(f not in seen for f in required):
        return None
    return info, tuple(entries), frozenset(("ts", "instance_id", "source", "event_id", *seen)), keys


def _int_span(s: str, a: int, b: int) -> int:
    """The value of ``s[a:b]`` when it is 1 to 18 ASCII digits, else -1 (what ``int()`` and pydantic give for that
    form)."""
    if b <= a or b - a > 18:
        return -1
    v = 0
    for i in range(a, b):
        c = _char(s, i)
        if c < "0" or c > "9":
            return -1
        v = v * 10 + (ord(c) - 48)
    return v


def _dec_span(s: str, a: int, b: int) -> float:
    """The value of ``s[a:b]`` when it is ASCII digits with at most one ``.`` between them, at most 15 digits in
    all, else -1.0: ``float()`` and pydantic's float of that text (the digits as an integer below 2**53, divided by
    an exact power of ten: one correctly rounded IEEE division, as ``float()`` rounds)."""
    if b <= a or b - a > 16:
        return -1.0
    m = 0
    digits = 0
    point = -1
    for i in range(a, b):
        c = _char(s, i)
        if c >= "0" and c <= "9":
            m = m * 10 + (ord(c) - 48)
            digits += 1
        elif c == "." and point < 0 and i > a and i < b - 1:
            point = i
        else:
            return -1.0
    if digits > 15:
        return -1.0
    p = 1.0
    if point >= 0:
        for j in range(b - 1 - point):
            p *= 10.0
    return m / p


if not cython.compiled:  # compiled: C functions (sglang_log.pxd)
    _set_slot = object.__setattr__  # PyObject_GenericSetAttr

    def _ascii(s: str) -> bool:
        return s.isascii()  # PyUnicode_IS_ASCII

    def _new_instance(cls: type) -> Any:
        return cls.__new__(cls)  # the class's tp_new

    def _char(s: str, i: int) -> str:
        return s[i]  # PyUnicode_READ, every index checked below the length first


def _fast_batch(plan: tuple[Any, ...], body: str, ts: Any, iid: Any, source: Any, event_id: str,
                ranks: dict[str, int], it: str | None) -> Any:
    r"""The event ``_batch`` would build (``_VALIDATORS[kind](data)``) for a line whose body its learned form
    (``plan``) reads, or None when the body does not have that form or any value is not in the form or bounds this
    reads (then ``_batch`` reads the line as before and the validator decides; see above).

    The body is read as the form's ``fullmatch`` reads it (``_shape``: ``\s*K1: ([^,]*)``, ``,\s*Ki: ([^,]*)``
    for each further key, an optional ``,\s*``, end), which has one way to match: no key starts with whitespace, so
    each ``\s*`` takes all the whitespace before its key; a value runs to the next comma (a shorter one would leave
    a non-comma where the form needs a comma or the end). ``\s`` is ``str.isspace`` (sre's Unicode whitespace)."""
    info, entries, fields_set, keys = plan
    if ts.__class__ is not float:
        return None
    t = ts
    if not (t >= info.ts_lo and t <= info.ts_hi):
        return None
    if iid.__class__ is not str or len(iid) > info.id_max or not _ascii(iid):
        return None
    if source is not None and (source.__class__ is not str or len(source) > info.source_max or not _ascii(source)):
        return None
    if len(event_id) > info.event_id_max or not _ascii(event_id):
        return None
    d = info.template.copy()
    d["ts"] = ts
    d["instance_id"] = iid
    d["source"] = source
    d["event_id"] = event_id
    n = len(body)
    pos = 0
    ne = len(entries)
    k = 0
    e = entries[0] if ne > 0 else None
    nxt = e.group if ne > 0 else -1
    for gi in range(len(keys)):
        if gi > 0:  # the value before ended at a comma (or at the end: then the form needs more)
            if pos >= n:
                return None
            pos += 1
        while pos < n:
            c = _char(body, pos)
            if not c.isspace():
                break
            pos += 1
        key = keys[gi]
        kl = len(key)
        if pos + kl + 2 > n:  # the key and ": "
            return None
        for j in range(kl):
            if _char(body, pos + j) != _char(key, j):
                return None
        pos += kl
        if _char(body, pos) != ":" or _char(body, pos + 1) != " ":
            return None
        pos += 2
        start = pos
        while pos < n and _char(body, pos) != ",":
            pos += 1
        if gi != nxt:
            continue
        rule = e.rule
        if rule == 0:  # _RULE_INT
            v = _int_span(body, start, pos)
            if v < 0 or v > e.int_hi:
                return None
            d[e.name] = v
        elif rule == 1:  # _RULE_FLOAT
            x = _dec_span(body, start, pos)
            if x < 0.0 or x < e.lo or x > e.hi:
                return None
            d[e.name] = x
        elif rule == 2:  # _RULE_BOOL
            if pos - start == 4 and _char(body, start) == "T" and _char(body, start + 1) == "r" \
                    and _char(body, start + 2) == "u" and _char(body, start + 3) == "e":
                d[e.name] = True
            elif pos - start == 5 and _char(body, start) == "F" and _char(body, start + 1) == "a" \
                    and _char(body, start + 2) == "l" and _char(body, start + 3) == "s" and _char(body, start + 4) == "e":
                d[e.name] = False
            else:
                return None
        else:  # _RULE_PERCENT: cache_hit_rate, a percentage before 0.4.x ("12.50%"), as _batch converts it
            pct = pos > start and _char(body, pos - 1) == "%"
            x = _dec_span(body, start, pos - 1 if pct else pos)
            if x < 0.0:
                return None
            if pct:
                x = x / 100.0
            if x < e.lo or x > e.hi:
                return None
            d[e.name] = x
        k += 1
        if k < ne:
            e = entries[k]
            nxt = e.group
        else:
            nxt = -1
    if pos < n:  # the optional ``,\s*`` at the end, then the end
        pos += 1
        while pos < n:
            c = _char(body, pos)
            if not c.isspace():
                return None
            pos += 1
    fs = set(fields_set)
    if ranks:
        bounds = info.ranks
        for rk, rv in ranks.items():
            b = bounds.get(rk)
            if b is None or rv.__class__ is not int or rv < b[0] or rv > b[1]:
                return None
            d[rk] = rv
            fs.add(rk)
    if it is not None:
        v = _int_span(it, 0, len(it))
        if v < 0 or v > info.iter_hi:
            return None
        d["forward_iter"] = v
        fs.add("forward_iter")
    ev = _new_instance(info.cls)
    _set_slot(ev, "__dict__", d)
    _set_slot(ev, "__pydantic_fields_set__", fs)
    _set_slot(ev, "__pydantic_extra__", None)
    _set_slot(ev, "__pydantic_private__", None)
    return ev


#: model_config keys (and values) under which pydantic's validator only converts and bounds, as the fast path does;
#: any other key (``str_strip_whitespace``, ``strict``, ``str_to_lower`` …) sends every line through the validator
_FAST_MODEL_CONFIG = {"frozen": True, "extra": "forbid", "allow_inf_nan": False}


def _fast_classes() -> dict[str, _FastClass]:
    """The batch kinds the fast path builds, when their classes have no validators, post-init or extras of their
    own and no model_config beyond `_FAST_MODEL_CONFIG` (otherwise pydantic's validator does more than convert and
    bound, and every line goes through it)."""
    out = {}
    for kind in ("prefill_batch", "decode_batch"):
        cls = KIND_TO_CLASS[kind]
        d = cls.__pydantic_decorators__
        if (cls.__pydantic_post_init__ is None and not cls.__pydantic_custom_init__ and not d.validators
                and not d.field_validators and not d.root_validators and not d.model_validators
                and dict(cls.model_config) == _FAST_MODEL_CONFIG):
            out[kind] = _FastClass(cls)
    return out


_FAST_CLASSES = _fast_classes()
#: the fields a batch line's items can set never collide with the envelope's (``_batch`` keeps the first)
assert not (set(_PREFILL_FIELDS.values()) | set(_DECODE_FIELDS.values())) & {
    "ts", "instance_id", "source", "event_id", "forward_iter", "schema_version", "kind", *_FAST_CLASSES[
        "decode_batch"].ranks}


#: A batch line is a few hundred characters; the item regex is quadratic in a long run without ", " or ": ", so a
#: longer body is refused before it is scanned (a 900 KB line took minutes, issue 11).
MAX_BATCH_BODY_CHARS = 8192


def _batch(kind: str, body: str, it: str | None, ranks: dict[str, int], ctx: ParseContext) -> LineResult:
    if len(body) > MAX_BATCH_BODY_CHARS:
        return f"{kind}: line too long ({len(body)} characters after the header, at most {MAX_BATCH_BODY_CHARS})"
    scratch = ctx.scratch
    # the form of this stream's last line of this kind, when one was learned (_shape; scratch key: the kind)
    shape = scratch.get(kind)
    ts, source = ctx.last_ts, ctx.source
    if shape is not None and shape[2] is not None:  # the event without the validator's pass, when every value reads
        ev = _fast_batch(shape[2], body, ts if ts is not None else ctx.default_ts, ctx.instance_id, source or None,
                         f"{source or '-'}:{ctx.line_no}", ranks, it)
        if ev is not None:
            return [ev]
    m = shape[0].fullmatch(body) if shape is not None else None
    prefill = kind == "prefill_batch"
    fields = _PREFILL_FIELDS if prefill else _DECODE_FIELDS
    data: dict[str, Any] = {  # _envelope(ctx, ranks), written out: this runs once per batch line
        "ts": ts if ts is not None else ctx.default_ts,
        "instance_id": ctx.instance_id,
        "source": source or None,
        "event_id": f"{source or '-'}:{ctx.line_no}",
    }
    if ranks:
        data.update(ranks)
    if it is not None:
        data["forward_iter"] = it
    if m is not None:  # the same items _ITEM.findall gives (see _shape), read in one match
        values = m.groups()
        for f, i in shape[1]:
            if f not in data:
                data[f] = values[i]
    else:
        items = _ITEM.findall(body)
        for k, v in items:
            f = fields.get(k)
            if f is not None and f not in data:  # "token usage" after "full token usage": keep the first
                data[f] = v
        shape = _shape(kind, items, fields)
        if shape is not None:
            scratch[kind] = shape
    hit = data.get("cache_hit_rate")
    if hit is not None:  # printed as a percentage ("12.50%") before 0.4.x
        try:
            hit = hit.strip()
            data["cache_hit_rate"] = to_float(hit) / 100.0 if hit.endswith("%") else to_float(hit)
        except ValueError:
            return f"{kind}: cannot read 'cache hit rate' value {hit[:40]!r}"
    for f in _PREFILL_REQUIRED if prefill else _DECODE_REQUIRED:
        if f not in data:
            return f"{kind}: missing {f}"
    try:  # build(kind, data)
        return [_VALIDATORS[kind](data)]
    except pydantic.ValidationError as exc:
        return validation_reason(kind, exc)


def _retraction(msg: str, ranks: dict[str, int], ctx: ParseContext) -> LineResult:
    pairs = _kv_pairs(msg[msg.index("#retracted_reqs"):])
    data = _envelope(ctx, ranks, _TP_DP)
    try:
        if "#retracted_reqs" in pairs:
            data["num_retracted"] = to_int(pairs["#retracted_reqs"])
        if "#new_tokens_gained" in pairs:
            data["new_tokens_gained"] = to_int(pairs["#new_tokens_gained"])
        ratio = pairs.get("#new_token_ratio")
        if ratio is not None:
            old, arrow, new = ratio.partition("->")
            if arrow:
                data["old_new_token_ratio"] = to_float(old)
                data["new_token_ratio"] = to_float(new)
            else:
                data["new_token_ratio"] = to_float(ratio)
    except ValueError as exc:
        return f"retraction: {exc}"
    if "num_retracted" not in data:
        return "retraction: missing #retracted_reqs"
    return build("retraction", data)


def _startup_totals(msg: str, ranks: dict[str, int], ctx: ParseContext) -> LineResult:
    """``max_total_num_tokens=N, chunked_prefill_size=..., ..., available_gpu_mem=6.22 GB`` (any subset)."""
    data = _envelope(ctx, ranks, _TP_DP)
    for item in msg.split(","):
        k, eq, v = item.partition("=")
        k, v = k.strip(), v.strip()
        if not eq:
            continue
        try:
            if k in _STARTUP_INT:
                data[k] = to_int(v)
            elif k == "available_gpu_mem":
                data["available_gpu_mem_gb"] = to_float(v.split()[0])
        except (ValueError, IndexError):
            return f"server_config: cannot read {k!r} value {v[:40]!r}"
    if "max_total_num_tokens" not in data:
        return "server_config: missing max_total_num_tokens"
    return build("server_config", data)


def _kv_allocated(msg: str, ranks: dict[str, int], ctx: ParseContext) -> LineResult:
    """``KV Cache is allocated. [dtype: torch.bfloat16, ]#tokens: N, K size: x GB, V size: y GB``."""
    pairs = _kv_pairs(msg.partition(". ")[2])
    data = _envelope(ctx, ranks, _TP_DP)
    try:
        if "dtype" in pairs:
            data["kv_cache_dtype"] = pairs["dtype"].removeprefix("torch.")
        if "K size" in pairs and "V size" in pairs:
            data["kv_cache_size_gb"] = to_float(pairs["K size"].split()[0]) + to_float(pairs["V size"].split()[0])
        if "#tokens" in pairs:
            to_int(pairs["#tokens"])  # validated, not stored: hybrid models allocate several pools
    except (ValueError, IndexError) as exc:
        return f"server_config: KV Cache line: {exc}"
    if len(data) == len(_envelope(ctx, ranks, _TP_DP)):
        return "server_config: KV Cache line without dtype or sizes"
    return build("server_config", data)


def _server_args(msg: str, ranks: dict[str, int], ctx: ParseContext) -> LineResult:
    data = _envelope(ctx, ranks, _TP_DP)
    for name, raw in _SERVER_ARG.findall(msg):
        field = _SERVER_ARGS_MAP.get(name)
        if field is None:
            continue
        v = raw.strip()
        if v in ("None", ""):
            continue
        if v[:1] in ("'", '"'):
            val: Any = v[1:-1]
        elif v in ("True", "False"):
            val = v == "True"
        else:
            try:
                val = to_int(v)
            except ValueError:
                try:
                    val = to_float(v)
                except ValueError:
                    continue
        if field == "model" and "model" in data and name == "model_path":
            continue
        data[field] = val
    if "model" in data and not isinstance(data["model"], str):
        data["model"] = str(data["model"])
    drop_idle_speculative(data)
    return build("server_config", data)


def parse_message(msg: str, ranks: dict[str, int], ctx: ParseContext) -> LineResult:
    """Dispatch one log message (the text after the header) on its first characters."""
    c = msg[:1]
    if c == "P" or c == "D":
        m = _BATCH.match(msg)
        if m is not None:
            kind = "prefill_batch" if m.group(1).startswith("Prefil") else "decode_batch"
            return _batch(kind, msg[m.end():], m.group(2), ranks, ctx)
        if msg.startswith("Decode out of memory happened") and "#retracted_reqs" in msg:
            return _retraction(msg, ranks, ctx)
        return None
    if c == "K":
        if msg.startswith("KV cache pool is full") and "#retracted_reqs" in msg:
            return _retraction(msg, ranks, ctx)
        if msg.startswith("KV Cache is allocated"):
            return _kv_allocated(msg, ranks, ctx)
        return None
    if c == "m":
        if msg.startswith("max_total_num_tokens="):
            return _startup_totals(msg, ranks, ctx)
        return None
    if c == "s":
        if msg.startswith("server_args=ServerArgs("):
            return _server_args(msg, ranks, ctx)
        return None
    if c == "R" or c == "F" or c == "{":
        return request_log.parse_message(msg, ctx)
    return None


# The commonest line, a batch line with a dated header at column 0, in one match: what ``_fast_header`` then
# ``parse_message`` then ``_BATCH`` read of it, for the forms they accept (milliseconds with a dot or none, rank tags,
# one space after the bracket); anything else takes the general path. The header's digits are ASCII (int() would
# take others, which the general path then reads); the rest is ``_BATCH`` itself.
_BATCH_LINE = re.compile(r"\[([0-9]{4}-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]):([0-9][0-9])(?:\.([0-9]{3}))?"
                         r"((?: [A-Z][A-Z_]*\d+)*)\] ?(Prefill?|Decode) batch(?: ?\[(\d+)\])?[.,]? ?")
_NOT_FAST = object()


def _batch_line_regex(line: str, ctx: ParseContext) -> Any:
    """``_batch_line`` as it was, with ``_BATCH_LINE``'s match (the reference tests/streams/adapters/test_fast_paths.py
    compares the scan below with)."""
    m = _BATCH_LINE.match(line)
    if m is None or m.end(4) >= 120:  # _fast_header looks for the bracket's end within 120 characters
        return _NOT_FAST
    stamp, sec, ms, tags, word, it = m.groups()  # one call for the six groups
    minute = _MINUTE_CACHE.get(stamp) or _minute(stamp)  # the cache's hit, without the call
    if minute is None:
        return _NOT_FAST
    day, hm = minute
    ctx.day_epoch = day
    ctx.last_ts = day + (float(hm + int(sec)) + (int(ms) / 1000 if ms is not None else 0.0))
    ranks = (_TAGS_CACHE.get(tags) or _ranks_of(tags)) if tags else _NO_RANKS
    kind = "prefill_batch" if word != "Decode" else "decode_batch"
    return _batch(kind, line[m.end():], it, ranks, ctx)


def _ascii_digits(line: str, a: int, b: int) -> bool:
    """Whether ``line[a:b]`` is all ASCII digits (``[0-9]``); the caller has checked ``b <= len(line)``."""
    for i in range(a, b):
        c = _char(line, i)
        if c < "0" or c > "9":
            return False
    return True


def _retraction_line(line: str, ctx: ParseContext, start: int, sec: int, ms: int, tags_start: int,
                     tags_end: int) -> Any:
    """``parse_line`` of a dated line whose header ``_batch_line`` has read (seconds ``sec``, milliseconds ``ms`` or
    -1, rank tags ``line[tags_start:tags_end]``) and whose message, ``line[start:]``, starts with ``D`` or ``K``
    but is no batch line: a retraction line, as ``parse_message`` reads one (``_retraction``), else ``_NOT_FAST``
    (the general path: it reads the same header, as ``_fast_header`` does, then finds no other line starting so)."""
    msg = line[start:]
    if not ((msg.startswith("Decode out of memory happened") or msg.startswith("KV cache pool is full"))
            and "#retracted_reqs" in msg):
        return _NOT_FAST
    stamp = line[1:17]
    minute = _MINUTE_CACHE.get(stamp) or _minute(stamp)
    if minute is None:
        return _NOT_FAST
    day, hm = minute
    ctx.day_epoch = day
    ctx.last_ts = day + (float(hm + sec) + (ms / 1000 if ms >= 0 else 0.0))
    if tags_end > tags_start:
        tags = line[tags_start:tags_end]
        ranks = _TAGS_CACHE.get(tags) or _ranks_of(tags)
    else:
        ranks = _NO_RANKS
    return _retraction(msg, ranks, ctx)


def _batch_line(line: str, ctx: ParseContext) -> Any:
    """``parse_line`` of a batch line whose header and message start ``_BATCH_LINE`` reads, else ``_NOT_FAST``
    (tests/streams/adapters/test_fast_paths.py compares it with the general path and with ``_batch_line_regex``).

    The line is read as ``_BATCH_LINE.match`` reads it, one character at a time: the pattern has one way to match
    (each optional part is either taken or impossible: the milliseconds' ``.`` is neither a space nor ``]``; a tag's
    ``[A-Z_]*``, its ``\\d+`` and what follows it (a space or ``]``) are disjoint classes, so a tag that does not
    read leaves a space where ``]`` is needed; ``Prefill?`` and ``Decode`` need `` batch`` after them; the
    iteration ``( ?\\[(\\d+)\\])?``, ``[.,]?`` and `` ?`` end the match, so each is taken when it reads). ``\\d``
    is sre's Unicode decimal digit (``str.isdecimal``), ``[0-9]`` ASCII."""
    n = len(line)
    if n < 20 or _char(line, 0) != "[" or _char(line, 5) != "-" or _char(line, 8) != "-" or _char(line, 11) != " " \
            or _char(line, 14) != ":" or _char(line, 17) != ":":
        return _NOT_FAST
    if not (_ascii_digits(line, 1, 5) and _ascii_digits(line, 6, 8) and _ascii_digits(line, 9, 11)
            and _ascii_digits(line, 12, 14) and _ascii_digits(line, 15, 17) and _ascii_digits(line, 18, 20)):
        return _NOT_FAST
    sec = (ord(_char(line, 18)) - 48) * 10 + (ord(_char(line, 19)) - 48)
    i = 20
    ms = -1
    if i < n and _char(line, i) == ".":
        if i + 4 > n or not _ascii_digits(line, i + 1, i + 4):
            return _NOT_FAST
        ms = (ord(_char(line, i + 1)) - 48) * 100 + (ord(_char(line, i + 2)) - 48) * 10 + (ord(_char(line, i + 3)) - 48)
        i += 4
    tags_start = i
    while i < n and _char(line, i) == " ":  # (?: [A-Z][A-Z_]*\d+)*
        j = i + 1
        if j >= n:
            return _NOT_FAST
        c = _char(line, j)
        if c < "A" or c > "Z":
            return _NOT_FAST
        j += 1
        while j < n:
            c = _char(line, j)
            if (c < "A" or c > "Z") and c != "_":
                break
            j += 1
        k = j
        while j < n and _char(line, j).isdecimal():
            j += 1
        if j == k:
            return _NOT_FAST
        i = j
    if i >= n or _char(line, i) != "]" or i >= 120:  # m.end(4) >= 120: _fast_header's limit
        return _NOT_FAST
    tags_end = i
    i += 1
    if i < n and _char(line, i) == " ":
        i += 1
    if i + 6 > n:
        return _NOT_FAST
    decode = False
    if _char(line, i) == "P" and _char(line, i + 1) == "r" and _char(line, i + 2) == "e" and _char(line, i + 3) == "f" \
            and _char(line, i + 4) == "i" and _char(line, i + 5) == "l":
        i += 6
        if i < n and _char(line, i) == "l":
            i += 1
    elif _char(line, i) == "D" and _char(line, i + 1) == "e" and _char(line, i + 2) == "c" and _char(line, i + 3) == "o" \
            and _char(line, i + 4) == "d" and _char(line, i + 5) == "e":
        i += 6
        decode = True
    elif _char(line, i) == "K":
        return _retraction_line(line, ctx, i, sec, ms, tags_start, tags_end)
    else:
        return _NOT_FAST
    if i + 6 > n or _char(line, i) != " " or _char(line, i + 1) != "b" or _char(line, i + 2) != "a" \
            or _char(line, i + 3) != "t" or _char(line, i + 4) != "c" or _char(line, i + 5) != "h":
        return _retraction_line(line, ctx, i - 6, sec, ms, tags_start, tags_end) if decode else _NOT_FAST
    i += 6
    it = None
    j = i + 1 if i < n and _char(line, i) == " " else i  # (?: ?\[(\d+)\])?
    if j < n and _char(line, j) == "[":
        k = j + 1
        while k < n and _char(line, k).isdecimal():
            k += 1
        if k > j + 1 and k < n and _char(line, k) == "]":
            it = line[j + 1:k]
            i = k + 1
    if i < n and (_char(line, i) == "." or _char(line, i) == ","):
        i += 1
    if i < n and _char(line, i) == " ":
        i += 1
    stamp = line[1:17]
    minute = _MINUTE_CACHE.get(stamp) or _minute(stamp)  # the cache's hit, without the call
    if minute is None:
        return _NOT_FAST
    day, hm = minute
    ctx.day_epoch = day
    ctx.last_ts = day + (float(hm + sec) + (ms / 1000 if ms >= 0 else 0.0))
    if tags_end > tags_start:
        tags = line[tags_start:tags_end]
        ranks = _TAGS_CACHE.get(tags) or _ranks_of(tags)
    else:
        ranks = _NO_RANKS
    return _batch("decode_batch" if decode else "prefill_batch", line[i:], it, ranks, ctx)


def parse_line(line: str, ctx: ParseContext) -> LineResult:
    """Parse one raw log line (any era, any prefix). See the module docstring for the result contract."""
    if line[:1] == "[" and "\x1b" not in line:
        stripped = line.rstrip("\r\n")
        fast = _batch_line(stripped, ctx) if "\r" not in stripped else _NOT_FAST
        if fast is not _NOT_FAST:
            return fast  # type: ignore[no-any-return]
    return _parse_line_general(line, ctx)


def _parse_line_general(line: str, ctx: ParseContext) -> LineResult:
    """``parse_line`` without the batch-line fast path (the reference the tests compare it with)."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    line = line.rstrip("\r\n")
    if "\r" in line:  # progress bars rewrite the line with bare CRs: the last segment is what was shown
        line = line.rpartition("\r")[2] or line
    if line[:1] == "[" and line[1:2].isdigit():
        # split_header's first step, taken here: a dated header at column 0 followed by the message itself
        head = _fast_header(line, ctx)
        if head is not None and not (head[0][:1] == "[" and head[0][1:2].isdigit()):
            return parse_message(head[0], head[1], ctx)
    msg, ranks = split_header(line, ctx)  # (a second header: read again there, the same time written twice)
    return parse_message(msg, ranks, ctx)
