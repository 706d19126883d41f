"""The log parser's fast paths give what its reference paths give (issue 11, speed): the greedy batch-item regex
against the lazy one it replaced, the timestamp header against its previous implementation, and the Kafka
decoder's one-line fast path against ``decode_record``, on every line of the real SGLang logs in
``../shared/data/sglang_logs`` and on seeded fuzzed text (timestamps with odd fractions, digits, separators)."""
from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from streams.adapters import log_prefix, sglang_log
from streams.adapters.base import ParseContext
from streams.decode import decode_record
from streams.kafka_io import RecordDecoder

LOGS = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "sglang_logs"


def _real_lines() -> list[str]:
    lines = []
    for path in sorted(LOGS.glob("*.log")):
        lines.extend(path.read_text(encoding="utf-8", errors="replace").splitlines())
    return lines


@pytest.fixture(scope="module")
def real_lines() -> list[str]:
    lines = _real_lines()
    assert len(lines) > 1000, f"the real SGLang logs under {LOGS} are missing"
    return lines


def _fuzz_text(rng: random.Random, n: int) -> list[str]:
    alphabet = [",", ":", " ", ": ", ", ", ",: ", "a", "#", "\t", "\u2003", "\x1c", "x", "1", ".", "é", "%",
                "token usage", "#new-seq", "#running-req"]
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(n)]


def test_batch_item_regex_equals_the_lazy_reference_on_real_and_fuzzed_text(real_lines: list[str]) -> None:
    bodies = [line.split("] ", 1)[-1] for line in real_lines]  # every line, batch lines (300+) among them
    assert sum("batch" in b for b in bodies) > 300
    fuzz = _fuzz_text(random.Random(11), 50_000)
    differ = [b for b in bodies + fuzz if sglang_log._ITEM.findall(b) != sglang_log._ITEM_REFERENCE.findall(b)]
    assert differ == []
    # the comparison can fail: a near miss (no leading ``\s*``) differs from the reference on this input
    near_miss = re.compile(r"([^,:]+): ([^,]*)")
    assert any(near_miss.findall(b) != sglang_log._ITEM_REFERENCE.findall(b) for b in bodies + fuzz)


def _reference_fast_header(line: str, ctx: ParseContext) -> tuple[str, dict[str, int]] | None:
    """``log_prefix._fast_header`` as it was before issue 11's speed work (commit d0e738c), verbatim."""
    if len(line) < 22 or line[5] != "-" or line[11] != " " or line[14] != ":" or line[17] != ":":
        return None
    close = line.find("]", 20, 120)
    if close < 0:
        return None
    day = log_prefix._date_epoch(line[1:11])
    try:
        secs = float(int(line[12:14]) * 3600 + int(line[15:17]) * 60 + int(line[18:20]))
    except ValueError:
        return None
    if day is None:
        return None
    rest = line[20:close]
    ranks = log_prefix._NO_RANKS
    if rest:
        if rest[0] in ".,":
            end = 1
            while end < len(rest) and rest[end].isdigit():
                end += 1
            if end == 1:
                return None
            secs += log_prefix.frac(rest[1:end])
            rest = rest[end:]
        if rest:
            if rest[0] != " ":
                return None
            ranks = log_prefix._ranks_of(rest)
    ctx.day_epoch = day
    ctx.last_ts = day + secs
    start = close + 2 if line[close + 1:close + 2] == " " else close + 1
    return line[start:], ranks


def _fuzz_headers(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        frac = rng.choice(["", ".", ",", ".5", ".25", ".250", ".1234", ".123456", ".12x", ".٣٤٥", ",001", ".0000001"])
        tags = rng.choice(["", " TP0", " DP5 TP5", " PP1 TP3 EP2", "x", " TP", " ATTN_CP0 MOE_DP1", " ",
                           " " + "TP1 " * rng.randint(20, 27), " handler.py:169 INFO"])
        day = rng.choice(["2025-01-07", "2026-06-01", "2024-02-29", "2025-13-40", "20x5-01-07"])
        clock = rng.choice(["20:16:02", "00:00:00", "23:59:59", "2x:00:00", "12:3x:00", "12:30:6x"])
        sep = rng.choice(["] ", "]", "]  ", "]] ", ""])
        out.append(f"[{day} {clock}{frac}{tags}{sep}" + rng.choice(["Decode batch. #running-req: 3, #token: 90, ", "",
                                                                 "[2025-01-07 20:16:03 TP1] x"]))
    return out


def test_header_fast_path_equals_its_reference(real_lines: list[str]) -> None:
    dated = [line for line in real_lines if line[:1] == "[" and line[1:2].isdigit()]
    fuzz = _fuzz_headers(random.Random(7), 20_000)
    read = 0
    for line in dated + fuzz:
        fast_ctx, ref_ctx = ParseContext(), ParseContext()
        fast = log_prefix._fast_header(line, fast_ctx)
        ref = _reference_fast_header(line, ref_ctx)
        assert (fast, fast_ctx.last_ts, fast_ctx.day_epoch) == (ref, ref_ctx.last_ts, ref_ctx.day_epoch), line
        read += fast is not None
    assert read > 1000 and read < len(dated) + len(fuzz)  # both accepted and refused headers were compared


def test_kafka_one_line_fast_path_equals_decode_record(real_lines: list[str]) -> None:
    """RecordDecoder's fast path (keyed one-line record straight to the log parser) against the general
    decode_record, line by line, with the same parse context carried along (timestamps inherited)."""
    dec = RecordDecoder("auto")
    ctx = ParseContext(source="topic", instance_id="i-1")
    ctx.scratch["instance_fixed"] = True
    events = 0
    for line in real_lines:
        raw = line.encode()
        if not raw.startswith(b"["):
            continue
        fast_events, fast_error = dec(raw, b"i-1", "topic", 0, [], 1.7e9)
        ref = decode_record(raw, key=b"i-1", source="topic", fmt="auto", timestamp_s=1.7e9, ctx=ctx)
        ref_error = "; ".join(d.reason for d in ref.dead_letters) if ref.dead_letters else None
        assert (fast_events, fast_error) == (list(ref.events), ref_error), line
        events += len(fast_events)
    assert events > 250


def test_the_consumers_partition_loop_equals_decoding_record_by_record(real_lines: list[str]) -> None:
    """EventConsumer._decode_partition (the decoder's fast path written out in the consumer's loop) gives the same
    ConsumedRecords and dead letters as _decode_one record by record: real log lines of three keys, keyless and
    headed records, tombstones, multi-line and oversized values, lines that fail to parse, fuzzed text."""
    from kafka.consumer.fetcher import ConsumerRecord

    from streams.kafka_io import EventConsumer

    rng = random.Random(5)
    values: list[bytes | None] = [line.encode() for line in real_lines if line.strip()]
    values += [("[2026-01-01 00:00:00 TP0] " + t).encode() for t in _fuzz_text(rng, 3000)]
    values += [b"[2026-01-01 00:00:01] Prefill batch. #new-seq: 1000000000, #new-token: 5, #cached-token: 0",
               b"[2026-01-01 00:00:02] Decode batch. #running-req: x", b"[a\nb]", b"[" + b"x" * 300, None, b"{}"]
    recs = []
    for i, value in enumerate(values):
        key = (None, b"", b"i-1", b"i-2", b"i-3")[min(4, rng.randrange(7))]
        headers = [("h", b"v")] if rng.random() < 0.02 else []
        recs.append(ConsumerRecord("topic", i % 2, None, i, 1_700_000_000_000 + i if i % 5 else -1, 0, key, value,
                                   headers, None, -1, -1, -1))

    def consumer(max_bytes: int) -> EventConsumer:
        c = EventConsumer.__new__(EventConsumer)  # no broker: decoding and dead-letter counting only
        c._decode, c._dlq, c.dead_letter_topic, c.dead_letters = RecordDecoder("auto", max_bytes), None, None, 0
        return c

    fast, slow = consumer(400), consumer(400)  # the longest lines: too_large
    got = fast._decode_partition(recs)
    want = [slow._decode_one(r) for r in recs]
    assert got == want and fast.dead_letters == slow.dead_letters
    assert sum(1 for r in got if r.events) > 150 and 0 < sum(1 for r in got if r.error) < len(got)
    assert any((r.error or "").startswith("too_large") for r in got)


def _fuzz_batch_lines(rng: random.Random, n: int) -> list[str]:
    heads = _fuzz_headers(rng, n)
    msgs = ["Prefill batch. #new-seq: 1, #new-token: 313, #cached-token: 0, token usage: 0.00, #queue-req: 0",
            "Prefil batch, #new-seq: 2, #new-token: 5, #cached-token: 1, cache hit rate: 12.50%",
            "Decode batch [7], #running-req: 3, #token: 90, gen throughput (token/s): 1.5, ",
            "Decode batch. #running-req: x", "Decode batch[٣]. #running-req: 1", "Decode batch.#running-req: 1",
            "Prefill batch. #new-seq: 1000000000, #new-token: 5, #cached-token: 0", "Decode out of memory happened.",
            "Decode batch. #running-req: 1, #token: 2765, pre-allocated usage: 0.00, cuda graph: True\r",
            " Decode batch. #running-req: 1", "Decode  batch. #running-req: 1"]
    out = []
    for h in heads:
        head = h.split("]", 1)[0] + rng.choice(["] ", "]", "]  ", "] \x1b[0m"]) if "]" in h else h
        out.append(head + rng.choice(msgs) + rng.choice(["", "\r", "\r\n", "\n", "\rprogress"]))
    return out


def test_the_batch_line_fast_path_equals_the_general_path(real_lines: list[str]) -> None:
    """``parse_line`` reads a dated batch line in one match (``_batch_line``); on every real log line and on seeded
    fuzzed batch lines (headers of every form, fractions, rank tags, iteration numbers, bad values, CRs, ANSI codes)
    it gives the general path's events or reason and leaves the parse context as that path does."""
    fuzz = _fuzz_batch_lines(random.Random(17), 30_000)
    fast_hits = {"real": 0, "fuzz": 0}
    for where, line in [("real", x) for x in real_lines] + [("fuzz", x) for x in fuzz]:
        a, b = ParseContext(source="t", instance_id="i", line_no=3), ParseContext(source="t", instance_id="i",
                                                                                  line_no=3)
        a.last_ts = b.last_ts = 1.0
        got, want = sglang_log.parse_line(line, a), sglang_log._parse_line_general(line, b)
        assert (got, a.last_ts, a.day_epoch) == (want, b.last_ts, b.day_epoch), repr(line)
        hit = sglang_log._batch_line(line.rstrip("\r\n"), ParseContext()) is not sglang_log._NOT_FAST
        fast_hits[where] += hit
    # both paths taken: the comparison covers the fast path and its refusals
    assert fast_hits["real"] > 200 and 100 < fast_hits["fuzz"] < len(fuzz) / 2, fast_hits


class _NoStore(dict):  # type: ignore[type-arg]
    """A parse context's scratch that keeps nothing: the batch parser never learns a line form (``_shape``)."""

    def __setitem__(self, key: object, value: object) -> None:
        return None


_ODD_VALUES = ["", " ", "1,2", "3:4", "x", "0.5%", "1e3", "  7", "٣", "\u2003", "nan", "-1", "1" * 40, "True",
               "7 ", "0.81: 2", "1\t", "inf", "12.50%"]
_ODD_SEPARATORS = [",", ",  ", ", \t", ",\u2003", " ,", ",\x1c", ", ,", ",, "]


def _mutate_batch_body(rng: random.Random, body: str) -> str:
    items = body.rstrip(", ").split(", ")
    for _ in range(rng.randint(0, 3)):
        op, i = rng.randrange(9), rng.randrange(len(items))
        k, _, v = items[i].rpartition(": ")
        if op <= 2:  # a value the line's form still matches, or one that changes it
            items[i] = f"{k}: {rng.choice(_ODD_VALUES)}"
        elif op == 3:
            del items[i]
        elif op == 4:
            items.insert(i, items[i])  # a key twice: the first one is kept
        elif op == 5:
            items.insert(i, rng.choice(["new key: 5", "PD-decode: pre-allocated usage: 0.1", "mfu: 0.3"]))
        elif op == 6:
            items[i] = rng.choice([" ", "\u2003", "#", ""]) + items[i]  # a key starting with whitespace, ...
        elif op == 7:
            j = rng.randrange(len(items))
            items[i], items[j] = items[j], items[i]
        else:
            items[i] = f"{k[:1]}{rng.choice([',', ':', ': ', ' '])}{k[1:]}: {v}"
    seps = [", " if rng.random() < 0.8 else rng.choice(_ODD_SEPARATORS) for _ in items[1:]]
    out = items[0] + "".join(s + it for s, it in zip(seps, items[1:]))
    return rng.choice(["", "", " ", "\t"]) + out + rng.choice(["", ", ", ",", ",  ", " ", ", x", ",\u2003"])


def test_learned_batch_line_forms_read_what_findall_reads(real_lines: list[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream's batch lines are read by the form learned from its previous line of that kind (``_shape``: one
    ``fullmatch`` instead of ``_ITEM.findall``). On every real log line, each file in one parse context, and on
    seeded mutations of the real batch lines in one context (values that keep or break the form, keys dropped,
    doubled, swapped, added, or starting with whitespace, other separators and endings), the events or reason and
    the parse context equal those of a context that never learns a form."""
    monkeypatch.setattr(sglang_log, "_SHAPES", {})  # its own forms: the fuzzing fills the process-wide cap
    rng = random.Random(23)
    batch_lines = [x for x in real_lines if sglang_log._BATCH_LINE.match(x)]
    assert len(batch_lines) > 200
    fuzz = []
    for _ in range(30_000):
        line = rng.choice(batch_lines)
        m = sglang_log._BATCH_LINE.match(line)
        fuzz.append(line[:m.end()] + _mutate_batch_body(rng, line[m.end():]))
    streams = [[x for x in path.read_text(encoding="utf-8", errors="replace").splitlines()]
               for path in sorted(LOGS.glob("*.log"))] + [fuzz]
    used = learned_used = 0
    for lines in streams:
        a = ParseContext(source="t", instance_id="i")
        b = ParseContext(source="t", instance_id="i", scratch=_NoStore())
        for line in lines:
            a.line_no += 1
            b.line_no += 1
            m = sglang_log._BATCH_LINE.match(line)
            if m is not None:
                shape = a.scratch.get("prefill_batch" if m.group(5) != "Decode" else "decode_batch")
                used += shape is not None
                learned_used += shape is not None and shape[0].fullmatch(line[m.end():].rstrip("\r\n")) is not None
            got, want = sglang_log.parse_line(line, a), sglang_log.parse_line(line, b)
            assert (got, a.last_ts, a.day_epoch) == (want, b.last_ts, b.day_epoch), repr(line)
    assert len(b.scratch) == 0 and len(sglang_log._SHAPES) <= sglang_log.MAX_SHAPES
    # both taken: lines read by a learned form, and lines the form refused (then read by findall)
    assert learned_used > 2_000 and used - learned_used > 3_000, (used, learned_used)


_HEAD_ALPHABET = ["0", "9", "5", "٣", "A", "Z", "P", "D", "T", "_", "a", " ", "  ", "]", "[", ".", ",", ":", "-",
                  "l", "\t", "\u2003", "é", "", "]]", "TP", "DP1", " batch", "Prefill", "Decode", "[12]", "[ 1]"]


def _mutate_header(rng: random.Random, line: str) -> str:
    """A batch line with one to three edits in its first 70 characters (the header, the kind, the iteration), or cut
    short anywhere in them."""
    if rng.random() < 0.15:
        return line[:rng.randint(0, min(len(line), 70))]
    for _ in range(rng.randint(1, 3)):
        i = rng.randint(0, min(len(line), 70))
        op = rng.random()
        piece = rng.choice(_HEAD_ALPHABET)
        if op < 0.4:
            line = line[:i] + piece + line[i + 1:]
        elif op < 0.7:
            line = line[:i] + piece + line[i:]
        else:
            line = line[:i] + line[i + rng.randint(1, 4):]
    return line


def test_the_batch_line_header_scan_reads_what_the_header_regex_reads(real_lines: list[str]) -> None:
    """``_batch_line`` reads the header, kind and iteration one character at a time (compiled: C code points);
    ``_batch_line_regex`` reads them with ``_BATCH_LINE``'s match, as it did before. On every real line, on the
    seeded fuzzed batch lines above and on 60,000 seeded edits of the real batch lines' first 70 characters (ASCII
    and non-ASCII digits, rank tags, brackets, separators, the kind's words, cuts): the same result (events or reason,
    or both refusing), the same ``last_ts`` and ``day_epoch`` (their ``repr``), the same learned form."""
    rng = random.Random(23)
    batch = [x.rstrip("\r\n") for x in real_lines if " batch" in x and x[:1] == "["]
    retractions = [x.rstrip("\r\n") for x in real_lines if "#retracted_reqs" in x and x[:1] == "["]
    retractions += [x.replace("Decode out of memory happened.", "KV cache pool is full. Retract requests.")
                    for x in retractions]
    assert len(batch) > 200 and len(retractions) > 20
    batch += retractions * 8
    lines = [x.rstrip("\r\n") for x in real_lines] + [x.rstrip("\r\n") for x in _fuzz_batch_lines(rng, 10_000)]
    lines += [_mutate_header(rng, rng.choice(batch)) for _ in range(60_000)]
    lines += ["[2025-01-07 20:16:03.123 " + "TP" * 40 + "1] Decode batch. #running-req: 1",  # bracket at >= 120
              "[2025-01-07 20:16:03.123 " + "TP" * 30 + "1] Decode batch. #running-req: 1"]
    taken = refused = retracted = 0
    for line in lines:
        a, b = ParseContext(source="t", instance_id="i", line_no=3), ParseContext(source="t", instance_id="i",
                                                                                  line_no=3)
        a.last_ts = b.last_ts = 1.0
        got, want = sglang_log._batch_line(line, a), sglang_log._batch_line_regex(line, b)
        if want is sglang_log._NOT_FAST:
            # the regex read batch lines only; the scan reads retraction lines too (compared with the general path
            # below)
            retraction = got is not sglang_log._NOT_FAST
            assert not retraction or "#retracted_reqs" in line, repr(line)
            refused += not retraction
        else:
            assert got == want, repr(line)
            taken += 1
            retraction = False
        if not retraction:
            assert (repr(a.last_ts), repr(a.day_epoch)) == (repr(b.last_ts), repr(b.day_epoch)), repr(line)
        assert {k: v[0].pattern for k, v in a.scratch.items()} == {k: v[0].pattern for k, v in b.scratch.items()}
        # and what parse_line gives (the scan also reads retraction lines) is the general path's
        a, b = ParseContext(source="t", instance_id="i", line_no=3), ParseContext(source="t", instance_id="i",
                                                                                  line_no=3)
        a.last_ts = b.last_ts = 1.0
        got, want = sglang_log.parse_line(line, a), sglang_log._parse_line_general(line, b)
        assert (got, repr(a.last_ts), repr(a.day_epoch)) == (want, repr(b.last_ts), repr(b.day_epoch)), repr(line)
        if got and getattr(got[0], "kind", None) == "retraction":
            retracted += 1
    assert taken > 8_000 and refused > 15_000 and retracted > 2_000, (taken, refused, retracted)
