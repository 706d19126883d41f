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
