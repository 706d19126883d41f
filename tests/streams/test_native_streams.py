"""The compiled ingest modules (setup.py's NATIVE_MODULES under ``streams``, Cython) decode exactly what their .py
sources decode, and the twins fed from them end in the same states (issue 11, speed).

Two fresh interpreters, one importing the compiled extensions and one with ``SHADOWSIM_PURE_PYTHON=1`` (the .py
sources, simcore/_native.py), each decode every line of the real SGLang logs in ``../shared/data/sglang_logs`` (as
keyed Kafka records through ``EventConsumer._decode_partition``, the consumer's fast path, and as records of
``decode_record``, the reference path), plus seeded mutations of those lines, and the ingest benchmark's 20,000
records (``benchmarks.bench_ingest.records``: the real batch lines of 13 instances with their time moved forward);
the benchmark's decoded records then go through one ``ShadowService``; the corpus and the benchmark's records, put into
kafka-python record batches, are read back by ``streams.kafka_records.FastPartitionRecords``. Every result must be identical: a digest of
each record's events (their JSON), its dead-letter reason, and of the twins' snapshots (one per instance and DP
rank; the decoded events being equal, so are the predictions made from them).
The compiled run must really have imported every ``streams`` module that was built, and the pure run none.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.native_build import REPO, built_file, native_modules

LOGS = REPO.parent / "shared" / "data" / "sglang_logs"
STREAMS_NATIVE = tuple(m for m in native_modules() if m.startswith("streams."))

_CHILD = r"""
import hashlib, json, random, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from kafka.consumer.fetcher import ConsumerRecord
from simcore import _native
from streams.decode import decode_record
from streams.kafka_io import EventConsumer, RecordDecoder
from benchmarks.bench_ingest import records

def consumer():
    c = object.__new__(EventConsumer)  # the decoding half of a consumer: no broker, dead letters only counted
    c._decode, c._dlq, c.dead_letter_topic, c.dead_letters = RecordDecoder("auto"), None, None, 0
    return c

def crec(partition, offset, key, value):
    return ConsumerRecord("t", partition, -1, offset, 1_780_000_000_000 + offset, 0, key, value, [], None,
                          len(key), len(value), -1)

out = {"n": {}}
def digest(name, items):
    h = hashlib.sha256()
    n = 0
    for item in items:
        h.update(item.encode()); h.update(b"\n"); n += 1
    out[name] = h.hexdigest(); out["n"][name] = n

def rec_text(r):
    return json.dumps([r.offset, r.key.decode() if r.key else None, r.error,
                       [e.model_dump_json() for e in r.events]])

lines, rng = [], random.Random(11)
for path in sorted(Path(sys.argv[2]).glob("*.log")):
    for line in path.read_bytes().split(b"\n"):
        lines.append((path.stem[:40].encode(), line))
mutated = []
for key, line in lines[::7]:  # seeded mutations: a byte changed, dropped or doubled, a digit run widened
    b = bytearray(line)
    for _ in range(rng.randint(1, 3)):
        if not b:
            break
        i = rng.randrange(len(b))
        op = rng.randrange(4)
        if op == 0: b[i] = rng.choice(b"0123456789,:. #[]-eE+x\r\x1b")
        elif op == 1: del b[i]
        elif op == 2: b.insert(i, b[i])
        else: b[i:i] = b"9" * rng.randint(1, 30)
    mutated.append((key, bytes(b)))
corpus = lines + mutated
# the consumer's fast path, one partition per log file's key as a shipper would send them
c = consumer()
decoded = []
for start in range(0, len(corpus), 2000):
    decoded += c._decode_partition([crec(0, start + i, k, v) for i, (k, v) in enumerate(corpus[start:start + 2000])])
digest("consumer", map(rec_text, decoded))
# the reference path: decode_record, each file's lines in one parse context
from streams.adapters.base import ParseContext
ctxs = {}
def ref(k, v):
    ctx = ctxs.setdefault(k, ParseContext(instance_id=k.decode(), source="t"))
    res = decode_record(v, key=k, source="t", fmt="auto", ctx=ctx)
    return json.dumps([[e.model_dump_json() for e in res.events], [d.reason for d in res.dead_letters]])
digest("decode_record", (ref(k, v) for k, v in corpus))
# the benchmark's records, decoded and applied
bench = records(20_000)
c = consumer()
recs = []
for start in range(0, len(bench), 2000):
    recs += c._decode_partition([crec(0, start + i, k, v) for i, (k, v) in enumerate(bench[start:start + 2000])])
digest("bench_records", map(rec_text, recs))
# the record-batch reader (streams.kafka_records): the corpus and the benchmark's records in kafka-python batches,
# read back 700 records per take (every field of every ConsumerRecord, then the position and metrics)
from kafka.record import MemoryRecords, MemoryRecordsBuilder
from kafka.structs import TopicPartition
from streams.kafka_records import FastPartitionRecords
def unpacked(pairs):
    data = b""
    for start in range(0, len(pairs), 1500):
        b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 26, offset=start)
        for i, (k, v) in enumerate(pairs[start:start + 1500]):
            b.append(timestamp=1_780_000_000_000 + 3 * i, key=k, value=v, headers=[(f"h{i % 3}", b"x")] * (i % 5 == 0))
        b.close()
        data += bytes(b.buffer())
    pr = FastPartitionRecords(0, TopicPartition("t", 0), MemoryRecords(data), check_crcs=True)
    while pr:
        for r in pr.take(700):
            yield repr(tuple(r))
    yield repr((pr.next_fetch_offset, pr.records_read, pr.bytes_read, pr.leader_epoch))
digest("unpacked", unpacked(corpus + bench))
from shadowsim.shadow.config import ShadowConfig, SnapshotConfig
from shadowsim.shadow.engine import engine_factory
from shadowsim.shadow.service import ShadowService
from shadowsim.shadow.sources import MemorySource
def apply(name, recs):
    with tempfile.TemporaryDirectory() as tmp:
        svc = ShadowService(ShadowConfig(snapshot=SnapshotConfig(dir=Path(tmp))),
                            lambda a, r: MemorySource(recs, a, r, batch=2000), engine_factory)
        svc.run(idle_timeout_s=0, poll_timeout_s=0, checkpoint_at_end=False)
        snaps = {iid: t.snapshot() for iid, t in sorted(svc.twins.items())}
        for s in snaps.values():
            s["stats"].pop("last_event_wall_ts", None)
        digest(name, (json.dumps(s, sort_keys=True, default=repr) for s in snaps.values()))
        out["n"][name] = len(snaps)
        out[name + "_applied"] = svc.counters["records_applied"]
apply("twins", recs)
out["compiled"] = sorted(m for m in _native.compiled_modules() if m.startswith("streams."))
print(json.dumps(out))
"""


def _run(pure: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "SHADOWSIM_PURE_PYTHON"}
    if pure:
        env["SHADOWSIM_PURE_PYTHON"] = "1"
    env["PYTHONHASHSEED"] = "0"
    res = subprocess.run([sys.executable, "-c", _CHILD, str(REPO), str(LOGS)], capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_compiled_ingest_modules_decode_and_apply_what_their_sources_do() -> None:
    assert LOGS.is_dir(), f"the real SGLang logs are not at {LOGS}"
    assert STREAMS_NATIVE, "setup.py lists no streams module"
    built = [m for m in STREAMS_NATIVE if built_file(m) is not None]
    not_built = set(STREAMS_NATIVE) - set(built)
    if os.environ.get("CI"):
        assert not not_built, f"CI builds every native module (`make venv`); not built: {sorted(not_built)}"
    elif not built:
        pytest.skip(f"no compiled module built for {STREAMS_NATIVE} (no C compiler or Cython?): `make native`")
    compiled, pure = _run(pure=False), _run(pure=True)
    assert pure["compiled"] == []
    assert compiled["compiled"] == sorted(built)  # the compiled path is the one that ran, where it was built
    # the corpus is the real one, and the comparison sees real work: events, dead letters, the twins of 13 instances
    assert compiled["n"]["consumer"] > 1500 and compiled["n"]["twins"] >= 13 and compiled["twins_applied"] > 15_000
    assert compiled["n"]["unpacked"] == compiled["n"]["consumer"] + 20_000 + 1
    for key in ("consumer", "decode_record", "bench_records", "twins", "n", "twins_applied", "unpacked"):
        assert compiled[key] == pure[key], (key, compiled[key], pure[key])
