"""A seeded generator of hostile Kafka records, for the isolation tests and ``bench_hostile``.

Classes (``KINDS``): random bytes, mutated real SGLang log lines, truncated JSON, wrong types, out-of-range values,
NaN/infinity, huge lines (10 MB by default), valid events of unknown instances (to fill the twin cap), duplicate
deliveries and time-reordered events of a *victim* instance. Every record is keyed to an instance id that is not one
of the healthy instances, except ``wrong_types``/``out_of_range``/``nan_inf``/``truncated_json`` records, which also
name healthy instances (they must be refused before touching any twin).

``hostile_records(n, seed, healthy)`` returns ``n`` (key, value, kind) tuples; the same seed gives the same records.
"""
from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

KINDS: tuple[str, ...] = ("random_bytes", "mutated_line", "truncated_json", "wrong_types", "out_of_range", "nan_inf",
                          "huge_line", "unknown_instance", "duplicate", "reordered")
LOGS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "sglang_logs"
_DATED = re.compile(rb"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")
T0 = 1_800_000_000.0


def real_lines() -> list[bytes]:
    out = []
    for path in sorted(LOGS.glob("*.log")):
        out += [ln for ln in path.read_bytes().split(b"\n") if _DATED.match(ln) and b"batch" in ln]
    return out


def _event(rng: random.Random, iid: str, ts: float) -> dict[str, object]:
    k = rng.randrange(6)
    rid = f"h{rng.randrange(10**6)}"
    if k == 0:
        return {"kind": "request_arrived", "instance_id": iid, "ts": ts, "request_id": rid,
                "prompt_tokens": rng.randrange(1, 4096), "max_new_tokens": rng.randrange(1, 512)}
    if k == 1:
        return {"kind": "request_finished", "instance_id": iid, "ts": ts, "request_id": rid,
                "prompt_tokens": rng.randrange(1, 4096), "output_tokens": rng.randrange(0, 600),
                "ttft_s": rng.random(), "e2e_s": rng.random() * 30}
    if k == 2:
        return {"kind": "decode_batch", "instance_id": iid, "ts": ts, "running_reqs": rng.randrange(0, 300),
                "kv_tokens": rng.randrange(0, 10**6), "gen_throughput_tok_s": rng.random() * 5000}
    if k == 3:
        return {"kind": "prefill_batch", "instance_id": iid, "ts": ts, "new_seqs": rng.randrange(0, 64),
                "new_tokens": rng.randrange(0, 16384), "cached_tokens": rng.randrange(0, 16384)}
    if k == 4:
        return {"kind": "server_config", "instance_id": iid, "ts": ts, "tp_size": rng.choice([1, 2, 8]),
                "page_size": rng.choice([1, 16, 64]), "context_len": rng.choice([1, 2, 4096, 131072]),
                "chunked_prefill_size": rng.choice([-1, 512, 8192, 10**7]), "max_running_requests": rng.randrange(1, 9)}
    return {"kind": "forward_pass", "instance_id": iid, "ts": ts, "forward_mode": rng.choice(["decode", "prefill"]),
            "batch_size": rng.randrange(0, 512), "num_extend_tokens": rng.randrange(0, 8192),
            "duration_s": rng.random() * 0.2}


_OUT_OF_RANGE: tuple[tuple[str, object], ...] = (
    ("tp_size", 0), ("page_size", 0), ("max_running_requests", 0), ("tp_size", 10**6), ("prompt_tokens", 10**400),
    ("prompt_tokens", 10**30), ("ts", 1e308), ("ts", -1e9), ("new_seqs", 10**9), ("running_reqs", -1),
    ("kv_tokens", 10**30), ("duration_s", 1e300), ("e2e_s", -5.0), ("request_id", "x" * 100_000),
    ("token_ids", [0] * 5), ("block_hashes", [2**80]), ("priority", 2**62), ("context_len", 0),
)
_WRONG: tuple[object, ...] = ("seven", [1, 2], {"a": 1}, None, True, "1e999", "")


def _mutate(rng: random.Random, line: bytes) -> bytes:
    b = bytearray(line)
    for _ in range(rng.randrange(1, 6)):
        op = rng.randrange(4)
        i = rng.randrange(len(b)) if b else 0
        if op == 0 and b:
            b[i] = rng.randrange(256)
        elif op == 1 and b:
            del b[i:i + rng.randrange(1, 8)]
        elif op == 2:
            b[i:i] = rng.choice([b"9" * rng.randrange(1, 40), b"nan", b"-1", b"inf", b"\x00", b"\xff\xfe", b", ,"])
        else:
            b[i:i] = rng.randbytes(rng.randrange(1, 10))
    return bytes(b)


def _decodes(value: bytes, key: bytes) -> bool:
    from streams.decode import decode_record

    return bool(decode_record(value, key=key, fmt="auto").events)


def hostile_records(n: int, seed: int, healthy: Sequence[str], *, huge_bytes: int = 10 * 1024 * 1024,
                    huge_every: int = 20_000, base_ts: float = T0) -> list[tuple[bytes | None, bytes, str]]:
    """``n`` hostile records (see the module docstring). ``huge_every``: one huge line per that many records."""
    return list(iter_hostile(n, seed, healthy, huge_bytes=huge_bytes, huge_every=huge_every, base_ts=base_ts))


def iter_hostile(n: int, seed: int, healthy: Sequence[str], *, huge_bytes: int = 10 * 1024 * 1024,
                 huge_every: int = 20_000, base_ts: float = T0) -> Iterator[tuple[bytes | None, bytes, str]]:
    """``hostile_records`` one at a time (a million records with 10 MB lines need not be in memory at once)."""
    rng = random.Random(seed)
    lines = real_lines()
    victim = "victim-0"
    sent: list[tuple[bytes | None, bytes, str]] = []
    for i in range(n):
        ts = base_ts + i * 0.001
        if huge_every and i % huge_every == huge_every // 2:
            kind = "huge_line"
        else:
            kind = rng.choice([k for k in KINDS if k != "huge_line"])
        some = rng.choice(list(healthy) + [victim, f"fake-{rng.randrange(10**9)}"])
        if kind == "random_bytes":
            rec = (f"fake-{rng.randrange(10**9)}".encode(), rng.randbytes(rng.randrange(1, 600)))
        elif kind == "mutated_line":
            rec = (victim.encode(), _mutate(rng, rng.choice(lines)))
        elif kind == "truncated_json":
            doc = json.dumps({"schema_version": 1, **_event(rng, some, ts)}).encode()
            rec = (some.encode(), doc[: rng.randrange(1, len(doc) - 1)])
        elif kind == "wrong_types":
            ev = _event(rng, some, ts)
            field = rng.choice([k for k in ev if k not in ("kind", "instance_id")])
            ev[field] = rng.choice(_WRONG)
            rec = (some.encode(), json.dumps({"schema_version": 1, **ev}).encode())
        elif kind == "out_of_range":
            ev = _event(rng, some, ts)
            field, value = rng.choice(_OUT_OF_RANGE)
            ev[field] = value
            rec = (some.encode(), json.dumps({"schema_version": 1, **ev}).encode())
        elif kind == "nan_inf":
            ev = _event(rng, some, ts)
            field = rng.choice([k for k in ev if k not in ("kind", "instance_id")])
            ev[field] = rng.choice([float("nan"), float("inf"), float("-inf")])
            rec = (some.encode(), json.dumps({"schema_version": 1, **ev}).encode())  # NaN / Infinity literals
        elif kind == "huge_line":
            head = rng.choice(lines)
            rec = (victim.encode(), head + b" " + b"9" * max(0, huge_bytes - len(head) - 1))
        elif kind == "unknown_instance":
            iid = f"fake-{rng.randrange(10**9)}"
            rec = (iid.encode(), json.dumps({"schema_version": 1, **_event(rng, iid, ts)}).encode())
        elif kind == "duplicate" and sent:
            rec = rng.choice(sent)[:2]
        else:  # reordered (or a duplicate before anything was sent): the victim's event at a shuffled time
            ev = _event(rng, victim, ts - rng.random() * rng.choice([0.5, 30.0, 3600.0, 10 * 86400.0]))
            rec = (victim.encode(), json.dumps({"schema_version": 1, **ev}).encode())
        if rec[0] is not None and rec[0].decode() in healthy and _decodes(rec[1], rec[0]):
            # still a valid event (a wrong type pydantic converts, None for an optional field): not hostile to a
            # healthy instance, so it goes to the victim instead
            ev = json.loads(rec[1])
            ev["instance_id"] = victim
            rec = (victim.encode(), json.dumps(ev).encode())
        if kind in ("reordered", "unknown_instance", "mutated_line"):
            sent.append(rec)
            if len(sent) > 500:
                sent.pop(rng.randrange(len(sent)))
        yield rec[0], rec[1], kind
