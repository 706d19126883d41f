"""SGLang's ZMQ feeds (KV-cache events, forward-pass metrics) → events → Kafka, against a real PUB socket.

PUB/SUB drops what is sent before the subscription reaches the publisher ("slow joiner"), so each test first
sends warm-up messages that carry no events until the bridge has seen one, then the messages it checks.
"""
from __future__ import annotations

import json
import threading
import time

import pytest

from kafka import KafkaConsumer, TopicPartition

from shadowsim.cli import main
from simcore.events import Event, ForwardPass, KvRemoved, KvStored, parse_event
from streams.adapters.zmq import ZmqDecodeError, decode_forward_pass, decode_kv_batch
from streams.broker import EmbeddedBroker
from streams.deadletter import read_dead_letters
from streams.zmq_bridge import ZmqBridge

from sglang_zmq import (AllBlocksCleared, BlockRemoved, BlockStored, EventBatch, ENCODER, ForwardPassMetrics,
                         Publisher, QueuedRequestMetrics, ScheduledRequestMetrics, kv_frames)

BATCH = EventBatch(
    ts=1_750_000_000.25,
    events=[
        BlockStored(block_hashes=[111, 222], parent_block_hash=None, token_ids=[1, 2, 3, 4], block_size=2,
                    medium="GPU"),
        BlockStored(block_hashes=[333], parent_block_hash=222, token_ids=[5, 6], block_size=2, medium="GPU"),
        BlockRemoved(block_hashes=[111], medium="GPU"),
        AllBlocksCleared(),
    ],
    attn_dp_rank=0,
)

FPM = ForwardPassMetrics(
    worker_id="w-7", dp_rank=1, counter_id=42, wall_time=0.0315,
    scheduled_requests=ScheduledRequestMetrics(num_prefill_requests=2, sum_prefill_tokens=3000,
                                               sum_prefill_kv_tokens=512, num_decode_requests=30,
                                               sum_decode_kv_tokens=45000),
    queued_requests=QueuedRequestMetrics(num_prefill_requests=5, num_decode_requests=1),
)


def test_kv_event_batch_frames_become_kv_events() -> None:
    events = decode_kv_batch(kv_frames(7, BATCH), instance_id="node-1")
    assert [type(e) for e in events] == [KvStored, KvStored, KvRemoved, KvRemoved]
    s0, s1, r, cleared = events
    assert (s0.block_hashes, s0.parent_block_hash, s0.token_ids, s0.block_size_tokens) == ([111, 222], None,
                                                                                         [1, 2, 3, 4], 2)
    assert (s1.parent_block_hash, s1.medium, s1.dp_rank) == (222, "GPU", 0)
    assert (r.block_hashes, r.all_cleared) == ([111], False)
    assert (cleared.block_hashes, cleared.all_cleared) == ([], True)
    assert all(e.ts == 1_750_000_000.25 and e.instance_id == "node-1" for e in events)
    assert [e.event_id for e in events] == [f"kv:node-1:0:7:{i}" for i in range(4)]


def test_map_form_bytes_hashes_and_two_field_batches_are_accepted() -> None:
    import msgpack

    payload = msgpack.packb([12.5, [{"type": "BlockRemoved", "block_hashes": [b"\x00\x01"]}]])
    (ev,) = decode_kv_batch([payload])
    assert isinstance(ev, KvRemoved) and ev.block_hashes == [1] and ev.ts == 12.5 and ev.dp_rank is None


@pytest.mark.parametrize("payload", [b"\xc1", b"\x93\xa1x\x90\x00", ENCODER.encode([1.0, [["Nope", [1]]]]),
                                     ENCODER.encode([1.0, [["BlockStored", "notalist", None, [], 1]]])])
def test_bad_kv_messages_raise_a_decode_error(payload: bytes) -> None:
    with pytest.raises(ZmqDecodeError):
        decode_kv_batch([b"", (1).to_bytes(8, "big"), payload])


def test_forward_pass_metrics_become_a_forward_pass_event() -> None:
    ev = decode_forward_pass([ENCODER.encode(FPM)], received_ts=1000.5)
    assert isinstance(ev, ForwardPass)
    assert (ev.instance_id, ev.ts, ev.forward_mode, ev.batch_size) == ("w-7", 1000.5, "mixed", 32)
    assert (ev.num_extend_tokens, ev.num_cached_tokens, ev.sum_kv_tokens) == (3000, 512, 3000 + 512 + 45000)
    assert (ev.duration_s, ev.num_prefill_reqs, ev.num_decode_reqs, ev.queued_reqs) == (0.0315, 2, 30, 6)
    assert (ev.dp_rank, ev.forward_iter, ev.event_id) == (1, 42, "fpm:w-7:1:42")
    named = decode_forward_pass([ENCODER.encode(FPM)], received_ts=1.0, instance_id="node-1")
    assert named.instance_id == "node-1"
    idle = decode_forward_pass([ENCODER.encode(ForwardPassMetrics(wall_time=0.001))], received_ts=1.0)
    assert (idle.forward_mode, idle.batch_size, idle.instance_id) == ("idle", 0, "default")


class ListSink:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def send(self, event: Event) -> None:
        self.events.append(event)

    def flush(self, timeout_s: float | None = None) -> None:
        pass


class RawSink:
    """Stands in for an ``EventProducer`` on the dead-letter topic."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes | None, dict[str, bytes]]] = []
        self.flushes = 0

    def send_raw(self, value: bytes, key: bytes | None = None, *, headers=None) -> None:
        self.sent.append((value, key, dict(headers or [])))

    def flush(self, timeout_s: float | None = None) -> None:
        self.flushes += 1


def test_undecodable_messages_go_to_the_dead_letter_sink_with_their_reason() -> None:
    # handle() without a socket: the bridge never connects anywhere before run()
    sink, dlq = ListSink(), RawSink()
    bridge = ZmqBridge("tcp://127.0.0.1:1", "kv-events", sink, instance_id="node-1", dead_letters=dlq)
    try:
        bridge.handle(kv_frames(7, BATCH, topic=b"kv"))
        bridge.handle([b"kv", (8).to_bytes(8, "big"), b"\xc1"])
        bridge.handle([ENCODER.encode([1.0, [["Nope", [1]]]])])  # one frame: no topic, no seq
    finally:
        bridge.close()
    assert (bridge.stats.messages, bridge.stats.events, bridge.stats.errors, bridge.stats.dead_letters) == (3, 4, 2, 2)
    (v1, k1, h1), (v2, k2, h2) = dlq.sent
    assert (v1, k1) == (b"\xc1", b"node-1")
    assert h1["source_topic"] == b"zmq:tcp://127.0.0.1:1" and h1["source_partition"] == b"0"
    assert (h1["source_offset"], h1["zmq_seq"], h1["zmq_topic"], h1["zmq_frames"]) == (b"8", b"8", b"kv", b"3")
    assert h1["error"].startswith(b"not msgpack") and h1["zmq_kind"] == b"kv-events"
    assert h2["source_offset"] == b"3" and "zmq_seq" not in h2 and h2["zmq_topic"] == b""  # message number 3
    assert h2["error"] == b"unknown KV event 'Nope'"
    assert bridge.stats.dead_letter_samples == ["#8: " + h1["error"].decode(), "#3: unknown KV event 'Nope'"]


def _warm_up(pub: Publisher, seen, frames: list[bytes], timeout_s: float = 10.0) -> None:
    end = time.monotonic() + timeout_s
    while not seen():
        assert time.monotonic() < end, "the subscriber never connected"
        pub.send(frames)
        time.sleep(0.02)


def test_bridge_against_a_real_pub_socket_counts_gaps_and_skips_garbage() -> None:
    pub = Publisher()
    sink = ListSink()
    bridge = ZmqBridge(pub.endpoint, "kv-events", sink, instance_id="node-1")
    try:
        worker = threading.Thread(target=bridge.run, kwargs={"idle_timeout_s": 1.0, "poll_interval_s": 0.05})
        worker.start()
        _warm_up(pub, lambda: bridge.stats.messages > 0, kv_frames(0, EventBatch(ts=1.0, events=[])))
        time.sleep(0.1)  # let the last warm-up messages land before the checked ones
        warm = bridge.stats.messages
        pub.send(kv_frames(100, BATCH))
        pub.send([b"", (101).to_bytes(8, "big"), b"\xc1garbage"])
        pub.send(kv_frames(105, EventBatch(ts=2.0, events=[BlockRemoved(block_hashes=[333])])))
        worker.join(10)
    finally:
        bridge.close()
        pub.close()
    assert bridge.stats.messages == warm + 3
    assert bridge.stats.errors == 1
    assert bridge.stats.missed >= 3  # 102..104 were never sent (the warm-up seq 0 -> 100 gap counts too)
    assert [e.kind for e in sink.events] == ["kv_stored", "kv_stored", "kv_removed", "kv_removed", "kv_removed"]
    assert sink.events[-1].block_hashes == [333] and sink.events[-1].ts == 2.0


def _events_consumer(bootstrap_servers: str, topic: str, partitions: int = 2) -> KafkaConsumer:
    """A group-less consumer of every partition of ``topic`` from the start: no group join (~3 s) to wait for."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    return consumer


def _poll(consumer: KafkaConsumer, timeout_s: float) -> list[Event]:
    return [parse_event(r.value) for recs in consumer.poll(int(timeout_s * 1000)).values() for r in recs]


@pytest.mark.kafka
def test_cli_publish_zmq_bridges_forward_pass_metrics_into_kafka(kafka_broker: EmbeddedBroker,
                                                                 unique_topic: str, capsys) -> None:
    bs = kafka_broker.bootstrap_servers
    kafka_broker.create_topics({unique_topic: 2})
    pub = Publisher()
    done: dict[str, int] = {}
    cli = threading.Thread(target=lambda: done.update(rc=main([
        "publish", "--zmq", pub.endpoint, "--zmq-kind", "forward-pass", "--instance-id", "node-1",
        "--bootstrap-servers", bs, "--topic", unique_topic, "--idle-timeout-s", "1.5", "--json"])))
    cli.start()
    consumer = _events_consumer(bs, unique_topic)
    try:
        # Warm-up: idle forwards (counter 0) until the bridge is connected; then 20 real ones.
        got: list[ForwardPass] = []
        end = time.monotonic() + 20
        while not got and time.monotonic() < end:
            pub.send([ENCODER.encode(ForwardPassMetrics(wall_time=0.001))])
            got.extend(_poll(consumer, 0.1))
        for i in range(1, 21):
            pub.send([ENCODER.encode(ForwardPassMetrics(worker_id="w", counter_id=i, wall_time=0.01 * i,
                                                        scheduled_requests=ScheduledRequestMetrics(
                                                            num_decode_requests=i, sum_decode_kv_tokens=100 * i)))])
        cli.join(30)
        while len([e for e in got if e.forward_iter]) < 20 and time.monotonic() < end + 10:
            got.extend(_poll(consumer, 0.3))
    finally:
        consumer.close()
        pub.close()
    assert done.get("rc") == 0
    real = [e for e in got if e.forward_iter]
    assert [e.forward_iter for e in real] == list(range(1, 21))  # one instance: one partition, in order
    assert all(e.instance_id == "node-1" and e.forward_mode == "decode" for e in real)
    assert real[4].duration_s == pytest.approx(0.05) and real[4].sum_kv_tokens == 500
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["events"] == summary["messages"] >= 21 and summary["errors"] == 0


@pytest.mark.kafka
def test_cli_publish_zmq_parks_exactly_the_bad_messages_on_the_dead_letter_topic(
        kafka_broker: EmbeddedBroker, unique_topic: str, capsys) -> None:
    bs = kafka_broker.bootstrap_servers
    dlq_topic = unique_topic + "-dlq"
    kafka_broker.create_topics({unique_topic: 2, dlq_topic: 2})
    pub = Publisher()
    done: dict[str, int] = {}
    cli = threading.Thread(target=lambda: done.update(rc=main([
        "publish", "--zmq", pub.endpoint, "--zmq-kind", "kv-events", "--instance-id", "node-1",
        "--bootstrap-servers", bs, "--topic", unique_topic, "--dead-letter-topic", dlq_topic,
        "--idle-timeout-s", "1.5", "--json"])))
    cli.start()
    bad = {  # seq -> (payload, expected reason prefix)
        101: (b"\xc1garbage", "not msgpack"),
        103: (ENCODER.encode([5.0, [["BlockEvicted", [1]]]]), "unknown KV event 'BlockEvicted'"),
        105: (ENCODER.encode({"hello": "world"}), "EventBatch needs a numeric ts"),
        106: (ENCODER.encode([6.0, [["BlockStored", "notalist", None, [], 1]]]), "block_hashes is not a list"),
    }
    consumer = _events_consumer(bs, unique_topic)
    poll = lambda timeout_s: _poll(consumer, timeout_s)  # noqa: E731
    try:
        got: list[Event] = []
        end = time.monotonic() + 20
        while not got and time.monotonic() < end:  # warm-up: seq 0 batches until the bridge is connected
            pub.send(kv_frames(0, EventBatch(ts=1.0, events=[BlockRemoved(block_hashes=[9])]), topic=b"kv"))
            got.extend(poll(0.1))
        for seq in range(100, 108):
            if seq in bad:
                pub.send([b"kv", seq.to_bytes(8, "big"), bad[seq][0]])
            else:
                pub.send(kv_frames(seq, EventBatch(ts=float(seq), events=[BlockRemoved(block_hashes=[seq])]),
                                   topic=b"kv"))
        cli.join(30)
        while not any(getattr(e, "block_hashes", None) == [107] for e in got) and time.monotonic() < end + 10:
            got.extend(poll(0.3))
    finally:
        consumer.close()
        pub.close()
    assert done.get("rc") == 0
    assert [e.block_hashes[0] for e in got if e.block_hashes != [9]] == [100, 102, 104, 107]
    letters = sorted(read_dead_letters(bs, dlq_topic), key=lambda d: d.source_offset)
    assert [d.source_offset for d in letters] == sorted(bad)  # exactly the bad ones, each once
    for d in letters:
        payload, reason = bad[d.source_offset]
        assert d.error.startswith(reason), d.error
        assert (d.value, d.key, d.source_topic, d.source_partition) == (payload, b"node-1", f"zmq:{pub.endpoint}", 0)
        assert dict(d.extra_headers) == {"zmq_topic": b"kv", "zmq_kind": b"kv-events", "zmq_frames": b"3",
                                         "zmq_seq": str(d.source_offset).encode()}
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (summary["errors"], summary["dead_letters"], summary["dead_letter_topic"]) == (4, 4, dlq_topic)
    assert summary["messages"] == summary["events"] + 4
    assert len(summary["dead_letter_samples"]) == 4 and summary["dead_letter_samples"][0].startswith("#101: ")


@pytest.mark.parametrize("argv, field", [
    (["publish", "x.log", "--dead-letter-topic", "d", "--bootstrap-servers", "h:1"], "--dead-letter-topic"),
    (["publish", "--zmq", "tcp://h:1", "--zmq-kind", "kv-events", "--dead-letter-topic", "sglang.events",
      "--bootstrap-servers", "h:1"], "--dead-letter-topic"),
    (["publish", "--zmq", "tcp://h:1", "--zmq-kind", "kv-events", "--dead-letter-topic", "d", "--no-dead-letters",
      "--bootstrap-servers", "h:1"], "--no-dead-letters"),
])
def test_dead_letter_flags_are_checked_before_connecting(argv: list[str], field: str, capsys) -> None:
    assert main(argv) == 2
    assert field in capsys.readouterr().err
