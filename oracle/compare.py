"""Compare SGLang's trace with ours: the first divergence, step by step, and the cache-hit tokens of each side.

Trace format (both sides write it):

- scheduler: ``{"info": {...}, "steps": [step, ...], "reqs": {rid: {...}}}``; a step is
  ``{"mode": "prefill", "rids", "extend", "prefix", "n_dec", "t", "retracted"}`` or
  ``{"mode": "decode", "n_dec", "t", "retracted"}``; a request ``{"arrival", "first", "finish", "cached",
  "output_len"}``.
- cache: ``{"info": {...}, "hits": [tokens per request], "tree_size": tokens}``.

A step matches when every field matches (times to 1 µs: both sides add the same float step times, rounded to 6
decimals). After the steps, the per-request first-token and finish times, cached tokens and output lengths are
compared too, so a run whose steps agree but whose clocks drift apart still fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STEP_FIELDS = ("mode", "rids", "extend", "prefix", "n_dec", "retracted", "t")
REQUEST_FIELDS = ("first", "finish", "cached", "output_len")
TIME_TOLERANCE_S = 2e-6


@dataclass(frozen=True)
class Divergence:
    where: str       # "step 17" / "request q0042" / "request 59" / "tree"
    field: str
    ours: Any
    sglang: Any

    def __str__(self) -> str:
        return f"{self.where}: {self.field} ours {_short(self.ours)} vs SGLang {_short(self.sglang)}"


@dataclass
class Comparison:
    name: str
    kind: str
    compared: int                     # steps (scheduler) or requests (cache) compared
    steps_sglang: int
    steps_ours: int
    divergent: int                    # steps / requests that differ
    first: Divergence | None
    hit_tokens_sglang: int
    hit_tokens_ours: int
    tree_size_sglang: int | None = None
    tree_size_ours: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.first is None

    def to_dict(self) -> dict[str, Any]:
        d = dict(vars(self))
        d["first"] = None if self.first is None else vars(self.first)
        d["ok"] = self.ok
        return d


def _short(v: Any, limit: int = 120) -> str:
    s = repr(v)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _equal(field_name: str, a: Any, b: Any) -> bool:
    if field_name in ("t", "first", "finish") and isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= TIME_TOLERANCE_S
    return a == b


def _step_diff(ours: dict, theirs: dict) -> str | None:
    for f in STEP_FIELDS:
        if not _equal(f, ours.get(f), theirs.get(f)):
            return f
    return None


def compare_scheduler(name: str, sglang: dict, ours: dict) -> Comparison:
    rs, os_ = sglang["steps"], ours["steps"]
    first: Divergence | None = None
    divergent = 0
    for i, (a, b) in enumerate(zip(os_, rs)):
        f = _step_diff(a, b)
        if f is not None:
            divergent += 1
            if first is None:
                first = Divergence(f"step {i}", f, a.get(f), b.get(f))
    if len(rs) != len(os_):
        divergent += abs(len(rs) - len(os_))
        if first is None:
            first = Divergence(f"step {min(len(rs), len(os_))}", "number of steps", len(os_), len(rs))
    rq, oq = sglang["reqs"], ours["reqs"]
    if first is None:
        for rid in sorted(set(rq) | set(oq)):
            a, b = oq.get(rid), rq.get(rid)
            if a is None or b is None:
                first = Divergence(f"request {rid}", "present", a is not None, b is not None)
                break
            for f in REQUEST_FIELDS:
                if not _equal(f, a.get(f), b.get(f)):
                    first = Divergence(f"request {rid}", f, a.get(f), b.get(f))
                    break
            if first is not None:
                break

    def hits(trace: dict) -> int:
        """Cache-hit tokens as each side reports them per request (SGLang's ``req.cached_tokens``)."""
        return sum(r.get("cached", 0) for r in trace["reqs"].values())

    return Comparison(name, "scheduler", min(len(rs), len(os_)), len(rs), len(os_), divergent, first,
                      hits(sglang), hits(ours))


def compare_cache(name: str, sglang: dict, ours: dict) -> Comparison:
    hs, ho = sglang["hits"], ours["hits"]
    first = None
    divergent = 0
    for i, (a, b) in enumerate(zip(ho, hs)):
        if a != b:
            divergent += 1
            if first is None:
                first = Divergence(f"request {i}", "hit tokens", a, b)
    if len(hs) != len(ho) and first is None:
        first = Divergence("replay", "requests", len(ho), len(hs))
    if first is None and sglang["tree_size"] != ours["tree_size"]:
        first = Divergence("tree", "size (tokens)", ours["tree_size"], sglang["tree_size"])
    return Comparison(name, "cache", min(len(hs), len(ho)), len(hs), len(ho), divergent, first, sum(hs), sum(ho),
                      sglang["tree_size"], ours["tree_size"])


def compare(name: str, kind: str, sglang: dict, ours: dict) -> Comparison:
    return compare_scheduler(name, sglang, ours) if kind == "scheduler" else compare_cache(name, sglang, ours)


def format_row(c: Comparison) -> str:
    unit = "steps" if c.kind == "scheduler" else "requests"
    head = f"{c.name:<26} {'ok  ' if c.ok else 'DIFF'} {c.compared:>6} {unit:<8}"
    hits = f"cache-hit tokens ours {c.hit_tokens_ours:,} / SGLang {c.hit_tokens_sglang:,}"
    if c.tree_size_ours is not None:
        hits += f"; tree ours {c.tree_size_ours:,} / SGLang {c.tree_size_sglang:,}"
    line = f"{head} {c.divergent:>5} divergent; {hits}"
    if c.first is not None:
        line += f"\n{'':<27}first divergence: {c.first}"
    return line
