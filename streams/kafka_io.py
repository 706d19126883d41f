"""Kafka I/O with kafka-python: an event producer and a consumer with explicit commits and dead letters.

Design rules (issue 4, part B):

* **Message key = instance id**, so the default (murmur2) partitioner puts all events of one SGLang instance on
  one partition, in order.
* **Raw bytes in, validation in our code.** The consumer never deserialises inside kafka-python; each record's
  bytes are decoded here. A record that does not decode becomes a dead letter (``streams.deadletter``) and the
  partition moves on: a bad record never blocks a partition.
* **Manual commits only** (``enable_auto_commit=False``), with explicit offsets the caller computed *after*
  processing: ``commit({(topic, partition): next_offset})``. Dead letters are flushed before each commit, so a
  committed offset never skips a bad record whose dead letter was lost.
* **Producers use ``acks=all``.**
* **No duplicate dead letters across owners** (``dedupe_dead_letters=True``): a member killed after producing a
  dead letter but before its offsets were saved leaves a dead letter the next owner would produce again. So the
  first time a partition yields a bad record after an assignment, the consumer reads the dead-letter partition it
  maps to and skips records already parked there. This costs one read of that dead-letter partition per
  assignment that sees a bad record; turn it off when the dead-letter topic is huge and readers de-duplicate on
  the source headers instead.
* **Non-blocking rebalance listener.** kafka-python calls the listener inside ``poll()``, in the middle of the
  group protocol. Ours only records what changed. ``poll_batch`` then calls the caller's ``on_revoke`` /
  ``on_assign`` from the owning loop, where they may restore snapshots and ``seek``. Records fetched in the same
  poll for a partition the callback seeked are dropped (they would be from the old position); the next poll
  fetches from the new one.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import CommitFailedError, KafkaError
from kafka.structs import OffsetAndMetadata

from simcore.events import Event, event_to_json
from streams.deadletter import (DEFAULT_MAX_DEAD_LETTER_BYTES, MAX_DEAD_LETTER_KEY_BYTES, cut_key, dead_letter_headers,
                                error_text, truncate_value)

log = logging.getLogger(__name__)

DEFAULT_TOPIC = "sglang.events"
DEFAULT_DLQ_TOPIC = "sglang.events.dlq"

#: records longer than this are dead-lettered undecoded (reason too_large): no parser is asked to scan them
MAX_RECORD_BYTES = 16 * 1024 * 1024

#: bytes fetched per partition per request (kafka-python's max_partition_fetch_bytes; its default is 1 MiB)
MAX_PARTITION_FETCH_BYTES = 4 * 1024 * 1024

TP = tuple[str, int]  # (topic, partition): plain tuples in our interface, kafka-python's TopicPartition inside


class RecordDecoder:
    """The default decoder: ``streams.decode.decode_record`` in format ``fmt``, one parse context per
    (partition, key) so lines without their own timestamp inherit the previous line's, as in a file.

    ``fmt="auto"`` accepts canonical events *and* raw SGLang output as shippers send it (lines that are not
    SGLang's are skipped quietly); ``fmt="events"`` accepts canonical event JSON only and dead-letters the rest.
    """

    def __init__(self, fmt: str = "auto", max_record_bytes: int = MAX_RECORD_BYTES) -> None:
        from streams.decode import FORMATS  # noqa: PLC0415

        if fmt not in FORMATS:
            raise ValueError(f"unknown record format {fmt!r}; choose one of {', '.join(FORMATS)}")
        self.fmt = fmt
        self._contexts: dict[tuple[str, int, bytes | None], Any] = {}
        self._fast = fmt in ("auto", "sglang_log")
        self.max_record_bytes = max_record_bytes
        from streams.adapters.base import ParseContext  # noqa: PLC0415
        from streams.adapters.sglang_log import parse_line  # noqa: PLC0415
        from streams.decode import decode_record  # noqa: PLC0415

        # bound once here: an import statement in __call__ costs a module lookup per record
        self._parse_log_line, self._decode_record, self._context_class = parse_line, decode_record, ParseContext

    def reset(self) -> None:
        """Forget parse contexts (after a rebalance the partitions may have moved)."""
        self._contexts.clear()

    def __call__(self, value: bytes, key: bytes | None, topic: str, partition: int,
                 headers: list[tuple[str, bytes]], timestamp_s: float | None) -> tuple[list[Event], str | None]:
        if len(value) > self.max_record_bytes:
            return [], f"too_large: record of {len(value)} bytes (at most {self.max_record_bytes})"
        ckey = (topic, partition, key)
        ctx = self._contexts.get(ckey)
        if ctx is None:
            if len(self._contexts) > 10_000:  # keys are instance ids, so this only trips on a key-less flood
                self._contexts.clear()
            ctx = self._contexts[ckey] = self._context_class(source=topic)
            if key:
                iid = key.decode("utf-8", errors="replace").strip()
                if iid:
                    ctx.instance_id = iid
                    ctx.scratch["instance_fixed"] = True
        if self._fast and key and value[:1] == b"[" and value.find(b"\n", 0, len(value) - 1) < 0:
            # The commonest record, one bracketed SGLang log line with its instance as key: straight to the log
            # parser (what decode_record would do, without its per-record dispatch; ctx already names the instance)
            if timestamp_s is not None:
                ctx.default_ts = timestamp_s
            ctx.line_no += 1
            try:
                got = self._parse_log_line(value.decode("utf-8", errors="replace"), ctx)
            except Exception as exc:  # noqa: BLE001 - never raise on content
                return [], f"internal error: {type(exc).__name__}: {exc}"[:300]
            if got.__class__ is list:
                return got, None  # type: ignore[return-value]
            return [], (got if isinstance(got, str) else None)
        res = self._decode_record(value, key=key, source=topic, headers=dict(headers), fmt=self.fmt,
                                  timestamp_s=timestamp_s, ctx=ctx)
        error = "; ".join(d.reason for d in res.dead_letters) if res.dead_letters else None
        return list(res.events), error


@dataclass(frozen=True)
class ConsumedRecord:
    """One Kafka record after decoding. ``error`` is set when the record was parked as a dead letter (then
    ``events`` is usually empty); a record with neither events nor error was skipped (not SGLang output)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    events: list[Event] = field(default_factory=list)
    error: str | None = None
    timestamp_ms: int | None = None
    value: bytes | None = field(default=None, repr=False)  # the raw bytes, for a dead letter the caller decides on
    headers: tuple[tuple[str, bytes], ...] = field(default=(), repr=False)

    @property
    def next_offset(self) -> int:
        """The offset to commit once this record is processed (Kafka commits the *next* offset to read)."""
        return self.offset + 1


def _new_record(topic: str, partition: int, offset: int, key: bytes | None, events: list[Event], error: str | None,
                timestamp_ms: int | None, value: bytes | None, headers: tuple[tuple[str, bytes], ...]) -> ConsumedRecord:
    """``ConsumedRecord(...)`` with these fields, made once per record: a frozen dataclass's ``__init__`` sets each
    field through ``object.__setattr__``; filling its ``__dict__`` at once is the same object, built faster."""
    rec = object.__new__(ConsumedRecord)
    rec.__dict__.update(topic=topic, partition=partition, offset=offset, key=key, events=events, error=error,
                        timestamp_ms=timestamp_ms, value=value, headers=headers)
    return rec


class EventProducer:
    """Produces canonical event JSON keyed by instance id, ``acks=all``.

    ``linger_ms`` batches sends for throughput; ``flush()`` blocks until every send is acknowledged by the broker.
    """

    def __init__(self, bootstrap_servers: str, topic: str = DEFAULT_TOPIC, *, linger_ms: int = 5,
                 **kafka_options: Any) -> None:
        self.topic = topic
        options: dict[str, Any] = {"acks": "all", "linger_ms": linger_ms, "retries": 5,
                                   "batch_size": 256 * 1024, "max_request_size": 4 * 1024 * 1024}
        options.update(kafka_options)
        self._producer = KafkaProducer(bootstrap_servers=bootstrap_servers, **options)
        self.sent = 0

    def send(self, event: Event, *, headers: list[tuple[str, bytes]] | None = None) -> Any:
        """Send one event, keyed by ``event.instance_id``. Returns kafka-python's future."""
        return self.send_raw(event_to_json(event), event.instance_id.encode(), headers=headers)

    def send_raw(self, value: bytes, key: bytes | None = None, *,
                 headers: list[tuple[str, bytes]] | None = None, partition: int | None = None) -> Any:
        """Send bytes as they are (a raw log line, say, as a log shipper would)."""
        self.sent += 1
        return self._producer.send(self.topic, value=value, key=key, headers=headers or [], partition=partition)

    def flush(self, timeout_s: float | None = None) -> None:
        self._producer.flush(timeout=timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        self._producer.close(timeout=timeout_s)

    def __enter__(self) -> EventProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()
        self.close()


class _RecordingListener(ConsumerRebalanceListener):
    """Records partition changes; does nothing else (kafka-python calls it inside the group protocol)."""

    def __init__(self) -> None:
        self.changes: list[tuple[str, set[TP]]] = []

    def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        self.changes.append(("revoked", {(tp.topic, tp.partition) for tp in revoked}))

    def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self.changes.append(("assigned", {(tp.topic, tp.partition) for tp in assigned}))


class EventConsumer:
    """A group member of ``topic`` that decodes records, dead-letters bad ones and commits explicitly.

    ``on_assign(partitions)`` / ``on_revoke(partitions)`` receive sets of ``(topic, partition)`` and run inside
    ``poll_batch``, in the caller's thread, after kafka-python's poll returned. ``record_format`` is the
    ``streams.decode`` format of the records (``auto``: canonical events or raw SGLang output; ``events``:
    canonical only). A record whose decoding reports a dead letter is parked whole on ``dead_letter_topic``;
    the events decoded from the rest of it (multi-line records) are still returned.
    """

    def __init__(self, bootstrap_servers: str, topic: str = DEFAULT_TOPIC, group_id: str = "shadowsim", *,
                 dead_letter_topic: str | None = DEFAULT_DLQ_TOPIC,
                 on_assign: Callable[[set[TP]], None] | None = None,
                 on_revoke: Callable[[set[TP]], None] | None = None,
                 session_timeout_ms: int = 10000, max_poll_records: int = 2000,
                 record_format: str = "auto", decoder: RecordDecoder | None = None,
                 dedupe_dead_letters: bool = True, max_dead_letter_bytes: int = DEFAULT_MAX_DEAD_LETTER_BYTES,
                 **kafka_options: Any) -> None:
        self.topic = topic
        self._bootstrap_servers = bootstrap_servers
        self._dedupe = dedupe_dead_letters
        # (topic, partition) -> source offsets already on the dead-letter topic; loaded lazily, reset on rebalance.
        self._parked: dict[TP, set[int]] = {}
        self.dead_letter_topic = dead_letter_topic
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._decode = decoder or RecordDecoder(record_format)
        options: dict[str, Any] = {
            "group_id": group_id,
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            "session_timeout_ms": session_timeout_ms,
            # Kafka's rule of thumb: heartbeat at a third of the session timeout or faster.
            "heartbeat_interval_ms": max(100, session_timeout_ms // 5),
            "max_poll_records": max_poll_records,
            # Fetch up to 4 MiB per partition (kafka-python's default: 1 MiB). A backlog is read in fewer round trips:
            # from the embedded broker a consumer doing nothing else read 28,000-44,000 log-line records per wall
            # second with 1 MiB and 103,000-120,000 with 4 MiB, so at 1 MiB the shadow waited for fetches once it
            # decoded faster than ~30,000/s. Memory: at most this much buffered per assigned partition.
            "max_partition_fetch_bytes": MAX_PARTITION_FETCH_BYTES,
        }
        options.update(kafka_options)
        # TLS/SASL options (streams.kafka_security) apply to every client of this member, not only the consumer.
        self._security = {k: v for k, v in kafka_options.items() if k.startswith(("security_", "sasl_", "ssl_"))}
        self._consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, **options)
        # records unpacked by streams.kafka_records' loop instead of kafka-python's per-record objects (same records)
        from streams.kafka_records import install  # noqa: PLC0415
        install(self._consumer)
        self._listener = _RecordingListener()
        self._consumer.subscribe([topic], listener=self._listener)
        self._dlq: KafkaProducer | None = None
        self._dlq_partitions: int | None = None
        if dead_letter_topic is not None:
            self._dlq = KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all", linger_ms=5, retries=5,
                                      **self._security)
        self._seeked: set[TP] = set()
        self.dead_letters = 0
        self.dead_letters_failed = 0
        self.max_dead_letter_bytes = max_dead_letter_bytes

    # -- reading -------------------------------------------------------------------------------------------------
    def poll_batch(self, timeout_s: float = 1.0, max_records: int | None = None) -> list[ConsumedRecord]:
        """Fetch up to ``max_records`` records (default ``max_poll_records``), decoded, in partition order.

        Bad records come back with ``error`` set and no events, and their dead letter is on its way (flushed at the
        next ``commit``/``flush_dead_letters``). Process every returned record, then commit its ``next_offset``.
        """
        raw = self._consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        self._seeked.clear()
        self._dispatch_rebalance()
        assigned = self.assignment()
        out: list[ConsumedRecord] = []
        for tp, records in raw.items():
            key_tp = (tp.topic, tp.partition)
            if key_tp in self._seeked or key_tp not in assigned:
                continue  # fetched from a position the owner just replaced, or no longer ours
            out += self._decode_partition(records)
        return out

    def _decode_partition(self, records: list[Any]) -> list[ConsumedRecord]:
        """``[self._decode_one(r) for r in records]``, with the commonest record — one bracketed SGLang log line,
        keyed, no headers, of a key already seen — decoded in this loop (``RecordDecoder``'s fast path written out,
        without two calls and the header copies per record; tests/streams/adapters/test_fast_paths.py compares)."""
        dec = self._decode
        if type(dec) is not RecordDecoder or not dec._fast:  # noqa: SLF001
            return [self._decode_one(r) for r in records]
        out: list[ConsumedRecord] = []
        append, decode_one, new_record = out.append, self._decode_one, _new_record
        contexts, parse, max_bytes = dec._contexts, dec._parse_log_line, dec.max_record_bytes  # noqa: SLF001
        for rec in records:
            key, value = rec.key, rec.value
            if (rec.headers or value is None or not key or value[:1] != b"[" or len(value) > max_bytes
                    or value.find(b"\n", 0, len(value) - 1) >= 0):
                append(decode_one(rec))
                continue
            topic, partition = rec.topic, rec.partition
            ctx = contexts.get((topic, partition, key))
            if ctx is None:  # the first record of this key: the general path makes its parse context
                append(decode_one(rec))
                continue
            ts = rec.timestamp
            if ts is not None and ts >= 0:
                ctx.default_ts = ts / 1000.0
            ctx.line_no += 1
            try:
                got = parse(value.decode("utf-8", errors="replace"), ctx)
            except Exception as exc:  # noqa: BLE001 - never raise on content
                got = f"internal error: {type(exc).__name__}: {exc}"[:300]
            if got.__class__ is list:
                append(new_record(topic, partition, rec.offset, key, got, None, ts, value, ()))
                continue
            err = got if isinstance(got, str) else None
            if err is not None:
                self._dead_letter(rec, error_text(err), [])
            append(new_record(topic, partition, rec.offset, key, [], err, ts, value, ()))
        return out

    def _decode_one(self, rec: Any) -> ConsumedRecord:
        headers = list(rec.headers) if rec.headers else []
        ts = rec.timestamp
        ts_s = ts / 1000.0 if ts is not None and ts >= 0 else None
        value = rec.value
        if value is None:
            events, err = [], "record has no value (tombstone)"
        else:
            try:
                events, err = self._decode(value, rec.key, rec.topic, rec.partition, headers, ts_s)
            except Exception as exc:  # noqa: BLE001 - a decoder bug must not block the partition either
                events, err = [], error_text(exc)
        if err is not None:
            self._dead_letter(rec, error_text(err), headers)
        return _new_record(rec.topic, rec.partition, rec.offset, rec.key, events, err, ts, value,
                           tuple(headers) if headers else ())

    def dead_letter(self, record: ConsumedRecord, reason: str) -> None:
        """Park a record that decoded but that the caller refused (out of its time window, say), like a record that
        did not decode: same headers, ``error`` = ``reason``."""
        self._dead_letter(record, error_text(reason), list(record.headers))

    def _dead_letter(self, rec: Any, err: str, headers: list[tuple[str, bytes]]) -> None:
        """Produce the dead letter of ``rec``. Never raises: a dead letter the broker refuses is logged and
        counted in ``dead_letters_failed`` (the record is still counted by reason by its consumer)."""
        self.dead_letters += 1
        if self._dlq is None or self.dead_letter_topic is None:
            log.warning("dropping bad record %s/%d@%d: %s", rec.topic, rec.partition, rec.offset, err)
            return
        try:
            if self._dlq_partitions is None:
                parts = self._dlq.partitions_for(self.dead_letter_topic)
                self._dlq_partitions = max(1, len(parts or ()))
            if self._dedupe:
                parked = self._parked_offsets(rec.topic, rec.partition)
                if rec.offset in parked:
                    return  # a previous owner of the partition parked it already
                parked.add(rec.offset)
            value, extra = truncate_value(rec.value, self.max_dead_letter_bytes)
            future = self._dlq.send(self.dead_letter_topic, key=cut_key(rec.key, MAX_DEAD_LETTER_KEY_BYTES),
                                    value=value, partition=rec.partition % self._dlq_partitions,
                                    headers=dead_letter_headers(rec.topic, rec.partition, rec.offset, err,
                                                                headers) + extra)
            future.add_errback(self._dead_letter_failed, rec.topic, rec.partition, rec.offset)
        except Exception as exc:  # noqa: BLE001 - a refused dead letter must not stop the consumer
            self._dead_letter_failed(rec.topic, rec.partition, rec.offset, exc)

    def _dead_letter_failed(self, topic: str, partition: int, offset: int, exc: BaseException) -> None:
        self.dead_letters_failed += 1
        log.error("dead letter of %s/%d@%d not produced (%s: %s); the record is still counted by reason", topic,
                  partition, offset, type(exc).__name__, exc)

    def _parked_offsets(self, topic: str, partition: int) -> set[int]:
        """Source offsets of ``topic``/``partition`` already on the dead-letter topic (read once per assignment)."""
        key = (topic, partition)
        if key not in self._parked:
            from streams.deadletter import read_dead_letters  # noqa: PLC0415

            assert self.dead_letter_topic is not None and self._dlq_partitions is not None
            letters = read_dead_letters(self._bootstrap_servers, self.dead_letter_topic,
                                        partitions=[partition % self._dlq_partitions], **self._security)
            self._parked[key] = {d.source_offset for d in letters
                                 if d.source_topic == topic and d.source_partition == partition}
        return self._parked[key]

    def _dispatch_rebalance(self) -> None:
        changes, self._listener.changes = self._listener.changes, []
        if changes:
            self._decode.reset()
            self._parked.clear()  # another member may have parked records of these partitions meanwhile
        for what, parts in changes:
            if what == "revoked" and parts and self._on_revoke is not None:
                self._on_revoke(parts)
            elif what == "assigned" and parts and self._on_assign is not None:
                self._on_assign(parts)

    # -- positions and commits -----------------------------------------------------------------------------------
    def _tp(self, partition: int | TP | TopicPartition) -> TopicPartition:
        if isinstance(partition, TopicPartition):
            return partition
        if isinstance(partition, tuple):
            return TopicPartition(partition[0], partition[1])
        return TopicPartition(self.topic, int(partition))

    def assignment(self) -> set[TP]:
        return {(tp.topic, tp.partition) for tp in self._consumer.assignment()}

    def seek(self, partition: int | TP, offset: int) -> None:
        """Read ``partition`` from ``offset`` next (records already fetched for it in this poll are dropped)."""
        tp = self._tp(partition)
        self._consumer.seek(tp, offset)
        self._seeked.add((tp.topic, tp.partition))

    def position(self, partition: int | TP) -> int:
        """The offset of the next record ``poll_batch`` returns for ``partition``."""
        return int(self._consumer.position(self._tp(partition)))

    def offset_range(self, partition: int | TP) -> tuple[int, int]:
        """(earliest offset still in the log, end offset) of ``partition``."""
        tp = self._tp(partition)
        lo = self._consumer.beginning_offsets([tp])[tp]
        hi = self._consumer.end_offsets([tp])[tp]
        return int(lo), int(hi)

    def committed(self, partition: int | TP) -> int | None:
        """The group's committed offset for ``partition`` (the next offset to read), or ``None``."""
        return self._consumer.committed(self._tp(partition))

    def flush_dead_letters(self, timeout_s: float | None = 30.0) -> None:
        """Block until every dead letter produced so far is acknowledged (``acks=all``)."""
        if self._dlq is not None:
            self._dlq.flush(timeout=timeout_s)

    def commit(self, offsets: dict[TP, int]) -> bool:
        """Commit ``{(topic, partition): next_offset}`` synchronously, after flushing dead letters.

        Offsets of partitions no longer assigned are skipped (another member owns them now). Returns ``False``
        when the group rebalanced under us and the commit was refused: nothing is lost, the new owner resumes
        from the previous commit (or from the snapshot the caller saved).
        """
        self.flush_dead_letters()
        assigned = self.assignment()
        todo = {self._tp(tp): OffsetAndMetadata(off, "", -1) for tp, off in offsets.items() if tp in assigned}
        if not todo:
            return True
        try:
            self._consumer.commit(todo)
            return True
        except (CommitFailedError, KafkaError) as exc:
            log.info("commit refused (rebalance in progress?): %s", exc)
            return False

    def close(self) -> None:
        """Flush dead letters and leave the group (without committing anything: commits are explicit)."""
        try:
            self.flush_dead_letters()
        finally:
            if self._dlq is not None:
                self._dlq.close(timeout=5)
            self._consumer.close(autocommit=False)

    def __enter__(self) -> EventConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
