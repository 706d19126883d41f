"""Scale-out: two shadow processes (here: two services in threads) in one consumer group share the instances by
partition; when one leaves, its partitions — and their twins, through their snapshots — move to the other, and
the result equals one uninterrupted shadow."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from shadowsim.shadow.config import KafkaConfig, SnapshotConfig
from shadowsim.shadow.engine import engine_factory
from shadowsim.shadow.service import ShadowService
from shadowsim.shadow.sink import PredictionSink, read_predictions
from shadowsim.shadow.sources import MemorySource, kafka_source_factory

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_two_members_share_partitions_and_a_leaving_member_hands_over_its_twins(
        short_log: Any, shadow_broker: Any, tmp_path: Path) -> None:
    sc, recs = short_log
    ref_sink = PredictionSink(tmp_path / "ref.jsonl")
    ref_cfg = sc.shadow.model_copy(update={"snapshot": SnapshotConfig(dir=tmp_path / "ref-state")})
    ref = ShadowService(ref_cfg, lambda a, r: MemorySource(recs, a, r), engine_factory, sink=ref_sink)
    ref.run(idle_timeout_s=0)
    ref.close()
    want = read_predictions(tmp_path / "ref.jsonl")

    from streams.kafka_io import EventProducer

    topic = f"scale-{os.getpid()}-{time.time_ns()}"
    shadow_broker.create_topics({topic: 6, topic + ".dlq": 1})
    cfg = sc.shadow.model_copy(update={
        "snapshot": SnapshotConfig(dir=tmp_path / "state", every_s=0.2, every_events=200),
        "kafka": KafkaConfig(bootstrap_servers=shadow_broker.bootstrap_servers, topic=topic,
                             dead_letter_topic=topic + ".dlq", group="scale", session_timeout_ms=3000)})

    def member(name: str) -> ShadowService:
        k = cfg.kafka
        make = kafka_source_factory(k.bootstrap_servers, k.topic, k.group, k.dead_letter_topic,
                                    session_timeout_ms=k.session_timeout_ms, max_poll_records=100)
        return ShadowService(cfg, make, engine_factory, sink=PredictionSink(tmp_path / f"{name}.jsonl"))

    a, b = member("a"), member("b")
    stop_a, stop_b = threading.Event(), threading.Event()
    ta = threading.Thread(target=lambda: a.run(stop=stop_a, poll_timeout_s=0.2))
    tb = threading.Thread(target=lambda: b.run(stop=stop_b, poll_timeout_s=0.2))
    ta.start()
    tb.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (a.source.assignment() and b.source.assignment()):
        time.sleep(0.1)
    assert a.source.assignment() and b.source.assignment(), "the group did not split the partitions"
    assert not (a.source.assignment() & b.source.assignment())
    with EventProducer(shadow_broker.bootstrap_servers, topic) as prod:  # events arrive while both run
        for i, r in enumerate(recs):
            for ev in r.events:
                prod.send(ev)
            if i == len(recs) // 2:
                prod.flush()
                time.sleep(1.0)
                stop_a.set()  # a leaves mid-stream: its twins move to b through their snapshots
                ta.join(30)
                a.source.close()
    total = sum(len(r.events) for r in recs)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len(b.source.assignment()) == 6 and sum(t.stats.events_processed for t in b.twins.values()) >= total:
            break
        time.sleep(0.2)
    assert len(b.source.assignment()) == 6
    assert a.records_processed > 0 and b.records_processed > 0  # both did part of the work
    stop_b.set()
    tb.join(30)
    b.close()
    got = read_predictions(tmp_path / "a.jsonl") | read_predictions(tmp_path / "b.jsonl")
    # the same request predicted by both members (replayed after the hand-over) must be identical
    both = read_predictions(tmp_path / "a.jsonl").keys() & read_predictions(tmp_path / "b.jsonl").keys()
    for key in both:
        assert read_predictions(tmp_path / "a.jsonl")[key] == read_predictions(tmp_path / "b.jsonl")[key]
    assert got == want
    assert {iid: t.stats.snapshot() for iid, t in b.twins.items()} == {
        iid: t.stats.snapshot() for iid, t in ref.twins.items()}
