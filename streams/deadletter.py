"""Dead letters: records we could not decode, parked on a side topic so they never block their partition.

A dead letter carries the original key and value bytes unchanged, plus headers naming where it came from:

=================== =========================================================
header              value (UTF-8)
=================== =========================================================
``source_topic``     topic the bad record was read from
``source_partition`` its partition, decimal
``source_offset``    its offset, decimal
``error``            why it was rejected (first line of the error, ≤ 1000 B)
=================== =========================================================

A value longer than the consumer's ``max_dead_letter_bytes`` (default 900,000, below the broker's default 1 MB
message limit) is cut to that length and gets a ``truncated_from_bytes`` header (its original length, decimal), so a
huge bad record is still parked instead of being refused by the broker. Keys are cut to 4096 bytes, and the original
headers are left out (header ``orig_headers_dropped``: their count) when together they exceed 65,536 bytes.

The original record's headers follow, each name prefixed with ``orig.``. The dead letter goes to partition
``source_partition % partitions(dead-letter topic)``, so the dead letters of one source partition stay in order.

Delivery is at-least-once, like everything else on Kafka: a consumer killed after producing a dead letter but
before its offsets were saved re-reads the bad record and parks it again. ``(source_topic, source_partition,
source_offset)`` identifies a dead letter; readers de-duplicate on it (``DeadLetter.source``).

**ZMQ dead letters** (``shadowsim publish --zmq``, ``zmq_dead_letter_headers``): a ZMQ message has no topic,
partition or offset in Kafka's sense, so the same three headers name its place in the feed instead:
``source_topic`` = ``zmq:<endpoint>``, ``source_partition`` = ``0``, ``source_offset`` = the publisher's sequence
number when the message carries one (KV events), else the bridge's message number (1 = first message received).
Extra headers: ``zmq_topic`` (the topic frame, bytes as received), ``zmq_kind`` (``kv-events`` /
``forward-pass``), ``zmq_frames`` (frame count, decimal) and ``zmq_seq`` (decimal, only when the message has one).
The value is the message's payload frame (the last frame), the key the instance id. Readers find the extra headers
in ``DeadLetter.extra_headers``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

#: Kafka has no header size limit to speak of, but a 1 MB pydantic error dump helps nobody.
MAX_ERROR_BYTES = 1000
ORIG_PREFIX = "orig."
DEFAULT_MAX_DEAD_LETTER_BYTES = 900_000
MAX_DEAD_LETTER_KEY_BYTES = 4096
TRUNCATED_HEADER = "truncated_from_bytes"
MAX_ORIGINAL_HEADER_BYTES = 65536


def truncate_value(value: bytes | None, limit: int) -> tuple[bytes | None, list[tuple[str, bytes]]]:
    """``value`` cut to ``limit`` bytes, and the header saying so (none when it fits)."""
    if value is None or len(value) <= limit:
        return value, []
    return bytes(value[:limit]), [(TRUNCATED_HEADER, str(len(value)).encode())]


def cut_key(key: bytes | None, limit: int) -> bytes | None:
    return key if key is None or len(key) <= limit else bytes(key[:limit])
_SOURCE_HEADERS = frozenset({"source_topic", "source_partition", "source_offset", "error"})


def error_text(exc: BaseException | str) -> str:
    """One line describing ``exc``, at most ``MAX_ERROR_BYTES`` bytes of UTF-8."""
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split())  # pydantic errors span many lines; headers are read one per line
    raw = text.encode()[:MAX_ERROR_BYTES]
    return raw.decode(errors="ignore")


def dead_letter_headers(topic: str, partition: int, offset: int, error: BaseException | str,
                        original: list[tuple[str, bytes]] | None = None) -> list[tuple[str, bytes]]:
    """The headers of a dead letter for record ``topic``/``partition``/``offset`` (see the module docstring)."""
    headers = [
        ("source_topic", topic.encode()),
        ("source_partition", str(partition).encode()),
        ("source_offset", str(offset).encode()),
        ("error", error_text(error).encode()),
    ]
    original = original or []
    if sum(len(n) + len(v or b"") for n, v in original) > MAX_ORIGINAL_HEADER_BYTES:
        return headers + [("orig_headers_dropped", str(len(original)).encode())]
    for name, value in original:
        headers.append((ORIG_PREFIX + name, value if value is not None else b""))
    return headers


def zmq_dead_letter_headers(endpoint: str, topic_frame: bytes, offset: int, error: BaseException | str, *,
                            kind: str, frames: int, seq: int | None = None) -> list[tuple[str, bytes]]:
    """The headers of a dead letter for an undecodable ZMQ message (see "ZMQ dead letters" above).

    ``offset`` is the publisher sequence number when ``seq`` is known, else the bridge's message number."""
    headers = dead_letter_headers(f"zmq:{endpoint}", 0, offset, error)
    headers += [("zmq_topic", bytes(topic_frame)), ("zmq_kind", kind.encode()), ("zmq_frames", str(frames).encode())]
    if seq is not None:
        headers.append(("zmq_seq", str(seq).encode()))
    return headers


@dataclass(frozen=True)
class DeadLetter:
    """A dead letter as read back from the dead-letter topic."""

    source_topic: str
    source_partition: int
    source_offset: int
    error: str
    key: bytes | None
    value: bytes | None
    original_headers: tuple[tuple[str, bytes], ...] = ()
    #: headers beyond the four source headers that are not ``orig.`` copies (e.g. ``zmq_topic``), in order
    extra_headers: tuple[tuple[str, bytes], ...] = ()

    @property
    def source(self) -> tuple[str, int, int]:
        """The identity of the bad record: ``(topic, partition, offset)``."""
        return (self.source_topic, self.source_partition, self.source_offset)

    @classmethod
    def from_record(cls, record: Any) -> DeadLetter:
        """From a kafka-python ``ConsumerRecord``. Raises ``ValueError`` when the source headers are missing."""
        h: dict[str, bytes] = {}
        orig: list[tuple[str, bytes]] = []
        extra: list[tuple[str, bytes]] = []
        for name, value in record.headers or []:
            if name.startswith(ORIG_PREFIX):
                orig.append((name[len(ORIG_PREFIX):], value))
            else:
                h[name] = value
                if name not in _SOURCE_HEADERS:
                    extra.append((name, value))
        try:
            return cls(
                source_topic=h["source_topic"].decode(),
                source_partition=int(h["source_partition"]),
                source_offset=int(h["source_offset"]),
                error=h.get("error", b"").decode(errors="replace"),
                key=record.key,
                value=record.value,
                original_headers=tuple(orig),
                extra_headers=tuple(extra),
            )
        except KeyError as exc:
            raise ValueError(f"not a dead letter: header {exc.args[0]!r} missing") from exc


def read_dead_letters(bootstrap_servers: str, topic: str, *, partitions: list[int] | None = None,
                      idle_timeout_s: float = 2.0, max_wait_s: float = 60.0, **kafka_options: Any) -> list[DeadLetter]:
    """Read every dead letter now on ``topic`` (``partitions``, default all; from the beginning; no group).

    ``kafka_options`` go to kafka-python's consumer (TLS/SASL: ``streams.kafka_security``).
    Stops once the end offsets of every partition are reached, or after ``idle_timeout_s`` without a record
    (whichever comes first), and never waits longer than ``max_wait_s``.
    """
    from kafka import KafkaConsumer, TopicPartition  # noqa: PLC0415

    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False,
                             auto_offset_reset="earliest", group_id=None, **kafka_options)
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        if partitions is not None:
            parts = {p for p in parts if p in set(partitions)}
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        if not tps:
            return []
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        out: list[DeadLetter] = []
        deadline = time.monotonic() + max_wait_s
        last_record = time.monotonic()
        while time.monotonic() < deadline:
            if all(consumer.position(tp) >= end[tp] for tp in tps):
                break
            batch = consumer.poll(timeout_ms=200)
            for recs in batch.values():
                out.extend(DeadLetter.from_record(r) for r in recs)
            if batch:
                last_record = time.monotonic()
            elif time.monotonic() - last_record > idle_timeout_s:
                break
        return out
    finally:
        consumer.close()
