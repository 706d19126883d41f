"""Wire bytes -> shadowsim events: the one entry point for Kafka records and for files.

* ``decode_record(value, key=..., source=..., fmt=...)`` is what the Kafka consumer calls on every record. It never
  raises: every input ends as events, a quiet skip, or a dead letter with a reason.
* ``iter_file_events(path, fmt=...)`` reads a file (format auto-detected) and yields one ``FileItem`` per event,
  per skipped line and per dead letter, with line numbers. ``shadowsim parse`` and ``publish`` use it.

Formats (``FORMATS``): ``auto``; ``sglang_log`` (server logs, ``--log-requests`` text, ``ReqTimeStats``), ``json``
(JSON lines of any known shape: canonical events, shipper envelopes, ``--log-requests`` JSON, metrics-file lines,
traces, OTLP JSON, bench_serving results), ``events`` (canonical event JSON lines only), ``otlp_proto``,
``otlp_json``, ``prometheus``, ``bench_console``, ``mooncake``, ``sharegpt``, ``azure``.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from simcore.events import Event
from streams.adapters import bench_serving, jsonline, otlp, prometheus, sglang_log, traces
from streams.adapters.base import DeadLetter, LineResult, ParseContext

FORMATS: tuple[str, ...] = (
    "auto", "sglang_log", "json", "events", "otlp_proto", "otlp_json", "prometheus", "bench_console",
    "mooncake", "sharegpt", "azure",
)
_SNIFF_BYTES = 65536
_MAX_WHOLE_JSON_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class DecodeResult:
    """What one Kafka record became."""

    events: list[Event] = field(default_factory=list)
    skipped: int = 0
    dead_letters: list[DeadLetter] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class FileItem:
    """One outcome while reading a file: an ``event``, a ``dead_letter``, or (both None) a skipped line."""

    line_no: int | None
    event: Event | None = None
    dead_letter: DeadLetter | None = None

    @property
    def skipped(self) -> bool:
        return self.event is None and self.dead_letter is None


def _parse_line(line: str, ctx: ParseContext, fmt: str) -> LineResult:
    """One text line under a line-oriented format."""
    if fmt == "azure":
        return traces.parse_azure_line(line, ctx)
    s = line.strip()
    if not s:
        return None
    if s[0] == "{":
        if fmt == "events":
            obj = _loads(s)
            if isinstance(obj, str):
                return obj
            if not isinstance(obj, dict):
                return "events: not a JSON object"
            return jsonline.from_canonical(obj)
        if fmt == "mooncake":
            obj = _loads(s)
            return obj if isinstance(obj, str) else (traces.from_mooncake(obj, ctx) if isinstance(obj, dict)
                                                     else "mooncake: not a JSON object")
        if fmt == "sharegpt":
            obj = _loads(s)
            return obj if isinstance(obj, str) else (traces.from_sharegpt_stream(obj, ctx) if isinstance(obj, dict)
                                                     else "sharegpt: not a JSON object")
        if fmt == "sglang_log" and not s.endswith("}"):
            # a log line that happens to start with a brace, or a JSON line cut short: the latter must not vanish
            # as a quiet skip (issue 11: a quarter of fuzzed bad records did)
            res = sglang_log.parse_line(line, ctx)
            return res if res else "json: not valid JSON (truncated?)"
        return jsonline.parse_json_text(s, ctx)
    if fmt in ("json", "events", "mooncake", "sharegpt", "otlp_json"):
        return None
    return sglang_log.parse_line(line, ctx)


def _loads(s: str) -> object:
    try:
        return json.loads(s)
    except (ValueError, RecursionError):
        return "json: not valid JSON"


def _emit(res: LineResult, raw: bytes, line_no: int | None) -> tuple[list[Event], int, DeadLetter | None]:
    if isinstance(res, str):
        return [], 0, DeadLetter(raw=raw, reason=res, line_no=line_no)
    if not res:
        return [], 1, None
    return res, 0, None


def detect_format(head: bytes) -> str:
    """Guess a format from the first bytes of a file or record (``auto`` resolves to one of ``FORMATS``)."""
    if otlp.looks_like_proto(head):
        return "otlp_proto"
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    stripped = text.lstrip()
    if stripped.startswith(traces.AZURE_HEADER):
        return "azure"
    if prometheus.looks_like(stripped):
        return "prometheus"
    if stripped.startswith("{") and any(k in stripped[:2048] for k in ('"resourceSpans"', '"resource_spans"',
                                                                        '"resourceLogs"', '"resource_logs"')):
        return "otlp_json"
    return "sglang_log"  # line mode: log lines and JSON lines of any shape


def _context(source: str, instance_id: str | None, timestamp_s: float | None) -> ParseContext:
    ctx = ParseContext(source=source, instance_id=instance_id or "default")
    if instance_id:
        ctx.scratch["instance_fixed"] = True
    if timestamp_s is not None:
        ctx.default_ts = timestamp_s
    return ctx


def decode_record(
    value: bytes,
    *,
    key: bytes | None = None,
    source: str = "",
    headers: dict | None = None,
    fmt: str = "auto",
    timestamp_s: float | None = None,
    ctx: ParseContext | None = None,
) -> DecodeResult:
    """Decode one Kafka record. Never raises.

    ``key`` (utf-8) names the instance when present (else a ``instance_id`` header, else the envelope or
    ``"default"``). ``timestamp_s`` (the record time) stands in for inputs without their own time.
    Pass the same ``ctx`` for successive records of one stream to carry the last timestamp between them.
    """
    try:
        inst: str | None = None
        if key:
            inst = key.decode("utf-8", errors="replace").strip() or None
        if inst is None and headers:
            h = headers.get("instance_id")
            if isinstance(h, bytes):
                inst = h.decode("utf-8", errors="replace").strip() or None
            elif isinstance(h, str):
                inst = h.strip() or None
        if ctx is None:
            ctx = _context(source, inst, timestamp_s)
        else:
            if inst:
                ctx.instance_id = inst
                ctx.scratch["instance_fixed"] = True
            if timestamp_s is not None:
                ctx.default_ts = timestamp_s
            ctx.source = source or ctx.source
        res = _decode(value, ctx, fmt)
        if not res.events and not res.skipped and not res.dead_letters:
            return DecodeResult(skipped=1)  # e.g. an empty page: every record has an outcome
        return res
    except Exception as exc:  # noqa: BLE001 - the contract is: never raise, dead-letter instead
        return DecodeResult(dead_letters=[DeadLetter(raw=bytes(value) if isinstance(value, (bytes, bytearray))
                                                     else str(value).encode(),
                                                     reason=f"internal error: {type(exc).__name__}: {exc}"[:300])])


def _decode(value: bytes, ctx: ParseContext, fmt: str) -> DecodeResult:
    if fmt not in FORMATS:
        return DecodeResult(dead_letters=[DeadLetter(raw=value, reason=f"unknown format {fmt!r}")])
    ctx.line_no += 1
    if fmt == "auto" and value[:1] == b"[" and b"\n" not in value.rstrip():
        # fast path for the commonest record, one bracketed log line: no format sniffing
        text = value.decode("utf-8", errors="replace")
        events, skipped, dl = _emit(sglang_log.parse_line(text, ctx), value, None)
        return DecodeResult(events, skipped, [dl] if dl else [])
    if fmt == "auto":
        fmt = detect_format(value[:_SNIFF_BYTES])
    if fmt == "otlp_proto":
        events, skipped, dl = _emit(otlp.from_proto(value, ctx), value, None)
        return DecodeResult(events, skipped, [dl] if dl else [])
    text = value.decode("utf-8", errors="replace")
    if fmt == "prometheus":
        events, skipped, dl = _emit(prometheus.parse_text(text, ctx), value, None)
        return DecodeResult(events, skipped, [dl] if dl else [])
    if fmt == "otlp_json":
        events, skipped, dl = _emit(jsonline.parse_json_text(text, ctx), value, None)
        return DecodeResult(events, skipped, [dl] if dl else [])
    if fmt == "bench_console" or (bench_serving.BLOCK_START in text and fmt in ("sglang_log", "bench_console")):
        return _collect(bench_serving.parse_document(text, ctx), text)
    stripped = text.strip()
    if "\n" not in stripped:
        events, skipped, dl = _emit(_parse_line(text, ctx, fmt), value, None)
        return DecodeResult(events, skipped, [dl] if dl else [])
    # several lines in one record (batched shippers, multi-line values)
    all_events: list[Event] = []
    skipped = 0
    dead: list[DeadLetter] = []
    for i, line in enumerate(stripped.split("\n"), start=1):
        ev, sk, dl = _emit(_parse_line(line, ctx, fmt), line.encode(), i)
        all_events.extend(ev)
        skipped += sk
        if dl:
            dead.append(dl)
    return DecodeResult(all_events, skipped, dead)


def _collect(items: Iterator[tuple[int, LineResult]], text: str) -> DecodeResult:
    lines = text.splitlines()
    events: list[Event] = []
    skipped = 0
    dead: list[DeadLetter] = []
    for no, res in items:
        raw = lines[no - 1].encode() if 0 < no <= len(lines) else b""
        ev, sk, dl = _emit(res, raw, no)
        events.extend(ev)
        skipped += sk
        if dl:
            dead.append(dl)
    return DecodeResult(events, skipped, dead)


def _items(res: LineResult, raw: bytes, line_no: int | None) -> Iterator[FileItem]:
    if isinstance(res, str):
        yield FileItem(line_no, dead_letter=DeadLetter(raw=raw, reason=res, line_no=line_no))
    elif not res:
        yield FileItem(line_no)
    else:
        for ev in res:
            yield FileItem(line_no, event=ev)


def _safe(fn, *args) -> LineResult:  # type: ignore[no-untyped-def]
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001
        return f"internal error: {type(exc).__name__}: {exc}"[:300]


def iter_file_events(
    path: str | os.PathLike[str],
    fmt: str = "auto",
    instance_id: str | None = None,
    *,
    start_ts: float | None = None,
) -> Iterator[FileItem]:
    """Read a file and yield its events, skips and dead letters in order. Never raises on content; raises
    ``OSError`` if the file cannot be read and ``ValueError`` for an unknown ``fmt``.

    ``start_ts`` (Unix s) places relative traces (Mooncake, ShareGPT) and lines before the first timestamp.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    p = Path(path)
    ctx = _context(p.name, instance_id, start_ts)
    with open(p, "rb") as fh:
        head = fh.read(_SNIFF_BYTES)
        if fmt == "auto":
            fmt = detect_format(head)
        if fmt in ("otlp_proto", "prometheus", "otlp_json", "bench_console"):
            data = head + fh.read()
            yield from _whole(data, ctx, fmt)
            return
        fh.seek(0)
        if fmt == "sglang_log" and head.lstrip()[:1] == b"{" and b"\n" in head.strip():
            # a pretty-printed single JSON document (e.g. bench_serving details, OTLP JSON)?
            first = head.lstrip().split(b"\n", 1)[0].strip()
            if first in (b"{", b"[") or not first.endswith(b"}"):
                data = fh.read(_MAX_WHOLE_JSON_BYTES)
                obj = _loads(data.decode("utf-8", errors="replace"))
                if not isinstance(obj, str):
                    yield from _items(_safe(jsonline.from_object, obj, ctx), data[:200], 1)
                    return
                fh.seek(0)
        yield from _lines(fh, ctx, fmt)


def _whole(data: bytes, ctx: ParseContext, fmt: str) -> Iterator[FileItem]:
    ctx.line_no = 1
    if fmt == "otlp_proto":
        yield from _items(_safe(otlp.from_proto, data, ctx), data[:200], None)
        return
    text = data.decode("utf-8", errors="replace")
    if fmt == "otlp_json":
        yield from _items(_safe(jsonline.parse_json_text, text, ctx), data[:200], 1)
        return
    lines = text.splitlines()
    gen = prometheus.parse_document(text, ctx) if fmt == "prometheus" else bench_serving.parse_document(text, ctx)
    try:
        for no, res in gen:
            raw = lines[no - 1].encode() if 0 < no <= len(lines) else b""
            yield from _items(res, raw, no)
    except Exception as exc:  # noqa: BLE001
        yield FileItem(None, dead_letter=DeadLetter(raw=b"", reason=f"internal error: {type(exc).__name__}: {exc}"))


_BENCH_MARK = bench_serving.BLOCK_START.encode()


def _lines(fh, ctx: ParseContext, fmt: str) -> Iterator[FileItem]:  # type: ignore[no-untyped-def]
    """The per-line loop: kept flat because it runs once per input line (see benchmarks/bench_parse.py)."""
    bench_block: list[tuple[int, str]] | None = None
    log_mode = fmt == "sglang_log"
    parse_log = sglang_log.parse_line
    for no, raw in enumerate(fh, start=1):
        ctx.line_no = no
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            line = raw.decode("utf-8", errors="replace")
        # bench_serving printouts can sit inside a console log: collect the block, parse it whole
        if bench_block is not None:
            bench_block.append((no, line))
            if line.strip().startswith("=" * 10):
                yield from _bench_block(bench_block, ctx)
                bench_block = None
            continue
        if log_mode and _BENCH_MARK in raw:
            bench_block = [(no, line)]
            continue
        try:
            # fast path: a bracketed SGLang log line needs no format dispatch
            res = parse_log(line, ctx) if log_mode and line[:1] == "[" else _parse_line(line, ctx, fmt)
        except Exception as exc:  # noqa: BLE001 - never raise on content
            res = f"internal error: {type(exc).__name__}: {exc}"[:300]
        if res.__class__ is list and res:
            for ev in res:  # type: ignore[union-attr]
                yield FileItem(no, ev)
        elif isinstance(res, str):
            yield FileItem(no, dead_letter=DeadLetter(raw=raw.rstrip(b"\r\n"), reason=res, line_no=no))
        else:
            yield FileItem(no)
    if bench_block is not None:
        yield from _bench_block(bench_block, ctx)


def _bench_block(block: list[tuple[int, str]], ctx: ParseContext) -> Iterator[FileItem]:
    text = "".join(line if line.endswith("\n") else line + "\n" for _, line in block)
    first = block[0][0]
    try:
        for rel, res in bench_serving.parse_document(text, ctx, line_offset=first - 1):
            idx = min(max(rel - 1, 0), len(block) - 1)
            no, line = block[idx]
            yield from _items(res, line.rstrip("\r\n").encode(), no)
    except Exception as exc:  # noqa: BLE001
        yield FileItem(first, dead_letter=DeadLetter(raw=b"", reason=f"internal error: {exc}", line_no=first))
