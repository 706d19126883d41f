"""streams.kafka_records: the fast per-record path through kafka-python's fetcher gives exactly what kafka-python's
own ``Fetcher.PartitionRecords`` gives — records, offsets, metrics, and the same failures on corrupt input — on
batches built by kafka-python's own ``MemoryRecordsBuilder`` (the bytes a broker returns)."""
from __future__ import annotations

import random
from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka.consumer.fetcher import Fetcher
from kafka.errors import CorruptRecordError
from kafka.record import MemoryRecords, MemoryRecordsBuilder
from kafka.structs import TopicPartition

from streams.kafka_records import FastPartitionRecords, install

TP = TopicPartition("sglang.events", 3)


def _batches(specs: list[dict[str, Any]]) -> bytes:
    out = b""
    offset = 0
    for spec in specs:
        b = MemoryRecordsBuilder(magic=spec.get("magic", 2), compression_type=spec.get("compression", 0),
                                 batch_size=1 << 24, offset=offset)
        for k, (key, value, headers) in enumerate(spec["records"]):
            b.append(timestamp=1_700_000_000_000 + 7 * k + offset, key=key, value=value, headers=headers)
        b.close()
        out += bytes(b.buffer())
        offset += len(spec["records"])
    return out


def _records(rng: random.Random, n: int) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    out = []
    for _ in range(n):
        key = None if rng.random() < 0.1 else bytes(rng.getrandbits(8) for _ in range(rng.choice((0, 3, 40, 200))))
        value = None if rng.random() < 0.05 else bytes(rng.getrandbits(8) for _ in range(
            rng.choice((0, 1, 63, 64, 200, 5000, 70_000))))  # one-, two- and three-byte varint lengths
        headers = [] if rng.random() < 0.7 else [(f"h{j}é", None if rng.random() < 0.3 else b"v" * rng.randint(0, 300))
                                                 for j in range(rng.randint(1, 3))]
        out.append((key, value, headers))
    return out


def _read(cls: Any, data: bytes, fetch_offset: int = 0, takes: tuple[int, ...] = ()) -> tuple[list[Any], tuple]:
    parts = cls(fetch_offset, TP, MemoryRecords(data), check_crcs=True)
    got: list[Any] = []
    for n in takes:
        got += parts.take(n)
    got += parts.take()
    return got, (parts.next_fetch_offset, parts.records_read, parts.bytes_read, parts.leader_epoch)


@pytest.mark.parametrize("seed", range(4))
def test_the_fast_path_reads_what_kafka_python_reads(seed: int) -> None:
    rng = random.Random(seed)
    specs = [{"records": _records(rng, rng.randint(1, 60))} for _ in range(4)]
    specs.insert(2, {"records": _records(rng, 20), "compression": 1})  # gzip: kafka-python's own loop
    specs.append({"records": [(k, v, []) for k, v, _ in _records(rng, 5)], "magic": 1})  # legacy: kafka-python's
    data = _batches(specs)
    total = sum(len(s["records"]) for s in specs)
    for fetch_offset, takes in ((0, ()), (0, (1, 7, 30)), (total // 3, (5,)), (total - 1, ())):
        want, want_state = _read(Fetcher.PartitionRecords, data, fetch_offset, takes)
        got, got_state = _read(FastPartitionRecords, data, fetch_offset, takes)
        assert got == want and got_state == want_state
        assert len(got) == total - fetch_offset
    assert [r.headers for r in got] == [r.headers for r in want]


def test_real_log_records_read_alike() -> None:
    from benchmarks.bench_ingest import records

    recs = records(3000)
    data = _batches([{"records": [(k, v, []) for k, v in recs[i:i + 1000]]} for i in range(0, 3000, 1000)])
    want, want_state = _read(Fetcher.PartitionRecords, data)
    got, got_state = _read(FastPartitionRecords, data)
    assert got == want and got_state == want_state and [r.value for r in got] == [v for _, v in recs]


@pytest.mark.parametrize("where", [-1, -3, 70, 75, 90])
def test_corrupt_batches_fail_alike(where: int) -> None:
    data = bytearray(_batches([{"records": _records(random.Random(9), 10)}]))
    data[where] ^= 0x5A
    errors = []
    for cls in (Fetcher.PartitionRecords, FastPartitionRecords):
        with pytest.raises(CorruptRecordError) as exc:
            _read(cls, bytes(data))
        errors.append(str(exc.value).split(":")[0])
    assert errors[0] == errors[1]  # both the crc check here


def test_corrupt_records_without_crc_checks_fail_alike() -> None:
    """With check_crcs off the record structure itself must be refused: a record length that does not match."""
    data = bytearray(_batches([{"records": [(b"k", b"v" * 10, [])] * 3}]))
    data[61] += 2  # the first record's length varint (zigzag: +1)
    for cls in (Fetcher.PartitionRecords, FastPartitionRecords):
        parts = cls(0, TP, MemoryRecords(bytes(data)), check_crcs=False)
        with pytest.raises(CorruptRecordError, match="Invalid record size|invalid record structure"):
            parts.take()


def test_install_puts_it_into_one_consumer_only() -> None:
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:1", api_version=(2, 5))
    other = KafkaConsumer(bootstrap_servers="127.0.0.1:1", api_version=(2, 5))
    try:
        assert install(consumer)
        assert consumer._fetcher.PartitionRecords is FastPartitionRecords
        assert other._fetcher.PartitionRecords is Fetcher.PartitionRecords
    finally:
        consumer.close()
        other.close()


def _outcome(cls: Any, data: bytes, fetch_offset: int, takes: tuple[int, ...], check_crcs: bool) -> tuple:
    """Everything a reader gives for ``data`` taken ``takes`` at a time: the records of each take, or the error a
    take raised (its class and message), and the position and metrics after each take."""
    parts = cls(fetch_offset, TP, MemoryRecords(data), check_crcs=check_crcs)
    out: list[Any] = []
    for n in (*takes, None, None, None):
        if not parts:
            out.append("drained")
            break
        try:
            out.append(("records", parts.take(n)))
        except Exception as exc:  # noqa: BLE001 - compared between the two readers
            out.append(("error", type(exc).__name__, str(exc)))
        out.append((parts.next_fetch_offset, parts.records_read, parts.bytes_read, parts.leader_epoch))
    return tuple(out)


def _fix_crcs(data: bytearray) -> None:
    """Recompute the CRC of every record-format-v2 batch in ``data`` whose framing is still readable, so that a
    mutation inside a batch reaches the record parser with check_crcs on."""
    from kafka.record.util import calc_crc32c

    pos = 0
    while pos + 61 <= len(data):
        size = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        end = pos + 12 + size
        if size < 49 or end > len(data):
            return
        if data[pos + 16] == 2:
            data[pos + 17:pos + 21] = calc_crc32c(memoryview(data)[pos + 21:end]).to_bytes(4, "big")
        pos = end


@pytest.mark.parametrize("seed", range(6))
def test_fuzzed_batches_read_alike(seed: int) -> None:
    """Seeded mutations of real and random batches (bytes changed, inserted, dropped, varints lengthened, the batch
    cut short), with CRCs checked, recomputed or not checked: the fast reader returns the same records, positions
    and metrics as kafka-python's, take after take, and raises the same error (class and message) at the same
    take."""
    from benchmarks.bench_ingest import records

    rng = random.Random(1000 + seed)
    real = records(400)
    base_specs = [
        [{"records": [(k, v, []) for k, v in real[:150]]}, {"records": [(k, v, []) for k, v in real[150:400]]}],
        [{"records": _records(rng, 30)}, {"records": _records(rng, 12), "compression": 1},
         {"records": _records(rng, 25)}],
    ]
    kinds = {"same": 0, "error": 0}
    for trial in range(150):
        data = bytearray(_batches(base_specs[trial % 2]))
        for _ in range(rng.randint(1, 4)):
            op, i = rng.randrange(5), rng.randrange(61, len(data))
            if op == 0:
                data[i] = rng.getrandbits(8)
            elif op == 1:
                data[i:i] = bytes([rng.getrandbits(8) | 0x80])  # a varint made a byte longer (or garbage)
            elif op == 2:
                del data[i]
            elif op == 3:
                data[i] ^= 1 << rng.randrange(8)
            else:
                del data[rng.randrange(61, len(data)):]  # a truncated fetch
        mode = trial % 3  # CRCs checked as they are (mostly refused), recomputed, or not checked
        if mode == 1:
            _fix_crcs(data)
        total = sum(len(s["records"]) for s in base_specs[trial % 2])
        fetch_offset = rng.choice((0, 0, rng.randrange(total)))
        takes = tuple(rng.choice((1, 5, 40, 200)) for _ in range(rng.randint(0, 3)))
        want = _outcome(Fetcher.PartitionRecords, bytes(data), fetch_offset, takes, mode != 2)
        got = _outcome(FastPartitionRecords, bytes(data), fetch_offset, takes, mode != 2)
        assert got == want, (trial, takes, fetch_offset, mode)
        errors = [o for o in want if isinstance(o, tuple) and o[0] == "error"]
        kinds["error" if errors else "same"] += 1
        if errors and len(want) > 1 and want[0][0] == "records" and want[0][1]:
            kinds["records_then_error"] = kinds.get("records_then_error", 0) + 1
    # every outcome really exercised: clean reads, errors, and records returned before an error
    assert kinds["error"] >= 30 and kinds["same"] >= 10 and kinds.get("records_then_error", 0) >= 5, kinds
