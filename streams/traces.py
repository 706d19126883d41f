"""Workload trace FILES → :class:`simcore.request.RequestSpec` lists (the single trace reader of the project).

Formats (auto-detected: ``.csv`` → Azure; JSON lines → by the keys of the first object):

- **Mooncake** (FAST'25) JSONL: ``{"timestamp": ms, "input_length", "output_length", "hash_ids": [...]}``; each
  hash id names one 512-token prefix block → ``key=hash_ids``, ``key_unit=512``.
- **Azure** LLM inference 2023 CSV: ``TIMESTAMP,ContextTokens,GeneratedTokens`` → lengths only (no key); arrival
  times are relative to the first row.
- **ShareGPT-style** JSONL (LLMServingSim workloads): ``{"input_toks", "output_toks", "arrival_time_ns",
  "input_tok_ids"?}`` → token-id keys. Agentic ``sub_requests`` sessions are reported and skipped.
- **native** JSONL (documented in docs/workloads.md): ``{"arrival_s", "output_len", "input_len"?, "input_ids"?,
  "block_hashes"?, "block_size"?, "max_new_tokens"?, "ignore_eos"?, "priority"?, "rid"?}``.

Recorded traces are replayed as bench_serving replays them: ``max_new_tokens`` = the recorded output length and
``ignore_eos=True`` (pass ``ignore_eos=False`` to read them as free-running chat requests instead).

A bad line never stops the read and is never dropped silently: it becomes a :class:`TraceIssue` (line number,
field, what to do) in the result, and the line is skipped. ``strict=True`` raises the first one as a UserError.
"""
from __future__ import annotations

import json
import math
import os
from typing import TYPE_CHECKING, Any, Callable, Literal

from simcore.errors import UserError
from simcore.request import RequestSpec
from simcore.values import FrozenValue

if TYPE_CHECKING:
    from pathlib import Path

TraceFormat = Literal["mooncake", "azure", "sharegpt", "native"]
FORMATS: tuple[str, ...] = ("mooncake", "azure", "sharegpt", "native")
MOONCAKE_BLOCK_TOKENS = 512
AZURE_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


class TraceIssue(FrozenValue):
    """One skipped line: where, which field, and what is wrong / what to do."""

    __slots__ = ("line_no", "field", "message")
    line_no: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line_no}: {self.field}: {self.message}"


class TraceResult:
    """What a read produced: requests in arrival order, the issues, the detected format (a plain class: start-up,
    simcore/values.py)."""

    __slots__ = ("format", "requests", "issues", "lines")

    def __init__(self, format: str, requests: list[RequestSpec] | None = None,  # noqa: A002 - the field's name
                 issues: list[TraceIssue] | None = None, lines: int = 0) -> None:
        self.format = format
        self.requests: list[RequestSpec] = requests if requests is not None else []
        self.issues: list[TraceIssue] = issues if issues is not None else []
        self.lines = lines

    def __repr__(self) -> str:
        return (f"TraceResult(format={self.format!r}, {len(self.requests)} requests, issues={self.issues!r}, "
                f"lines={self.lines})")


class TraceLineError(ValueError):
    """One line of a trace cannot become a request: ``field`` names the culprit, ``message`` what to do."""

    def __init__(self, fld: str, message: str) -> None:
        super().__init__(message)
        self.field = fld
        self.message = message


def _int(obj: dict[str, Any], key: str, minimum: int = 1, required: bool = True) -> int | None:
    v = obj.get(key)
    if v is None:
        if required:
            raise TraceLineError(key, "missing (add an integer)")
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise TraceLineError(key, f"must be an integer, got {v!r}")
    if v < minimum:
        raise TraceLineError(key, f"must be >= {minimum}, got {v}")
    return int(v)


def _num(obj: dict[str, Any], key: str) -> float:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise TraceLineError(key, f"must be a finite number, got {v!r}")
    if v < 0:
        raise TraceLineError(key, f"must be >= 0, got {v}")
    return float(v)


_JUST_INT = {int}


def _ints(obj: dict[str, Any], key: str) -> tuple[int, ...] | None:
    v = obj.get(key)
    if v is None:
        return None
    if not isinstance(v, list) or (v and set(map(type, v)) != _JUST_INT):  # C-speed: every element exactly int
        raise TraceLineError(key, "must be a list of integers")
    return tuple(v)


# ---- per-object converters (also used by streams.adapters.traces) ------------------------------------------
def from_mooncake(obj: dict[str, Any], rid: str, ignore_eos: bool = True) -> RequestSpec:
    t_ms = _num(obj, "timestamp")
    n_in = _int(obj, "input_length")
    n_out = _int(obj, "output_length")
    hashes = _ints(obj, "hash_ids")
    assert n_in is not None and n_out is not None
    if hashes is not None and len(hashes) * MOONCAKE_BLOCK_TOKENS < n_in:
        raise TraceLineError("hash_ids", f"{len(hashes)} blocks of 512 cover fewer than input_length={n_in} tokens")
    return RequestSpec(rid, t_ms / 1000.0, n_in, n_out, n_out, hashes or None,
                       MOONCAKE_BLOCK_TOKENS if hashes else 1, ignore_eos)


def from_sharegpt(obj: dict[str, Any], rid: str, ignore_eos: bool = True) -> RequestSpec:
    if "sub_requests" in obj:
        raise TraceLineError("sub_requests", "agentic sessions are not supported; flatten them to one request per line")
    t_ns = _num(obj, "arrival_time_ns")
    n_in = _int(obj, "input_toks")
    n_out = _int(obj, "output_toks")
    ids = _ints(obj, "input_tok_ids")
    assert n_in is not None and n_out is not None
    if ids is not None and len(ids) != n_in:
        raise TraceLineError("input_tok_ids", f"has {len(ids)} ids but input_toks={n_in}; make them agree")
    return RequestSpec(rid, t_ns / 1e9, n_in, n_out, n_out, ids, 1, ignore_eos)


def from_native(obj: dict[str, Any], rid: str, ignore_eos: bool = False) -> RequestSpec:
    arrival = _num(obj, "arrival_s")
    n_out = _int(obj, "output_len")
    assert n_out is not None
    max_new = _int(obj, "max_new_tokens", required=False)
    ids = _ints(obj, "input_ids")
    blocks = _ints(obj, "block_hashes")
    n_in = _int(obj, "input_len", required=ids is None)
    if ids is not None and blocks is not None:
        raise TraceLineError("input_ids", "give input_ids or block_hashes, not both")
    key, unit = None, 1
    if ids is not None:
        if n_in is not None and n_in != len(ids):
            raise TraceLineError("input_len", f"is {n_in} but input_ids has {len(ids)} ids; drop input_len or fix it")
        n_in, key = len(ids), ids
        if n_in == 0:
            raise TraceLineError("input_ids", "is empty; a request needs at least one prompt token")
    elif blocks is not None:
        unit = _int(obj, "block_size") or 0
        assert n_in is not None
        if len(blocks) * unit < n_in:
            raise TraceLineError("block_hashes", f"{len(blocks)} blocks of {unit} cover fewer than input_len={n_in} tokens")
        key = blocks
    if max_new is not None and max_new < n_out:
        raise TraceLineError("max_new_tokens", f"{max_new} is below output_len={n_out}; raise it or drop it")
    ie = obj.get("ignore_eos", ignore_eos)
    if not isinstance(ie, bool):
        raise TraceLineError("ignore_eos", "must be true or false")
    prio = obj.get("priority")  # absent: the least preferred priority under priority scheduling (§2.4)
    if prio is not None and type(prio) is not int:
        raise TraceLineError("priority", "must be an integer")
    rid_v = obj.get("rid", rid)
    assert n_in is not None
    return RequestSpec(str(rid_v), arrival, n_in, n_out, max_new, key or None, unit, ie, prio)


_JSON_READERS: dict[str, Callable[..., RequestSpec]] = {
    "mooncake": from_mooncake, "sharegpt": from_sharegpt, "native": from_native}


def detect_json_format(obj: dict[str, Any]) -> str | None:
    """Which JSON-lines format an object belongs to, by its keys; None if none fits."""
    if "hash_ids" in obj or ("timestamp" in obj and "input_length" in obj):
        return "mooncake"
    if "input_toks" in obj or "arrival_time_ns" in obj or "sub_requests" in obj:
        return "sharegpt"
    if "arrival_s" in obj:
        return "native"
    return None


def _path_text(path: str | Path) -> str:
    """``str(pathlib.Path(path))`` on POSIX without importing pathlib (≈ 17 M instructions of start-up): the
    components without empty ones and ``.``, after the root (``//`` kept, as pathlib does)."""
    s = os.fspath(path)
    root = "//" if s.startswith("//") and not s.startswith("///") else "/" if s.startswith("/") else ""
    return root + "/".join(x for x in s.split("/") if x and x != ".") or "."


def _name(path: str) -> str:
    """pathlib's ``.name`` of a ``_path_text``."""
    name = path.rpartition("/")[2]
    return "" if name == "." else name


def _suffix_at(name: str) -> int:
    """Where pathlib's ``.suffix`` of ``name`` starts (``len(name)`` when it has none)."""
    i = name.rfind(".")
    return i if 0 < i < len(name) - 1 else len(name)


def detect_format(path: str | Path) -> str:
    """``.csv`` → azure; otherwise the first JSON object's keys decide."""
    name = _name(_path_text(path))
    if name[_suffix_at(name):].lower() == ".csv":
        return "azure"
    with open(path, "r", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                if line.startswith(AZURE_HEADER[0]):
                    return "azure"
                continue  # the line itself is reported by the reader; keep looking for a good one
            fmt = detect_json_format(obj) if isinstance(obj, dict) else None
            if fmt:
                return fmt
            if n > 100:
                break
    raise UserError("trace", f"cannot tell the format of {path}",
                    f"pass --trace-format one of {', '.join(FORMATS)}; see docs/workloads.md")


def _stem(path: str | Path) -> str:
    name = _name(_path_text(path))
    return name[:_suffix_at(name)]


def _read_json_lines(path: str | Path, fmt: str, ignore_eos: bool | None, res: TraceResult,
                     limit: int | None) -> None:
    conv = _JSON_READERS[fmt]
    stem = _stem(path)
    kwargs = {} if ignore_eos is None else {"ignore_eos": ignore_eos}
    with open(path, "r", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            res.lines = n
            if limit is not None and len(res.requests) >= limit:
                break
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise TraceLineError("line", "is not a JSON object")
                res.requests.append(conv(obj, f"{stem}:{n}", **kwargs))
            except json.JSONDecodeError as e:
                res.issues.append(TraceIssue(n, "line", f"not valid JSON ({e.msg} at column {e.colno})"))
            except TraceLineError as e:
                res.issues.append(TraceIssue(n, e.field, e.message))
            except ValueError as e:  # RequestSpec's own checks
                res.issues.append(TraceIssue(n, "request", str(e)))


def _parse_azure_ts(s: str) -> float:
    # "2023-11-16 18:17:03.9799600": fromisoformat takes up to 6 fractional digits on every Python we support
    s = s.strip()
    if "." in s:
        head, frac = s.split(".", 1)
        s = f"{head}.{frac[:6]}"
    from datetime import datetime, timezone  # start-up: only Azure traces carry dates

    return datetime.fromisoformat(s).replace(tzinfo=timezone.utc).timestamp()


def parse_azure_row(line: str) -> tuple[float, int, int] | None:
    """One CSV row → (Unix time in s, read as UTC; ContextTokens; GeneratedTokens); None for the header or a
    blank line. Raises TraceLineError naming the bad column."""
    line = line.strip()
    if not line or line.startswith(AZURE_HEADER[0]):
        return None
    parts = line.split(",")
    if len(parts) != 3:
        raise TraceLineError("line", f"expected 3 columns {','.join(AZURE_HEADER)}, got {len(parts)}")
    try:
        ts = _parse_azure_ts(parts[0])
    except ValueError:
        raise TraceLineError("TIMESTAMP", f"cannot read {parts[0][:40]!r}; use YYYY-MM-DD HH:MM:SS.ffffff") from None
    try:
        n_in, n_out = int(parts[1]), int(parts[2])
    except ValueError:
        raise TraceLineError("ContextTokens/GeneratedTokens", "must be integers") from None
    if n_in < 1:
        raise TraceLineError("ContextTokens", f"must be >= 1, got {n_in}")
    if n_out < 1:
        raise TraceLineError("GeneratedTokens", f"must be >= 1, got {n_out}")
    return ts, n_in, n_out


def _read_azure(path: str | Path, ignore_eos: bool | None, res: TraceResult, limit: int | None) -> None:
    ie = True if ignore_eos is None else ignore_eos
    t0: float | None = None
    stem = _stem(path)
    with open(path, "r", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            res.lines = n
            if limit is not None and len(res.requests) >= limit:
                break
            try:
                row = parse_azure_row(line)
            except TraceLineError as e:
                res.issues.append(TraceIssue(n, e.field, e.message))
                continue
            if row is None:
                continue
            ts, n_in, n_out = row
            if t0 is None:
                t0 = ts
            res.requests.append(RequestSpec(f"{stem}:{n}", ts - t0, n_in, n_out, n_out, None, 1, ie))


def read_trace(path: str | Path, fmt: str = "auto", *, ignore_eos: bool | None = None, limit: int | None = None,
               strict: bool = False) -> TraceResult:
    """Read a trace file into requests sorted by arrival (stable: ties keep file order).

    ``ignore_eos`` None keeps each format's default (recorded traces True, native False). ``limit`` stops after
    that many good requests. ``strict`` raises the first issue as a UserError instead of skipping the line.
    """
    p = _path_text(path)
    if not os.path.isfile(p):
        raise UserError("trace", f"no such file: {p}", "check the path")
    with open(p, "rb") as fh:
        if b"\0" in fh.read(8192):
            raise UserError("trace", f"{p} is a binary file", "give a JSON-lines or CSV trace")
    if fmt == "auto":
        fmt = detect_format(p)
    if fmt not in FORMATS:
        raise UserError("trace_format", f"unknown format {fmt!r}", f"use auto or one of {', '.join(FORMATS)}")
    res = TraceResult(format=fmt)
    try:
        if fmt == "azure":
            _read_azure(p, ignore_eos, res, limit)
        else:
            _read_json_lines(p, fmt, ignore_eos, res, limit)
    except UnicodeDecodeError:
        raise UserError("trace", f"{p} is not a UTF-8 text file", "give a JSON-lines or CSV trace") from None
    if strict and res.issues:
        i = res.issues[0]
        raise UserError(i.field, f"{_name(p)} line {i.line_no}: {i.message}", "fix or remove the line")
    if any(b.arrival_s < a.arrival_s for a, b in zip(res.requests, res.requests[1:])):
        res.requests.sort(key=lambda r: r.arrival_s)
    return res
