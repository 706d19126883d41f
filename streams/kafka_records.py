"""A faster per-record path through kafka-python's fetcher, for the records the shadow reads.

kafka-python (3.0.x) turns every record of a fetched batch into a ``DefaultRecord`` (``_read_msg``: seven calls of
the pure-Python ``decode_varint``), then into a ``ConsumerRecord`` through two deserializer calls and a header
sum, in a generator per partition (``Fetcher.PartitionRecords._unpack_records``) that ``take`` drains through
``itertools.dropwhile`` and ``islice``: about a tenth of the consumer's CPU per record in the ingest benchmark.
``FastPartitionRecords`` does the same work for the common batch — record format v2 (magic 2), uncompressed, no
deserializers, ``read_uncommitted`` — in ``take`` itself: ``_BatchReader`` reads the batch's bytes record by
record (compiled: setup.py ``NATIVE_MODULES`` with ``kafka_records.pxd``, the bytes read as C bytes and the
varints decoded in C), no generator, no ``DefaultRecord``, the ``ConsumerRecord`` built as the tuple it is.

A record whose varints are all one or two bytes long and that has no headers (every log-line record: lengths of a
few hundred bytes, time and offset deltas within a batch) is read by ``_BatchReader._next``'s first part, which
only accepts a record lying wholly inside the batch whose fields add up to its length; anything else (a longer
varint, headers, a length that does not add up, the end of the bytes) is read again from its first byte by
``_general``, kafka-python's ``_read_msg`` written out (kafka-python's own ``decode_varint``, Python integers), which
gives kafka-python's record or its ``CorruptRecordError``. Every check of the original stays: the batch CRC
(``check_crcs``, kafka-python's C ``crc32c``), a record whose fields do not add up to its length, a negative header
count or key size, bytes left after the last record (with kafka-python's messages), at the same record: records
before a corrupt one are returned, the error is raised by the next ``take`` (as kafka-python's generator raises it
on the next record). Control batches are skipped as the original skips them; every other batch (compressed, legacy
formats) is read by kafka-python's own per-record loop (``_slow_batch``), and every other configuration
(deserializers, ``read_committed``) by kafka-python's ``take`` unchanged. Records before the fetch offset (a fetch
that starts inside a batch) are read and dropped as ``dropwhile`` drops them. ``tests/streams/test_kafka_records.py``
checks that both give equal records, offsets and metrics on batches with keys, null keys and values, headers,
multi-byte lengths, a fetch offset inside a batch, partial takes, compressed and legacy batches, seeded fuzzed
batches, and that corrupt batches fail alike after the same records.

``install(consumer)`` puts it into one ``KafkaConsumer``'s fetcher (an attribute of that fetcher only); it does
nothing when the fetcher is not the kafka-python it was written against.
"""
from __future__ import annotations

import logging
from itertools import islice
from typing import Any

try:
    import cython  # compiled (setup.py NATIVE_MODULES, with kafka_records.pxd): Cython's directives
except ImportError:  # pragma: no cover - a machine without Cython runs the .py as it is
    from simcore import _pure_cython as cython

from kafka.consumer.fetcher import ConsumerRecord, Fetcher
from kafka.errors import CorruptRecordError
from kafka.protocol.consumer import IsolationLevel
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.util import decode_varint

log = logging.getLogger(__name__)

_Base: Any = getattr(Fetcher, "PartitionRecords", None)
_new_tuple = tuple.__new__
_CODEC_NONE = DefaultRecordBatch.CODEC_NONE
_LOG_APPEND_TIME = DefaultRecordBatch.LOG_APPEND_TIME
#: a batch's base offset and first timestamp within this of zero take a delta of at most 2^13 (a two-byte varint)
#: in C without overflow; a batch beyond it is read by ``_general`` (Python integers)
_SMALL = 1 << 62

if not cython.compiled:  # compiled: C functions (kafka_records.pxd)
    def _bytes(data: bytearray, start: int, n: int) -> bytes:
        return bytes(data[start:start + n])  # PyBytes_FromStringAndSize; 0 <= n and start + n <= len(data) here


def _header_size(headers: list[tuple[str, bytes | None]]) -> int:
    return sum(len(k.encode("utf-8")) + (len(v) if v is not None else 0) for k, v in headers) if headers else -1


class _BatchReader:
    """The records of one uncompressed record-format-v2 batch after another (``start``), read from the batch's
    bytes (``DefaultRecordBatch._buffer`` from its ``_pos``) as ``DefaultRecordBatch._read_msg`` reads them.
    ``records_read``, ``bytes_read`` and ``next_offset`` are what the records read since the owner last took them
    add to its metrics and position (``FastPartitionRecords._flush``)."""

    def __init__(self, topic: str, partition: int, skip_below: int) -> None:
        self.topic = topic
        self.partition = partition
        self.skip_below = skip_below  # records below the fetch offset are read, counted and dropped...
        self.skipping = True  # ...until the first one at or above it (itertools.dropwhile)
        self.data = bytearray()
        self.pos = self.end = self.left = 0
        self.base = self.first_ts = 0
        self.small = self.bad = False
        self.base_obj: Any = 0
        self.first_ts_obj: Any = 0
        self.append_ts: Any = None
        self.ts_type: Any = 0
        self.epoch: Any = -1
        self.next_offset: Any = None
        self.records_read = 0
        self.bytes_read = 0

    def start(self, batch: Any, epoch: Any) -> None:
        """Read ``batch`` (magic 2, uncompressed, CRC checked) next."""
        self.data = batch._buffer  # noqa: SLF001 - the batch's bytes, as its own _read_msg reads them
        self.pos = batch._pos  # noqa: SLF001
        self.end = len(self.data)
        self.left = batch.records_count
        self.base_obj = batch.base_offset
        self.first_ts_obj = batch.first_timestamp
        self.small = -_SMALL < self.base_obj < _SMALL and -_SMALL < self.first_ts_obj < _SMALL
        if self.small:
            self.base = self.base_obj
            self.first_ts = self.first_ts_obj
        self.ts_type = batch.timestamp_type
        self.append_ts = batch.max_timestamp if self.ts_type == _LOG_APPEND_TIME else None
        self.epoch = epoch

    def read(self, out: list[Any], n: int) -> int:
        """Append up to ``n`` records of this batch (``n`` < 0: all it has left) to ``out``, records before the fetch
        offset read and dropped; the number appended. Raises ``CorruptRecordError`` at a corrupt record (the
        records before it are in ``out``)."""
        got = 0
        while self.left > 0 and got != n:
            rec = self._next()
            self.left -= 1
            if self.skipping:
                if rec[3] < self.skip_below:
                    continue
                self.skipping = False
            out.append(rec)
            got += 1
        return got

    def _v(self) -> int:
        """The one- or two-byte zigzag varint at ``pos`` (``decode_varint``'s value), ``pos`` moved past it; a
        longer one or the end of the bytes sets ``bad`` instead (the record is then read by ``_general``)."""
        pos = self.pos
        if pos < self.end:
            b = self.data[pos]
            if b < 0x80:
                self.pos = pos + 1
                return (b >> 1) ^ -(b & 1)
            if pos + 1 < self.end:
                c = self.data[pos + 1]
                if c < 0x80:
                    b = (b & 0x7f) | (c << 7)
                    self.pos = pos + 2
                    return (b >> 1) ^ -(b & 1)
        self.bad = True
        return 0

    def _next(self) -> Any:
        """The next record (a ``ConsumerRecord``), its size, offset and next offset counted."""
        first = self.pos
        if self.small:
            self.bad = False
            length = self._v()
            start = self.pos
            self._v()  # attributes (unused, as in kafka-python)
            ts_delta = self._v()
            offset_delta = self._v()
            key_len = self._v()
            key = value = None
            if not self.bad and key_len >= 0:
                if key_len <= self.end - self.pos:
                    key = _bytes(self.data, self.pos, key_len)
                    self.pos += key_len
                else:
                    self.bad = True
            value_len = self._v()
            if not self.bad and value_len >= 0:
                if value_len <= self.end - self.pos:
                    value = _bytes(self.data, self.pos, value_len)
                    self.pos += value_len
                else:
                    self.bad = True
            header_count = self._v()
            if not self.bad and header_count == 0 and self.pos - start == length:
                offset = self.base + offset_delta
                self.records_read += 1
                self.bytes_read += length
                self.next_offset = offset + 1
                return _new_tuple(ConsumerRecord, (
                    self.topic, self.partition, self.epoch, offset,
                    self.append_ts if self.append_ts is not None else self.first_ts + ts_delta, self.ts_type,
                    key, value, [], None, len(key) if key is not None else -1,
                    len(value) if value is not None else -1, -1))
            self.pos = first
        return self._general()

    def _general(self) -> Any:
        """``_next`` for any record: ``DefaultRecordBatch._read_msg`` (and its ``__next__``'s error) written out."""
        buf, pos = self.data, self.pos
        varint = decode_varint
        try:
            length, pos = varint(buf, pos)
            start = pos
            _, pos = varint(buf, pos)  # attributes (unused, as in kafka-python)
            ts_delta, pos = varint(buf, pos)
            offset_delta, pos = varint(buf, pos)
            key_len, pos = varint(buf, pos)
            if key_len >= 0:
                key = bytes(buf[pos:pos + key_len])
                pos += key_len
            else:
                key = None
            value_len, pos = varint(buf, pos)
            if value_len >= 0:
                value = bytes(buf[pos:pos + value_len])
                pos += value_len
            else:
                value = None
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
        self.pos = pos
        offset = self.base_obj + offset_delta
        self.records_read += 1
        self.bytes_read += length
        self.next_offset = offset + 1
        return _new_tuple(ConsumerRecord, (
            self.topic, self.partition, self.epoch, offset,
            self.append_ts if self.append_ts is not None else self.first_ts_obj + ts_delta, self.ts_type,
            key, value, headers, None, len(key) if key is not None else -1,
            len(value) if value is not None else -1, _header_size(headers) if headers else -1))


if _Base is not None:
    class FastPartitionRecords(_Base):  # type: ignore[misc, valid-type]
        """``Fetcher.PartitionRecords`` with the fast path described in the module docstring."""

        def __init__(self, fetch_offset: int, tp: Any, records: Any, key_deserializer: Any = None,
                     value_deserializer: Any = None, check_crcs: bool = True,
                     isolation_level: Any = IsolationLevel.READ_UNCOMMITTED, aborted_transactions: Any = None,
                     metric_aggregator: Any = None, on_drain: Any = lambda x: None) -> None:
            super().__init__(fetch_offset, tp, records, key_deserializer=key_deserializer,
                             value_deserializer=value_deserializer, check_crcs=check_crcs,
                             isolation_level=isolation_level, aborted_transactions=aborted_transactions,
                             metric_aggregator=metric_aggregator, on_drain=on_drain)
            # kafka-python's generator (record_iterator) stays for every other configuration
            self._fast = (key_deserializer is None and value_deserializer is None
                          and isolation_level == IsolationLevel.READ_UNCOMMITTED)
            self._records = records
            self._reader = _BatchReader(tp.topic, tp.partition, fetch_offset)
            self._slow: Any = None  # the records of a batch kafka-python reads itself (_slow_batch)
            self._last_batch: Any = None
            self._check_end = False  # the reader's batch is read to its last record: check no bytes are left
            self._ended = False  # an error ended the reading, as it ends kafka-python's generator

        def take(self, n: int | None = None) -> list[Any]:
            if not self._fast:
                return super().take(n)
            self._maybe_raise_next_inline_exception()
            records: list[Any] = []
            if self.record_iterator is None or self._ended:
                return records
            try:
                if n is not None and n < 0:
                    list(islice((), 0, n))  # islice's own ValueError, as kafka-python's take raises it
                self._fill(records, -1 if n is None else n)
            except Exception as e:  # noqa: BLE001 - kafka-python's take: raised now or at the next take
                self._ended = True
                if not records:
                    raise
                self._next_inline_exception = e
            return records

        def _fill(self, out: list[Any], need: int) -> None:
            """Append up to ``need`` records (``need`` < 0: every one left) to ``out``, batch after batch."""
            reader = self._reader
            try:
                while need != 0:
                    if reader.left > 0:
                        got = reader.read(out, need)
                        if need > 0:
                            need -= got
                        continue
                    if self._slow is not None:
                        before = len(out)
                        out.extend(islice(self._slow, None if need < 0 else need))
                        got = len(out) - before
                        if need < 0 or got < need:
                            self._slow = None  # that batch is read
                        if need > 0:
                            need -= got
                        continue
                    if self._check_end:
                        self._check_end = False
                        if reader.pos != reader.end:
                            raise CorruptRecordError(f"{reader.end - reader.pos} unconsumed bytes after all records "
                                                     "consumed")
                    if not self._next_batch():
                        return
            finally:
                self._flush()

        def _next_batch(self) -> bool:
            """Move to the next batch of the fetch (False, and the records drained, at the end)."""
            self._flush()  # the reader's position first: a batch read otherwise sets the position itself
            records = self._records
            batch = records.next_batch()
            while batch is not None:
                self._last_batch = batch
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
                if magic != 2 or batch.compression_type != _CODEC_NONE:
                    self._slow = self._slow_batch(self.topic_partition, batch)
                else:
                    self._reader.start(batch, self.leader_epoch)
                    self._check_end = True
                return True
            last = self._last_batch
            if last is not None and last.magic == 2:
                self.next_fetch_offset = last.next_offset
            self.drain()
            return False

        def _flush(self) -> None:
            """Add what the reader read to the metrics and the position."""
            reader = self._reader
            if reader.records_read:
                self.records_read += reader.records_read
                self.bytes_read += reader.bytes_read
                reader.records_read = reader.bytes_read = 0
            if reader.next_offset is not None:
                self.next_fetch_offset = reader.next_offset
                reader.next_offset = None

        def _slow_batch(self, tp: Any, batch: Any) -> Any:
            """kafka-python's per-record loop (``_unpack_records``) for one batch it reads itself, records before
            the fetch offset dropped (``dropwhile``)."""
            reader = self._reader
            for record in batch:
                if self.check_crcs and not record.validate_crc():
                    raise CorruptRecordError("Record for partition %s at offset %s failed crc check" % (
                        self.topic_partition, record.offset))
                key, value, headers = record.key, record.value, record.headers
                self.records_read += 1
                self.bytes_read += record.size_in_bytes
                self.next_fetch_offset = record.offset + 1
                if reader.skipping:
                    if record.offset < reader.skip_below:
                        continue
                    reader.skipping = False
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
