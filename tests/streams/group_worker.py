"""A consumer-group member for the crash test (run as a subprocess: ``python group_worker.py BS TOPIC DLQ GROUP DB
NAME``).

It processes records into a SQLite "downstream" the way the live shadow service checkpoints: in one transaction it
stores the processed event ids *and* the next offset of each partition; only then does it commit the offsets to
Kafka. On assignment it seeks to the offsets stored downstream, so a record processed just before a crash is not
processed again by the member that inherits the partition, and one not yet stored is processed by it.
"""
from __future__ import annotations

import signal
import sqlite3
import sys
import time
from collections import defaultdict

from streams.kafka_io import ConsumedRecord, EventConsumer

SCHEMA = """
CREATE TABLE IF NOT EXISTS processed (event_id TEXT, part INTEGER, off INTEGER, worker TEXT);
CREATE TABLE IF NOT EXISTS offsets (part INTEGER PRIMARY KEY, next INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS members (worker TEXT, parts TEXT, at REAL);
CREATE TABLE IF NOT EXISTS skipped (worker TEXT, part INTEGER, n INTEGER);
"""


def open_db(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=60, isolation_level=None)
    # Both workers open the fresh file at once; SQLite can refuse the switch to WAL with "database is locked" at
    # once, without waiting out the busy timeout (it once killed a worker at start in CI), so retry it.
    deadline = time.monotonic() + 60
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    db.executescript(SCHEMA)
    return db


def store(db: sqlite3.Connection, worker: str, recs: list[ConsumedRecord]) -> dict[tuple[str, int], int]:
    """Store a batch atomically; returns the offsets to commit. Records below the stored offset were processed by
    someone else already and are skipped (the stored offset is the truth, not Kafka's commit)."""
    by_part: dict[tuple[str, int], list[ConsumedRecord]] = defaultdict(list)
    for r in recs:
        by_part[(r.topic, r.partition)].append(r)
    commits: dict[tuple[str, int], int] = {}
    db.execute("BEGIN IMMEDIATE")
    try:
        for tp, rs in by_part.items():
            row = db.execute("SELECT next FROM offsets WHERE part=?", (tp[1],)).fetchone()
            stored = row[0] if row else 0
            keep = [r for r in rs if r.offset >= stored]
            if len(keep) < len(rs):
                db.execute("INSERT INTO skipped VALUES (?,?,?)", (worker, tp[1], len(rs) - len(keep)))
            if not keep:
                continue
            if keep[0].offset != stored:
                raise RuntimeError(f"gap on partition {tp[1]}: stored {stored}, got {keep[0].offset}")
            db.executemany("INSERT INTO processed VALUES (?,?,?,?)",
                           [(e.event_id, r.partition, r.offset, worker) for r in keep for e in r.events])
            nxt = keep[-1].next_offset
            db.execute("INSERT INTO offsets VALUES (?,?) ON CONFLICT(part) DO UPDATE SET next=excluded.next",
                       (tp[1], nxt))
            commits[tp] = nxt
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return commits


def main() -> int:
    bs, topic, dlq, group, db_path, name = sys.argv[1:7]
    db = open_db(db_path)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    holder: dict[str, EventConsumer] = {}

    def on_assign(parts: set[tuple[str, int]]) -> None:
        db.execute("INSERT INTO members VALUES (?,?,?)", (name, ",".join(str(p) for _, p in sorted(parts)),
                                                          time.time()))
        for tp in parts:
            row = db.execute("SELECT next FROM offsets WHERE part=?", (tp[1],)).fetchone()
            holder["c"].seek(tp, row[0] if row else 0)

    consumer = EventConsumer(bs, topic, group, dead_letter_topic=dlq, on_assign=on_assign,
                             session_timeout_ms=3000, max_poll_records=2000, record_format="events", max_poll_interval_ms=20000)
    holder["c"] = consumer
    while not stop["now"]:
        recs = consumer.poll_batch(0.2)
        if recs:
            consumer.flush_dead_letters()  # checkpoint order: dead letters, downstream state + offsets, commit
            commits = store(db, name, recs)
            consumer.commit(commits)
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
