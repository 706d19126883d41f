"""The live shadow's main loop: records in, twins advanced in event time, predictions out, checkpoints.

The loop, as a specification::

    for each batch polled from the source:
        for each record, in partition order:
            skip it if its offset precedes the partition's snapshot (already reflected in the restored state)
            count it as dead-lettered if it did not decode
            apply each of its events to the twin of the event's instance (which advances that twin)
            the partition's next offset := record offset + 1
        write the twins' new joined predictions to the sink
        checkpoint when every_events records or every_s wall seconds have passed

    checkpoint (the order matters, see docs/shadow.md "Checkpoint order"):
        1. flush outputs: predictions sink fsync'd, dead letters acknowledged
        2. persist each partition's snapshot (twins + next offset) atomically
        3. commit the next offsets to the consumer group

Rebalance: a newly assigned partition restores its snapshot and seeks to its next offset; a revoked partition is
checkpointed, then its twins are dropped (the next owner restores them from that snapshot).
"""
from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shadowsim.shadow.config import ShadowConfig
from shadowsim.shadow.ranks import RankRouter, base_instance_id
from shadowsim.shadow.sink import PredictionSink
from shadowsim.shadow.snapshot import SnapshotStore
from shadowsim.shadow.sources import TP, Source, SourceFactory
from shadowsim.shadow.twin import EngineFactory, InstanceTwin


@dataclass
class PartitionState:
    next_offset: int | None = None  # None: nothing read yet and no snapshot (the group's committed offset rules)
    dead_letters: dict[str, int] = field(default_factory=dict)  # reason -> count
    instances: set[str] = field(default_factory=set)
    since_checkpoint: int = 0


def dead_letter_reason(error: str) -> str:
    """A small label value from a decode error: what precedes the first colon, up to a dot — the event kind
    (``request_finished``), the adapter or the exception type (``ValidationError``); anything else is ``other``.
    Keeps the ``reason`` label's cardinality bounded whatever the error texts say."""
    head = error.split(":", 1)[0].split(".", 1)[0].strip().replace(" ", "_")
    return head if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,39}", head) else "other"


class ShadowService:
    """Owns the twins of the partitions assigned to this process."""

    def __init__(self, config: ShadowConfig, make_source: SourceFactory, engine_factory: EngineFactory, *,
                 clock: Callable[[], float] = time.time, sink: PredictionSink | None = None,
                 store: SnapshotStore | None = None) -> None:
        self.config = config
        self.clock = clock
        self.engine_factory = engine_factory
        self.sink = sink
        self.store = store if store is not None else SnapshotStore(config.snapshot.dir)
        self.partitions: dict[TP, PartitionState] = {}
        self.twins: dict[str, InstanceTwin] = {}
        self.twin_partition: dict[str, TP] = {}
        # one twin per DP rank of a data-parallel server (shadowsim/shadow/ranks.py)
        self.ranks = RankRouter(lambda iid: int(config.instance(iid).settings.get("dp_size", 1) or 1))
        self.lock = threading.RLock()  # held while state changes; the exporter takes it to read a consistent view
        self.records_processed = 0
        self.checkpoints = 0
        self._last_checkpoint_wall = clock()
        self.source: Source = make_source(self._on_assign, self._on_revoke)

    # ---- rebalance callbacks (called from inside poll_batch, in this thread) ---------------------------------------
    def _on_assign(self, parts: set[TP]) -> None:
        with self.lock:
            for tp in sorted(parts):
                ps = PartitionState()
                snap = self.store.load(*tp)
                if snap is not None:
                    ps.next_offset = int(snap["next_offset"])
                    ps.dead_letters = {k: int(v) for k, v in snap.get("dead_letters", {}).items()}
                    for iid, tstate in snap["twins"].items():
                        twin = self._new_twin(iid)
                        twin.restore(tstate)
                        self.twins[iid] = twin
                        self.twin_partition[iid] = tp
                        ps.instances.add(iid)
                    self.source.seek(tp, ps.next_offset)
                self.partitions[tp] = ps

    def _on_revoke(self, parts: set[TP]) -> None:
        with self.lock:
            owned = [tp for tp in parts if tp in self.partitions]
            self.checkpoint(owned, commit=True)
            for tp in owned:
                ps = self.partitions.pop(tp)
                for iid in ps.instances:
                    self.twins.pop(iid, None)
                    self.twin_partition.pop(iid, None)

    def _new_twin(self, iid: str) -> InstanceTwin:
        c = self.config
        return InstanceTwin(iid, c.instance(base_instance_id(iid)), c.time, c.drift, self.engine_factory, self.clock)

    # ---- processing ----------------------------------------------------------------------------------------------
    def process(self, rec: Any) -> bool:
        """Apply one record; False when it was skipped as already reflected in a restored snapshot."""
        tp = (rec.topic, rec.partition)
        ps = self.partitions.get(tp)
        if ps is None:
            ps = self.partitions[tp] = PartitionState()
        if ps.next_offset is not None and rec.offset < ps.next_offset:
            return False
        if rec.error is not None:
            reason = dead_letter_reason(rec.error)
            ps.dead_letters[reason] = ps.dead_letters.get(reason, 0) + 1
        for ev in rec.events:
            iid = self.ranks.twin_id(ev)
            twin = self.twins.get(iid)
            if twin is None:
                twin = self.twins[iid] = self._new_twin(iid)
                self.twin_partition[iid] = tp
                ps.instances.add(iid)
            twin.apply(ev)
        ps.next_offset = rec.offset + 1
        ps.since_checkpoint += 1
        self.records_processed += 1
        return True

    def _drain_outputs(self) -> None:
        for twin in self.twins.values():
            if twin.out:
                if self.sink is not None:
                    self.sink.write(twin.out)
                twin.out = []

    def run(self, *, max_records: int | None = None, idle_timeout_s: float | None = None,
            stop: threading.Event | None = None, poll_timeout_s: float = 0.5,
            on_batch: Callable[[ShadowService], None] | None = None, checkpoint_at_end: bool = True) -> int:
        """Consume until ``stop`` is set, ``max_records`` records were processed, or nothing arrived for
        ``idle_timeout_s`` wall seconds. Checkpoints on the way and (``checkpoint_at_end``) once at the end.
        Returns the number of records processed (records skipped as already in a snapshot do not count)."""
        done = 0
        idle_since = time.monotonic()
        while stop is None or not stop.is_set():
            want = None if max_records is None else max_records - done
            recs = self.source.poll_batch(poll_timeout_s, max_records=want)
            with self.lock:
                for i, rec in enumerate(recs):
                    if max_records is not None and done >= max_records:
                        self._rewind(recs[i:])
                        break
                    if self.process(rec):
                        done += 1
                self._drain_outputs()
                if self._checkpoint_due():
                    self.checkpoint()
            if on_batch is not None:
                on_batch(self)
            if recs or not self.source.assignment():
                idle_since = time.monotonic()  # idle means: partitions assigned, and nothing more in them
            elif idle_timeout_s is not None and time.monotonic() - idle_since >= idle_timeout_s:
                break
            if max_records is not None and done >= max_records:
                break
        if checkpoint_at_end:
            with self.lock:
                self.checkpoint()
        return done

    def _rewind(self, unprocessed: list[Any]) -> None:
        """Records fetched but not processed: move the read position back so a later ``run`` reads them."""
        first: dict[TP, int] = {}
        for r in unprocessed:
            first.setdefault((r.topic, r.partition), r.offset)
        for tp, off in first.items():
            self.source.seek(tp, off)

    def _checkpoint_due(self) -> bool:
        snap = self.config.snapshot
        events = sum(ps.since_checkpoint for ps in self.partitions.values())
        return events >= snap.every_events or (events > 0 and self.clock() - self._last_checkpoint_wall >= snap.every_s)

    def checkpoint(self, parts: list[TP] | None = None, *, commit: bool = True) -> None:
        """Flush outputs → persist snapshots with next offsets → commit offsets (in that order)."""
        todo = [tp for tp in (parts if parts is not None else list(self.partitions))
                if self.partitions[tp].next_offset is not None]
        # 1. outputs and dead letters are durable before any snapshot claims the records that produced them
        self._drain_outputs()
        if self.sink is not None:
            self.sink.flush()
        flush_dl = getattr(self.source, "flush_dead_letters", None)
        if flush_dl is not None:
            flush_dl()
        # 2. snapshots, atomically per partition
        offsets: dict[TP, int] = {}
        for tp in todo:
            ps = self.partitions[tp]
            assert ps.next_offset is not None
            self.store.save(tp[0], tp[1], {
                "next_offset": ps.next_offset,
                "dead_letters": ps.dead_letters,
                "twins": {iid: self.twins[iid].snapshot() for iid in sorted(ps.instances) if iid in self.twins},
            })
            ps.since_checkpoint = 0
            offsets[tp] = ps.next_offset
        # 3. commit: only now may the group forget the records (a failed commit is harmless: the snapshot wins)
        if commit and offsets:
            self.source.commit(offsets)
        self._last_checkpoint_wall = self.clock()
        self.checkpoints += 1

    def close(self) -> None:
        with self.lock:
            self.checkpoint()
        self.source.close()
        if self.sink is not None:
            self.sink.close()

    # ---- read-only view for the exporter -------------------------------------------------------------------------
    def dead_letters(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for ps in self.partitions.values():
            for r, n in ps.dead_letters.items():
                out[r] = out.get(r, 0) + n
        return out
