"""EventProducer / EventConsumer: keyed produce, decode in our code, dead letters, explicit commits, seeks.

A consumer group member reads raw bytes; validation happens in shadowsim, and a record that fails it is parked on
the dead-letter topic with its coordinates in headers while the partition moves on.
"""
from __future__ import annotations

import time

import pytest

from simcore.events import DecodeBatch, RequestFinished, event_to_json
from streams.broker import EmbeddedBroker
from streams.deadletter import read_dead_letters
from streams.kafka_io import ConsumedRecord, EventConsumer, EventProducer

pytestmark = pytest.mark.kafka


def _finished(i: int, instance: str) -> RequestFinished:
    return RequestFinished(instance_id=instance, ts=1000.0 + i, request_id=f"r{i}", prompt_tokens=10 + i,
                           output_tokens=5, event_id=f"ev-{i}")


def _drain(consumer: EventConsumer, n: int, deadline_s: float = 30.0) -> list[ConsumedRecord]:
    out: list[ConsumedRecord] = []
    end = time.monotonic() + deadline_s
    while len(out) < n and time.monotonic() < end:
        out.extend(consumer.poll_batch(0.3))
    return out


def test_events_round_trip_keyed_by_instance_and_bad_records_become_dead_letters(
        kafka_broker: EmbeddedBroker, unique_topic: str) -> None:
    bs = kafka_broker.bootstrap_servers
    dlq = unique_topic + ".dlq"
    kafka_broker.create_topics({unique_topic: 3, dlq: 3})
    with EventProducer(bs, unique_topic) as producer:
        for i in range(40):
            producer.send(_finished(i, f"inst-{i % 4}"))
            if i == 7:
                producer.send_raw(b"{not json", b"inst-3", headers=[("shipper", b"vector")])
            if i == 21:  # valid JSON, invalid event: negative token count
                producer.send_raw(b'{"kind":"decode_batch","ts":1.0,"running_reqs":-1}', b"inst-1")
    consumer = EventConsumer(bs, unique_topic, "g-" + unique_topic, dead_letter_topic=dlq,
                             session_timeout_ms=6000, record_format="events")
    try:
        recs = _drain(consumer, 42)
        assert len(recs) == 42
        good = [r for r in recs if r.error is None]
        bad = [r for r in recs if r.error is not None]
        assert len(good) == 40 and len(bad) == 2
        assert all(len(r.events) == 1 for r in good) and all(r.events == [] for r in bad)
        # One instance -> one partition, in send order.
        for inst in range(4):
            rs = [r for r in good if r.key == f"inst-{inst}".encode()]
            assert len({r.partition for r in rs}) == 1
            assert [r.events[0].request_id for r in rs] == [f"r{i}" for i in range(inst, 40, 4)]
            assert all(r.events[0].instance_id == f"inst-{inst}" for r in rs)
        assert consumer.dead_letters == 2
        consumer.commit({(r.topic, r.partition): r.next_offset for r in recs})
    finally:
        consumer.close()

    letters = sorted(read_dead_letters(bs, dlq), key=lambda d: d.value or b"")
    assert [d.value for d in letters] == [b'{"kind":"decode_batch","ts":1.0,"running_reqs":-1}', b"{not json"]
    by_value = {d.value: d for d in letters}
    broken = by_value[b"{not json"]
    src = next(r for r in bad if r.key == b"inst-3")
    assert broken.source == (unique_topic, src.partition, src.offset)
    assert broken.key == b"inst-3"
    assert broken.original_headers == (("shipper", b"vector"),)
    assert "json" in broken.error.lower()
    assert "running_reqs" in by_value[b'{"kind":"decode_batch","ts":1.0,"running_reqs":-1}'].error


def test_commit_then_new_member_resumes_after_the_committed_offsets(
        kafka_broker: EmbeddedBroker, unique_topic: str) -> None:
    bs = kafka_broker.bootstrap_servers
    kafka_broker.create_topics({unique_topic: 2})
    group = "g-" + unique_topic
    with EventProducer(bs, unique_topic) as producer:
        for i in range(20):  # explicit partitions: two keys may hash to one partition
            producer.send_raw(event_to_json(_finished(i, "a")), b"a", partition=i % 2)
    first = EventConsumer(bs, unique_topic, group, dead_letter_topic=None, session_timeout_ms=6000)
    recs = _drain(first, 20)
    # Process (and commit) only the first 3 records of each partition.
    done: dict[tuple[str, int], int] = {}
    for r in recs:
        if r.offset < 3:
            done[(r.topic, r.partition)] = r.next_offset
    assert first.commit(done)
    first.close()
    assert sorted(done.values()) == [3, 3]

    second = EventConsumer(bs, unique_topic, group, dead_letter_topic=None, session_timeout_ms=6000)
    try:
        again = _drain(second, 14)
        assert len(again) == 14
        assert min(r.offset for r in again) == 3
        assert sorted(e.request_id for r in again for e in r.events) == sorted(
            e.request_id for r in recs if r.offset >= 3 for e in r.events)
    finally:
        second.close()


def test_on_assign_seek_replaces_the_committed_position(kafka_broker: EmbeddedBroker, unique_topic: str) -> None:
    """The live service restores a snapshot on assignment and seeks to the offsets saved with it."""
    bs = kafka_broker.bootstrap_servers
    kafka_broker.create_topics({unique_topic: 1})
    with EventProducer(bs, unique_topic) as producer:
        for i in range(10):
            producer.send(DecodeBatch(instance_id="a", ts=float(i), running_reqs=i))
    assigned: list[set[tuple[str, int]]] = []
    holder: dict[str, EventConsumer] = {}

    def on_assign(parts: set[tuple[str, int]]) -> None:
        assigned.append(parts)
        holder["c"].seek(next(iter(parts)), 6)  # as if the snapshot said "next offset is 6"

    consumer = EventConsumer(bs, unique_topic, "g-" + unique_topic, dead_letter_topic=None,
                             on_assign=on_assign, session_timeout_ms=6000)
    holder["c"] = consumer
    try:
        recs = _drain(consumer, 4)
        assert assigned == [{(unique_topic, 0)}]
        assert [r.offset for r in recs] == [6, 7, 8, 9]
        assert [r.events[0].running_reqs for r in recs] == [6, 7, 8, 9]
        assert consumer.position(0) == 10
        assert consumer.assignment() == {(unique_topic, 0)}
    finally:
        consumer.close()


def test_a_bad_record_reread_by_the_next_owner_is_not_parked_twice(
        kafka_broker: EmbeddedBroker, unique_topic: str) -> None:
    """A member that parked a dead letter and died before committing leaves the record to the next owner; the next
    owner finds it on the dead-letter topic and does not park it again."""
    bs = kafka_broker.bootstrap_servers
    dlq = unique_topic + ".dlq"
    kafka_broker.create_topics({unique_topic: 1, dlq: 1})
    with EventProducer(bs, unique_topic) as producer:
        producer.send(_finished(1, "a"))
        producer.send_raw(b"{garbage-1", b"a")
        producer.send(_finished(2, "a"))
        producer.send_raw(b"{garbage-2", b"a")
    group = "g-" + unique_topic
    first = EventConsumer(bs, unique_topic, group, dead_letter_topic=dlq, session_timeout_ms=6000,
                          record_format="events")
    recs = _drain(first, 4)
    assert [r.error is not None for r in recs] == [False, True, False, True]
    first.commit({(unique_topic, 0): 2})  # processed up to the first bad record only, then "crashed"
    first.close()
    second = EventConsumer(bs, unique_topic, group, dead_letter_topic=dlq, session_timeout_ms=6000,
                           record_format="events")
    try:
        again = _drain(second, 2)
        assert [r.offset for r in again] == [2, 3]
        assert again[1].error is not None and second.dead_letters == 1
        second.commit({(unique_topic, 0): 4})
    finally:
        second.close()
    letters = read_dead_letters(bs, dlq)
    assert sorted((d.source_offset, d.value) for d in letters) == [(1, b"{garbage-1"), (3, b"{garbage-2")]


def test_raw_sglang_log_lines_are_decoded_with_the_key_as_instance(
        kafka_broker: EmbeddedBroker, unique_topic: str) -> None:
    """``--raw`` publishing ships log lines as a shipper would; the consumer turns them into events."""
    bs = kafka_broker.bootstrap_servers
    kafka_broker.create_topics({unique_topic: 1})
    line = (b"[2025-01-07 10:00:05] Decode batch. #running-req: 12, #token: 3400, token usage: 0.05, "
            b"gen throughput (token/s): 812.33, #queue-req: 0, ")
    with EventProducer(bs, unique_topic) as producer:
        producer.send_raw(line, b"node-7")
        producer.send_raw(b"some unrelated line", b"node-7")
    consumer = EventConsumer(bs, unique_topic, "g-" + unique_topic, dead_letter_topic=None,
                             session_timeout_ms=6000)
    try:
        recs = _drain(consumer, 2)
    finally:
        consumer.close()
    assert [r.error for r in recs] == [None, None]
    (ev,) = recs[0].events
    assert (ev.kind, ev.instance_id, ev.running_reqs, ev.kv_tokens) == ("decode_batch", "node-7", 12, 3400)
    assert recs[1].events == []  # not SGLang output: skipped, not a dead letter


def test_a_10_mb_bad_record_is_dead_lettered_truncated_with_a_header_and_refused_or_not_never_raises(
        kafka_broker: EmbeddedBroker, unique_topic: str) -> None:
    """Issue 11: a bad record over 1 MB made the dead-letter producer raise MessageSizeTooLargeError out of the
    loop. Its dead letter is now cut to max_dead_letter_bytes with a truncated_from_bytes header; a record whose
    dead letter the broker still refuses (a limit the producer enforces: 1 KiB here) is counted, not raised."""
    bs = kafka_broker.bootstrap_servers
    dlq = unique_topic + ".dlq"
    kafka_broker.create_topics({unique_topic: 1, dlq: 1})
    huge = b"[2026-01-01 00:00:00] Prefill batch. " + b"9" * (10 * 1024 * 1024)
    with EventProducer(bs, unique_topic, max_request_size=16 * 1024 * 1024) as producer:
        producer.send_raw(huge, b"victim")
        producer.send(_finished(1, "ok"))
        producer.send_raw(b"{not json" + b"x" * 5000, b"victim")
    with EventConsumer(bs, unique_topic, "g-huge", dead_letter_topic=dlq, session_timeout_ms=6000,
                       max_dead_letter_bytes=900_000) as consumer:
        got = _drain(consumer, 3, deadline_s=60)
        assert [r.error is not None for r in got] == [True, False, True]
        assert got[0].error.startswith("prefill_batch: line too long")  # type: ignore[union-attr]
        consumer.flush_dead_letters()
    letters = {d.source_offset: d for d in read_dead_letters(bs, dlq)}
    assert len(letters[0].value or b"") == 900_000 and letters[0].value == huge[:900_000]
    assert dict(letters[0].extra_headers)["truncated_from_bytes"] == str(len(huge)).encode()
    assert letters[2].extra_headers == () and letters[2].value == b"{not json" + b"x" * 5000
    # the producer refuses anything over 1 KiB: a dead letter that cannot be produced is counted, never raised
    with EventConsumer(bs, unique_topic, "g-refused", dead_letter_topic=dlq, session_timeout_ms=6000,
                       dedupe_dead_letters=False, max_dead_letter_bytes=1024 * 1024) as consumer:
        consumer._dlq = __import__("kafka").KafkaProducer(bootstrap_servers=bs, max_request_size=1024)
        got = _drain(consumer, 3, deadline_s=60)
        assert len(got) == 3 and consumer.dead_letters_failed == 2
