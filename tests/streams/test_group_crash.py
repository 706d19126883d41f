"""Acceptance: 100,000 events through a group of two consumers, one killed with SIGKILL midway.

Every event must be processed exactly once downstream (checked by event id), and the dead-letter topic must hold
exactly the bad records injected among them. The members are real subprocesses (``group_worker.py``) that
checkpoint like the live service: downstream state and next offsets in one transaction, then the Kafka commit;
on assignment they seek to the stored offsets.
"""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from streams.broker import EmbeddedBroker
from streams.deadletter import read_dead_letters
from streams.kafka_io import EventProducer

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

N_EVENTS = 100_000
PARTITIONS = 4
BAD_EVERY = 4_000  # 25 bad records, spread over the stream
WORKER = Path(__file__).with_name("group_worker.py")


def _count(db: Path, sql: str) -> int:
    if not db.exists():
        return 0
    con = sqlite3.connect(db, timeout=30)
    try:
        return int(con.execute(sql).fetchone()[0] or 0)
    except sqlite3.OperationalError:
        return 0  # table not created yet
    finally:
        con.close()


def _wait(cond, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_sigkill_one_of_two_consumers_every_event_exactly_once(kafka_broker: EmbeddedBroker, unique_topic: str,
                                                               tmp_path: Path) -> None:
    bs = kafka_broker.bootstrap_servers
    topic, dlq, group = unique_topic, unique_topic + ".dlq", "g-" + unique_topic
    kafka_broker.create_topics({topic: PARTITIONS, dlq: PARTITIONS})
    db = tmp_path / "downstream.sqlite"

    def spawn(name: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, str(WORKER), bs, topic, dlq, group, str(db), name],
                                stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"{name}.err", "wb"))

    victim, survivor = spawn("victim"), spawn("survivor")
    try:
        # Both members hold partitions before any event exists, so the kill is guaranteed to orphan some.
        _wait(lambda: _count(db, "SELECT count(DISTINCT worker) FROM members") == 2, 60, "both members assigned")

        bad_values: set[bytes] = set()

        def produce() -> None:
            # Paced in chunks, so the kill lands while events are still flowing.
            with EventProducer(bs, topic, linger_ms=20) as producer:
                for i in range(N_EVENTS):
                    inst = f"inst-{i % 8}"
                    producer.send_raw(b'{"schema_version":1,"kind":"decode_batch","instance_id":"%s","ts":%d.5,"running_reqs":%d,'
                                      b'"event_id":"e%d"}' % (inst.encode(), i, i % 64, i), inst.encode())
                    if i % BAD_EVERY == BAD_EVERY // 2:
                        bad = b'{"kind":"decode_batch","bad":%d}' % i
                        bad_values.add(bad)
                        producer.send_raw(bad, inst.encode())
                    if i % 5_000 == 4_999:
                        producer.flush()
                        time.sleep(0.15)

        feeder = threading.Thread(target=produce, daemon=True)
        feeder.start()
        # Kill midway: once the victim has stored work, while the stream is still flowing.
        _wait(lambda: _count(db, "SELECT count(*) FROM processed WHERE worker='victim'") >= 5_000
              and _count(db, "SELECT count(*) FROM processed") >= 30_000, 120, "progress before the kill")
        done_at_kill = _count(db, "SELECT count(*) FROM processed")
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        feeder.join(120)
        assert len(bad_values) == 25
        assert done_at_kill < N_EVENTS * 0.8

        total_records = N_EVENTS + len(bad_values)
        _wait(lambda: _count(db, "SELECT sum(next) FROM offsets") == total_records, 150, "all offsets stored")
    finally:
        for p in (victim, survivor):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in (victim, survivor):
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()

    assert survivor.returncode == 0, (tmp_path / "survivor.err").read_text()[-2000:]
    con = sqlite3.connect(db)
    rows, distinct = con.execute("SELECT count(*), count(DISTINCT event_id) FROM processed").fetchone()
    assert (rows, distinct) == (N_EVENTS, N_EVENTS)  # exactly once, by id
    ids = {r[0] for r in con.execute("SELECT event_id FROM processed")}
    assert ids == {f"e{i}" for i in range(N_EVENTS)}
    by_worker = dict(con.execute("SELECT worker, count(*) FROM processed GROUP BY worker").fetchall())
    assert by_worker["victim"] >= 5_000 and by_worker["survivor"] > 0
    # The survivor took over at least one of the victim's partitions.
    victim_parts = {int(p) for (ps,) in con.execute("SELECT parts FROM members WHERE worker='victim'")
                    for p in ps.split(",") if p}
    marks = ",".join("?" * len(victim_parts))
    taken = con.execute(f"SELECT count(*) FROM processed WHERE worker='survivor' AND part IN ({marks})",
                        sorted(victim_parts)).fetchone()[0]
    assert victim_parts and taken > 0
    # Inheriting members seeked to the stored offsets: no record below them was ever handed out again.
    assert con.execute("SELECT count(*) FROM skipped").fetchone()[0] == 0

    letters = read_dead_letters(bs, dlq)
    assert sorted(d.value for d in letters) == sorted(bad_values)  # exactly the injected ones, no duplicates
    assert len({d.source for d in letters}) == len(bad_values)
    assert all(d.source_topic == topic and "Field required" in d.error for d in letters)
