"""Batch events built without pydantic's validation pass (``sglang_log._fast_batch``, issue 11 speed) are the events
the validator builds, and the fast path refuses every value the schema refuses (then the validator gives its own
reason), on every real SGLang log line in ``../shared/data/sglang_logs``, the ingest benchmark's records and seeded
mutated lines whose values sit on and across every bound of the schema.

The reference is the same parser with a parse context that never learns a line form (``_NoStore``): its batch lines
all go through ``_ITEM.findall`` and ``_VALIDATORS[kind]``. "The same event" is checked field by field: the
``__dict__`` items in order with their Python types (an ``int`` is not a ``float``, ``True`` is not ``1``),
``model_fields_set``, the extras and private slots, the JSON dump and ``==``."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pydantic
import pytest

from simcore import events as ev
from streams.adapters import sglang_log
from streams.adapters.base import ParseContext

LOGS = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "sglang_logs"


class _NoStore(dict):  # type: ignore[type-arg]
    """A parse context's scratch that keeps nothing: no learned line form, so no fast path."""

    def __setitem__(self, key: object, value: object) -> None:
        return None


def _same(got: Any, want: Any) -> bool:
    """Equal parse results, events compared in every part a consumer can see."""
    if not (isinstance(got, list) and isinstance(want, list)):
        return bool(got == want and type(got) is type(want))
    if len(got) != len(want):
        return False
    for a, b in zip(got, want):
        if type(a) is not type(b) or a != b:
            return False
        if [(k, type(v), v) for k, v in a.__dict__.items()] != [(k, type(v), v) for k, v in b.__dict__.items()]:
            return False
        if a.model_fields_set != b.model_fields_set or type(a.model_fields_set) is not type(b.model_fields_set):
            return False
        if (a.__pydantic_extra__, a.__pydantic_private__) != (b.__pydantic_extra__, b.__pydantic_private__):
            return False
        if a.model_dump_json() != b.model_dump_json() or a.model_dump() != b.model_dump():
            return False
    return True


def _fast_hits(line: str, ctx: ParseContext) -> bool:
    """Whether ``parse_line`` of ``line`` in ``ctx`` (before it runs) would take the fast path and build the event
    there: a batch line, a learned form with a fast plan, its body in that form and every value read
    (``_fast_batch``)."""
    m = sglang_log._BATCH_LINE.match(line.rstrip("\r\n"))
    if m is None or "\r" in line.rstrip("\r\n") or "\x1b" in line:
        return False
    kind = "prefill_batch" if m.group(5) != "Decode" else "decode_batch"
    shape = ctx.scratch.get(kind)
    if shape is None or shape[2] is None:
        return False
    body = line.rstrip("\r\n")[m.end():]
    if len(body) > sglang_log.MAX_BATCH_BODY_CHARS:
        return False
    probe = ParseContext(source=ctx.source, instance_id=ctx.instance_id, line_no=ctx.line_no + 1)
    sglang_log._batch_line(line.rstrip("\r\n"), probe)  # sets probe.last_ts as parse_line will
    ts = probe.last_ts
    src = ctx.source or None
    ranks = (sglang_log._TAGS_CACHE.get(m.group(4)) or sglang_log._ranks_of(m.group(4))) if m.group(4) else {}
    return sglang_log._fast_batch(shape[2], body, ts, ctx.instance_id, src,
                                  f"{ctx.source or '-'}:{ctx.line_no + 1}", ranks, m.group(6)) is not None


def _compare_streams(streams: list[tuple[ParseContext, list[str]]]) -> tuple[int, int]:
    """Parse each stream in its context and in a never-learning copy; every result must be the same. Returns
    (lines built by the fast path, batch lines with a fast plan whose values it refused)."""
    built = refused = 0
    for a, lines in streams:
        b = ParseContext(source=a.source, instance_id=a.instance_id, scratch=_NoStore())
        for line in lines:
            hit = _fast_hits(line, a)
            a.line_no += 1
            b.line_no += 1
            m = sglang_log._BATCH_LINE.match(line)
            if m is not None and not hit:
                kind = "prefill_batch" if m.group(5) != "Decode" else "decode_batch"
                shape = a.scratch.get(kind)
                refused += shape is not None and shape[2] is not None and shape[0].fullmatch(
                    line.rstrip("\r\n")[m.end():]) is not None
            got, want = sglang_log.parse_line(line, a), sglang_log.parse_line(line, b)
            assert _same(got, want), (line, got, want)
            assert (a.last_ts, a.day_epoch) == (b.last_ts, b.day_epoch), line
            if hit:
                assert isinstance(got, list) and len(got) == 1, (line, got)
                built += 1
    return built, refused


@pytest.fixture(autouse=True)
def _own_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sglang_log, "_SHAPES", {})  # the fuzzing below would fill the process-wide cap


def test_fast_batch_events_equal_the_validators_on_every_real_line() -> None:
    streams = [(ParseContext(source="t", instance_id=path.stem[:40]),
                path.read_text(encoding="utf-8", errors="replace").splitlines()) for path in sorted(LOGS.glob("*.log"))]
    assert len(streams) > 10, f"the real SGLang logs under {LOGS} are missing"
    built, _ = _compare_streams(streams)
    assert built > 150, built  # the comparison covers lines the fast path built


def test_fast_batch_events_equal_the_validators_on_the_benchmark_records() -> None:
    from benchmarks.bench_ingest import records  # noqa: PLC0415

    by_key: dict[bytes, list[str]] = {}
    for k, v in records(6000):
        by_key.setdefault(k, []).append(v.decode("utf-8", errors="replace"))
    streams = [(ParseContext(source="ingest", instance_id=k.decode()), lines) for k, lines in sorted(by_key.items())]
    built, _ = _compare_streams(streams)
    assert built > 4000, built


# values on and across the schema's bounds, and the lexical forms pydantic's lax parsing reads differently
_EDGE_INTS = ["0", "1", "007", "65535", "65536", "65537", "10000000", "10000001", "100000000", "100000001",
              "9999999999", "10000000000", "10000000001", "999999999999999999", "9999999999999999999", "-1", "-0",
              "+5", " 5", "5 ", "5_0", "5.0", "5.5", "1e3", "\u0663", "0x1f", "", "True", "1" * 40, "12,3"]
_EDGE_FLOATS = ["0", "0.0", "0.00", "0.81", "1.", ".5", "100", "100.0", "100.00", "100.000000000001", "100.01",
                "99.999999999999", "999999999", "1000000000", "1000000000.0", "1000000000.1", "896.73",
                "123456789012345", "1234567890123456", "12345.6789012345", "0.000000000000001",
                "0.0000000000000001", "1e2", "1E2", "-0.0", "-1", "+1.5", " 1.5", "1.5 ", "1_0.5", "nan", "inf",
                "0.5%", "12.50%", "12.5%%", "%", "1..5", "1.5.2", "\u0661.5", "True"]
_EDGE_BOOLS = ["True", "False", "true", "false", "1", "0", "yes", "on", "TRUE", " True", "True ", "t", "f", ""]
_EDGE_PERCENTS = ["0.00%", "12.50%", "100.00%", "100.01%", "10000%", "10000.01%", "0.5", "100", "100.5", "%",
                  " 12.5%", "12.5% ", "12.5%%", "1e1%", "-1%", "nan%", "12.5 %"]


def _edge_value(rng: random.Random, field: str, kind: str) -> str:
    rule = sglang_log._field_rule(ev.KIND_TO_CLASS[kind], field)
    if field == "cache_hit_rate":
        return rng.choice(_EDGE_PERCENTS + _EDGE_FLOATS)
    if rule is None or rule[0] == sglang_log._RULE_BOOL:
        return rng.choice(_EDGE_BOOLS)
    if rule[0] == sglang_log._RULE_INT:
        return rng.choice(_EDGE_INTS) if rng.random() < 0.8 else str(rng.randint(0, 10**rng.randint(1, 19)))
    if rng.random() < 0.7:
        return rng.choice(_EDGE_FLOATS)
    return f"{rng.randint(0, 10**rng.randint(0, 10))}.{rng.randint(0, 10**rng.randint(0, 8))}"


def _mutated_streams(rng: random.Random, n: int) -> list[tuple[ParseContext, list[str]]]:
    """Each stream: one real batch line's form, repeated with edge values in its items, rank tags, iteration
    numbers and dates that cross the schema's bounds, in a context whose instance id or source may be too long or
    not ASCII."""
    real = [x for p in sorted(LOGS.glob("*.log")) for x in p.read_text(encoding="utf-8", errors="replace").splitlines()
            if sglang_log._BATCH_LINE.match(x)]
    assert len(real) > 200
    streams = []
    for _ in range(n):
        line = rng.choice(real)
        m = sglang_log._BATCH_LINE.match(line)
        kind = "prefill_batch" if m.group(5) != "Decode" else "decode_batch"
        fields = sglang_log._PREFILL_FIELDS if kind == "prefill_batch" else sglang_log._DECODE_FIELDS
        body = line[m.end():].rstrip("\r\n")
        items = [it.rpartition(": ") for it in body.rstrip(", ").split(", ")]
        iid = rng.choice(["i-1"] * 8 + ["x" * 512, "x" * 513, "inst\u00e9", "\u2003i"])
        source = rng.choice(["t"] * 8 + ["", "s" * 1018, "s" * 1030, "t\u00e9"])
        lines = []
        for j in range(rng.randint(1, 12)):
            out = []
            for k, sep, v in items:
                f = fields.get(k)
                if f is not None and sep and j > 0 and rng.random() < 0.1:
                    v = _edge_value(rng, f, kind)
                out.append(f"{k}{sep}{v}")
            date = "2026-06-01" if rng.random() < 0.9 else rng.choice(["2286-11-20", "2286-11-21", "1969-12-24",
                                                                        "1969-12-25", "9999-12-31"])
            tags = rng.choice(["", " TP0", " DP5 TP5", " TP1023", " TP1024", " DP99999 TP0", " PP3 EP7", " XX4",
                               " ATTN_CP0", " TP\u0663"]) if rng.random() < 0.15 else m.group(4)
            it = rng.choice([""] * 10 + [" [7]", " [0]", "[12]", " [999999999999999999]", " [9223372036854775807]",
                             " [9223372036854775808]", " [\u0663]", " [0007]"])
            word = "Prefill batch" if kind == "prefill_batch" else "Decode batch"
            lines.append(f"[{date} 00:00:{j:02d}.{rng.randint(0, 999):03d}{tags}] {word}{it}. " + ", ".join(out)
                         + rng.choice(["", "", ", ", "\r"]))
        streams.append((ParseContext(source=source, instance_id=iid), lines))
    return streams


def test_fast_batch_refuses_exactly_what_the_validator_refuses_on_mutated_lines() -> None:
    """Seeded mutations at every bound: the same events, or the same dead-letter reason, as the validator; both
    outcomes occur on the fast plan's lines (values it builds, values it hands to the validator, which refuses
    some and accepts others in forms this does not read, such as ``007.5`` or ``True``-like text)."""
    built, refused = _compare_streams(_mutated_streams(random.Random(29), 6000))
    assert built > 6000 and refused > 10000, (built, refused)


def test_the_text_readers_equal_int_float_and_pydantic() -> None:
    """``_int_span`` / ``_dec_span`` on random numeric text: where they read a value it is ``int()`` / ``float()``
    of the text, and pydantic's lax int / float of it; where they refuse, the text is outside their plain form."""
    rng = random.Random(31)
    as_int = pydantic.TypeAdapter(int).validate_python
    as_float = pydantic.TypeAdapter(float).validate_python
    read_int = read_float = 0
    for _ in range(60_000):
        n = rng.randint(0, 20)
        s = "".join(rng.choice("0123456789" if rng.random() < 0.9 else "0123456789.-+_e %\u0663 ") for _ in range(n))
        i = sglang_log._int_span(s, 0, len(s))
        if i >= 0:
            read_int += 1
            assert s.isascii() and s.isdigit() and len(s) <= 18 and i == int(s) == as_int(s), s
        else:
            assert not (s.isascii() and s.isdigit() and 0 < len(s) <= 18), s
        x = sglang_log._dec_span(s, 0, len(s))
        if x >= 0.0:
            read_float += 1
            assert type(x) is float and x == float(s) == as_float(s), s
            assert str(x) == str(float(s)), s  # the same double, not only an equal one
        else:
            plain = s.replace(".", "", 1)
            assert not (plain.isascii() and plain.isdigit() and len(plain) <= 15 and not s.startswith(".")
                        and not s.endswith(".")), s
    assert read_int > 10_000 and read_float > 10_000


def test_the_fast_path_knows_the_schema_it_enforces() -> None:
    """The bounds come from the event classes themselves: a bound changed in simcore/events.py is the one checked."""
    pre = sglang_log._FAST_CLASSES["prefill_batch"]
    assert (pre.ts_lo, pre.ts_hi) == (ev.MIN_TS, ev.MAX_TS) and pre.id_max == ev.MAX_ID_CHARS
    assert pre.source_max == pre.event_id_max == ev.MAX_TEXT_CHARS
    assert pre.ranks == {f"{r}_rank": (0, ev.MAX_RANK) for r in ("dp", "tp", "pp", "ep")}
    assert sglang_log._field_rule(ev.PrefillBatch, "new_seqs") == (sglang_log._RULE_INT, 0, ev.MAX_BATCH_REQS)
    assert sglang_log._field_rule(ev.DecodeBatch, "kv_tokens") == (sglang_log._RULE_INT, 0, ev.MAX_KV_TOKENS)
    assert sglang_log._field_rule(ev.DecodeBatch, "gen_throughput_tok_s") == (sglang_log._RULE_FLOAT, 0.0,
                                                                               ev.MAX_RATE)
    assert sglang_log._field_rule(ev.DecodeBatch, "cuda_graph") == (sglang_log._RULE_BOOL, None, None)
    assert list(pre.template) == list(ev.PrefillBatch.model_fields)


def test_a_model_config_the_fast_path_does_not_copy_sends_every_line_to_the_validator(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # e.g. str_strip_whitespace: pydantic would strip ' inst ' to 'inst', the fast path would keep it
    assert set(sglang_log._fast_classes()) == {"prefill_batch", "decode_batch"}
    cls = sglang_log.KIND_TO_CLASS["decode_batch"]
    monkeypatch.setitem(cls.model_config, "str_strip_whitespace", True)
    assert set(sglang_log._fast_classes()) == {"prefill_batch"}
