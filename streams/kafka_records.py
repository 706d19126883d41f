"""A faster per-record path through kafka-python's fetcher, for the records the shadow reads.

kafka-python (3.0.x) turns every record of a fetched batch into a ``DefaultRecord`` (``_read_msg``: seven calls of
the pure-Python ``decode_varint``), then into a ``ConsumerRecord`` through two deserializer calls and a header
sum, in a generator per partition (``Fetcher.PartitionRecords._unpack_records``): about a tenth of the consumer's
CPU per record in the ingest benchmark. ``FastPartitionRecords`` does the same work for the common batch — record
format v2 (magic 2), uncompressed, no deserializers, ``read_uncommitted`` — in one loop: one- and two-byte
varints (every field of a log-line record: lengths of a few hundred bytes, time and offset deltas within a batch)
decoded inline, longer ones by kafka-python's own ``decode_varint``, the ``ConsumerRecord`` built as the tuple it
is. Every check of the original stays: the batch CRC (``check_crcs``,
kafka-python's C ``crc32c``), a record whose fields do not add up to its length, a negative header count or key
size, bytes left after the last record (``CorruptRecordError``, with kafka-python's messages); control batches are
skipped as the original skips them; every other batch (compressed, legacy formats) and every other configuration
goes through kafka-python's code unchanged. ``tests/streams/test_kafka_records.py`` checks that both give equal
records, offsets and metrics on batches with keys, null keys and values, headers, multi-byte lengths, a fetch
offset inside a batch, partial takes, compressed batches, and that corrupt batches fail alike.

``install(consumer)`` puts it into one ``KafkaConsumer``'s fetcher (an attribute of that fetcher only); it does
nothing when the fetcher is not the kafka-python it was written against.
"""
from __future__ import annotations

import logging
from typing import Any

from kafka.consumer.fetcher import ConsumerRecord, Fetcher
from kafka.errors import CorruptRecordError
from kafka.protocol.consumer import IsolationLevel
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.util import decode_varint

log = logging.getLogger(__name__)

_Base: Any = getattr(Fetcher, "PartitionRecords", None)
_new_tuple = tuple.__new__


def _header_size(headers: list[tuple[str, bytes | None]]) -> int:
    return sum(len(k.encode("utf-8")) + (len(v) if v is not None else 0) for k, v in headers) if headers else -1


if _Base is not None:
    class FastPartitionRecords(_Base):  # type: ignore[misc, valid-type]
        """``Fetcher.PartitionRecords`` with the fast path described in the module docstring."""

        def _unpack_records(self, tp: Any, records: Any, key_deserializer: Any, value_deserializer: Any) -> Any:
            if (key_deserializer is not None or value_deserializer is not None
                    or self.isolation_level != IsolationLevel.READ_UNCOMMITTED):
                yield from super()._unpack_records(tp, records, key_deserializer, value_deserializer)
                return
            topic, partition = tp.topic, tp.partition
            varint = decode_varint
            try:
                batch = records.next_batch()
                last_batch = None
                while batch is not None:
                    last_batch = batch
                    if self.check_crcs and not batch.validate_crc():
                        raise CorruptRecordError("Record batch for partition %s at offset %s failed crc check" % (
                            self.topic_partition, batch.base_offset))
                    magic = batch.magic
                    if magic == 2:
                        self.leader_epoch = batch.leader_epoch
                        if batch.is_control_batch:
                            self.next_fetch_offset = batch.next_offset
                            batch = records.next_batch()
                            continue
                    if magic != 2 or batch.compression_type != DefaultRecordBatch.CODEC_NONE:
                        yield from self._slow_batch(tp, batch)
                        batch = records.next_batch()
                        continue
                    buf = batch._buffer  # noqa: SLF001 - the batch's bytes, as its own _read_msg reads them
                    pos = batch._pos  # noqa: SLF001
                    base = batch.base_offset
                    ts_type = batch.timestamp_type
                    first_ts = batch.first_timestamp
                    append_ts = batch.max_timestamp if ts_type == DefaultRecordBatch.LOG_APPEND_TIME else None
                    epoch = self.leader_epoch
                    for _ in range(batch.records_count):
                        try:
                            b = buf[pos]
                            if b < 0x80:
                                length = (b >> 1) ^ -(b & 1)
                                pos += 1
                            elif buf[pos + 1] < 0x80:  # two bytes: decode_varint's arithmetic, written out
                                b = (b & 0x7f) | (buf[pos + 1] << 7)
                                length = (b >> 1) ^ -(b & 1)
                                pos += 2
                            else:
                                length, pos = varint(buf, pos)
                            start = pos
                            b = buf[pos]  # attributes (unused, as in kafka-python)
                            if b < 0x80:
                                pos += 1
                            else:
                                _, pos = varint(buf, pos)
                            b = buf[pos]
                            if b < 0x80:
                                ts_delta = (b >> 1) ^ -(b & 1)
                                pos += 1
                            elif buf[pos + 1] < 0x80:  # two bytes: decode_varint's arithmetic, written out
                                b = (b & 0x7f) | (buf[pos + 1] << 7)
                                ts_delta = (b >> 1) ^ -(b & 1)
                                pos += 2
                            else:
                                ts_delta, pos = varint(buf, pos)
                            b = buf[pos]
                            if b < 0x80:
                                offset_delta = (b >> 1) ^ -(b & 1)
                                pos += 1
                            elif buf[pos + 1] < 0x80:  # two bytes: decode_varint's arithmetic, written out
                                b = (b & 0x7f) | (buf[pos + 1] << 7)
                                offset_delta = (b >> 1) ^ -(b & 1)
                                pos += 2
                            else:
                                offset_delta, pos = varint(buf, pos)
                            b = buf[pos]
                            if b < 0x80:
                                key_len = (b >> 1) ^ -(b & 1)
                                pos += 1
                            elif buf[pos + 1] < 0x80:  # two bytes: decode_varint's arithmetic, written out
                                b = (b & 0x7f) | (buf[pos + 1] << 7)
                                key_len = (b >> 1) ^ -(b & 1)
                                pos += 2
                            else:
                                key_len, pos = varint(buf, pos)
                            if key_len >= 0:
                                key = bytes(buf[pos:pos + key_len])
                                pos += key_len
                            else:
                                key = None
                            b = buf[pos]
                            if b < 0x80:
                                value_len = (b >> 1) ^ -(b & 1)
                                pos += 1
                            elif buf[pos + 1] < 0x80:  # two bytes: decode_varint's arithmetic, written out
                                b = (b & 0x7f) | (buf[pos + 1] << 7)
                                value_len = (b >> 1) ^ -(b & 1)
                                pos += 2
                            else:
                                value_len, pos = varint(buf, pos)
                            if value_len >= 0:
                                value = bytes(buf[pos:pos + value_len])
                                pos += value_len
                            else:
                                value = None
                            b = buf[pos]
                            if b < 0x80:
                                header_count = (b >> 1) ^ -(b & 1)
                                pos += 1
                            else:
                                header_count, pos = varint(buf, pos)
                            if header_count < 0:
                                raise CorruptRecordError(f"Found invalid number of record headers {header_count}")
                            headers: list[tuple[str, bytes | None]] = []
                            while header_count:
                                h_key_len, pos = varint(buf, pos)
                                if h_key_len < 0:
                                    raise CorruptRecordError(f"Invalid negative header key size {h_key_len}")
                                h_key = buf[pos:pos + h_key_len].decode("utf-8")
                                pos += h_key_len
                                h_value_len, pos = varint(buf, pos)
                                if h_value_len >= 0:
                                    h_value: bytes | None = bytes(buf[pos:pos + h_value_len])
                                    pos += h_value_len
                                else:
                                    h_value = None
                                headers.append((h_key, h_value))
                                header_count -= 1
                            if pos - start != length:
                                raise CorruptRecordError(
                                    f"Invalid record size: expected to read {length} bytes in record payload, but "
                                    f"instead read {pos - start}")
                        except (ValueError, IndexError) as err:
                            raise CorruptRecordError(f"Found invalid record structure: {err!r}") from None
                        offset = base + offset_delta
                        self.records_read += 1
                        self.bytes_read += length
                        self.next_fetch_offset = offset + 1
                        yield _new_tuple(ConsumerRecord, (
                            topic, partition, epoch, offset, append_ts if append_ts is not None else first_ts + ts_delta,
                            ts_type, key, value, headers, None, len(key) if key is not None else -1,
                            len(value) if value is not None else -1, _header_size(headers) if headers else -1))
                    if pos != len(buf):
                        raise CorruptRecordError(f"{len(buf) - pos} unconsumed bytes after all records consumed")
                    batch = records.next_batch()
                else:
                    if last_batch and last_batch.magic == 2:
                        self.next_fetch_offset = last_batch.next_offset
                    self.drain()
            except StopIteration:  # as kafka-python: a StopIteration inside a generator must not end it silently
                log.exception("StopIteration raised unpacking messageset")
                raise RuntimeError("StopIteration raised unpacking messageset") from None

        def _slow_batch(self, tp: Any, batch: Any) -> Any:
            """kafka-python's per-record loop (``_unpack_records``) for one batch it reads itself."""
            for record in batch:
                if self.check_crcs and not record.validate_crc():
                    raise CorruptRecordError("Record for partition %s at offset %s failed crc check" % (
                        self.topic_partition, record.offset))
                key, value, headers = record.key, record.value, record.headers
                self.records_read += 1
                self.bytes_read += record.size_in_bytes
                self.next_fetch_offset = record.offset + 1
                yield ConsumerRecord(tp.topic, tp.partition, self.leader_epoch, record.offset, record.timestamp,
                                     record.timestamp_type, key, value, headers, record.checksum,
                                     len(key) if key is not None else -1, len(value) if value is not None else -1,
                                     _header_size(headers) if headers else -1)
else:  # pragma: no cover - another kafka-python: keep its own path
    FastPartitionRecords = None  # type: ignore[assignment, misc]


def install(consumer: Any) -> bool:
    """Use ``FastPartitionRecords`` in ``consumer``'s fetcher; False (and nothing changed) when this kafka-python
    has no such fetcher class."""
    fetcher = getattr(consumer, "_fetcher", None)
    if FastPartitionRecords is None or fetcher is None or getattr(fetcher, "PartitionRecords", None) is not _Base:
        return False
    fetcher.PartitionRecords = FastPartitionRecords
    return True
