"""The live shadow's main loop: records in, twins advanced in event time, predictions out, checkpoints.

The loop, as a specification::

    for each batch polled from the source:
        for each record, in partition order:
            skip it if its offset precedes the partition's snapshot (already reflected in the restored state)
            count it by reason if it did not decode (the source dead-lettered it), or as skipped if it held
                nothing of SGLang's
            dead-letter it (reason ts_window) if an event time lies outside the partition's window, or
                (twin_cap) if it would create a twin beyond limits.max_twins
            apply its events to the twins of their instances, as one transaction: if any event raises, the
                record is dead-lettered (apply_error, or the twin's own reason) and every twin it touched is
                rebuilt as it was before the record (last checkpoint + the events applied since)
            the partition's next offset := record offset + 1
        write the twins' new joined predictions to the sink
        checkpoint when every_events records or every_s wall seconds have passed

    checkpoint (the order matters, see docs/shadow.md "Checkpoint order"):
        1. flush outputs: predictions sink fsync'd, dead letters acknowledged
        2. persist each partition's snapshot (twins + next offset) atomically
        3. commit the next offsets to the consumer group

Rebalance: a newly assigned partition restores its newest usable snapshot (falling back to older ones), checks its
next offset against the partition's range (``limits.offset_reset`` when outside) and seeks to it; a revoked
partition is checkpointed, then its twins are dropped (the next owner restores them from that snapshot).

No record stops the loop: what a record does wrong is counted under a bounded set of reasons
(``dead_letters()``), dead-lettered with that reason, and logged for the twin it broke.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shadowsim.shadow.config import ShadowConfig
from shadowsim.shadow.ranks import _RANK_ONLY, RankRouter, base_instance_id, rank_twin_id, routes_by_rank_only
from shadowsim.shadow.sink import PredictionSink
from shadowsim.shadow.snapshot import UNCHANGED, SnapshotStore
from shadowsim.shadow.sources import TP, Source, SourceFactory
from shadowsim.shadow.twin import EngineFactory, InstanceTwin, RecordRejected
from simcore.errors import UserError
from simcore.events import EVENT_KINDS

log = logging.getLogger("shadowsim.shadow")

#: labels a decode error may count under (anything else counts as ``other``): event kinds, our adapters' prefixes,
#: exception types. A fixed set, because error texts can quote what a record claims (its ``kind``, say).
DECODE_REASONS = frozenset(EVENT_KINDS) | {
    "json", "events", "otlp", "otlp_proto", "request", "sharegpt", "mooncake", "azure", "server_info",
    "bench_serving", "prometheus", "internal_error", "tombstone", "too_large", "ValidationError", "JSONDecodeError",
    "UnicodeDecodeError", "ValueError", "TypeError", "KeyError", "RecursionError", "MemoryError", "OverflowError"}
#: reasons the service itself dead-letters a record for
SERVICE_REASONS = ("ts_window", "twin_cap", "apply_error", "invalid_server_config")
_NEG_INF = -math.inf  # a constant: `-math.inf` is a global, an attribute and a negation per use
#: threads writing the partitions' checkpoint files at once (each partition's files stay in their order)
CHECKPOINT_WRITERS = 8


@dataclass
class PartitionState:
    next_offset: int | None = None  # None: nothing read yet and no snapshot (the group's committed offset rules)
    dead_letters: dict[str, int] = field(default_factory=dict)  # reason -> count
    skipped: int = 0  # records with nothing of SGLang's in them (other programs' lines)
    applied: int = 0  # records applied to twins (with dead_letters and skipped: every record the partition read)
    instances: set[str] = field(default_factory=set)
    since_checkpoint: int = 0
    max_ts: float = -math.inf  # newest event time of an accepted record (the time window's reference)
    dirty: set[str] = field(default_factory=set)  # twins changed since the last checkpoint
    saved: set[str] = field(default_factory=set)  # twins in the checkpoint in force
    verify_position: bool = False  # the snapshot's offset is past the broker's end: check the first record


def dead_letter_reason(error: str) -> str:
    """A small label value from a decode error: what precedes the first colon, up to a dot (the event kind
    ``request_finished``, the adapter, or the exception type ``ValidationError``) when it is one of
    ``DECODE_REASONS``; anything else is ``other``. Keeps the ``reason`` label's cardinality bounded whatever the
    error texts say."""
    head = error.split(":", 1)[0].split(".", 1)[0].strip().replace(" ", "_")
    if head.startswith("record_has_no_value"):
        return "tombstone"
    return head if head in DECODE_REASONS else "other"


class ShadowService:
    """Owns the twins of the partitions assigned to this process."""

    def __init__(self, config: ShadowConfig, make_source: SourceFactory, engine_factory: EngineFactory, *,
                 clock: Callable[[], float] = time.time, sink: PredictionSink | None = None,
                 store: SnapshotStore | None = None) -> None:
        self.config = config
        self.clock = clock
        self.engine_factory = engine_factory
        self.sink = sink
        self.store = store if store is not None else SnapshotStore(config.snapshot.dir, config.snapshot.keep)
        # the event-time window of admission, read once per record (frozen config: pydantic attributes cost a hook)
        self._max_past_s, self._max_future_s = config.time.max_past_s, config.time.max_future_s
        self.partitions: dict[TP, PartitionState] = {}
        self.twins: dict[str, InstanceTwin] = {}
        self.twin_partition: dict[str, TP] = {}
        # events applied to each twin since its partition's last checkpoint: a failed record rebuilds the twin
        # from that checkpoint plus these (bounded: checkpoints come every snapshot.every_events records)
        self._journal: dict[str, list[Any]] = {}
        self._held: set[str] = set()  # twins whose simulation run waits for the end of the poll batch
        self._drained: dict[str, set[str]] = {}  # request ids each twin wrote to the sink since its checkpoint
        # twins restarted from their checkpoint after their simulation failed, with no checkpoint since: failing
        # again, the checkpoint itself is suspect and the twin starts empty (no loop of rebuilds on every batch)
        self._restarted: set[str] = set()
        # one twin per DP rank of a data-parallel server (shadowsim/shadow/ranks.py)
        self.ranks = RankRouter(lambda iid: int(config.instance(iid).settings.get("dp_size", 1) or 1))
        self.lock = threading.RLock()  # held while state changes; the exporter takes it to read a consistent view
        self.records_processed = 0
        self.checkpoints = 0
        #: service-level counters (exported as shadowsim_<name>_total): twins rebuilt after a failed record, twins
        #: reset because even that failed, snapshot fallbacks, offsets outside their partition at assignment
        self.counters: dict[str, int] = {"records_applied": 0, "twin_rebuilds": 0, "twin_resets": 0,
                                         "snapshot_fallbacks": 0, "offset_resets": 0}
        self._last_checkpoint_wall = clock()
        self.source: Source = make_source(self._on_assign, self._on_revoke)

    # ---- rebalance callbacks (called from inside poll_batch, in this thread) ---------------------------------------
    def _on_assign(self, parts: set[TP]) -> None:
        with self.lock:
            for tp in sorted(parts):
                ps = PartitionState()
                if self._restore_partition(tp, ps):
                    assert ps.next_offset is not None
                    self._check_offset_range(tp, ps)
                    self.source.seek(tp, ps.next_offset)
                self.partitions[tp] = ps

    @staticmethod
    def _untimed_arrival(twins: dict[str, InstanceTwin]) -> Callable[[str], float]:
        """For a router state of version 1 (entries without their arrival time): a restored entry counts as arriving
        at its rank twin's watermark, so it expires at most ``max_wait_s + pending_expiry_margin_s`` later."""
        def arrival(twin_id: str) -> float:
            twin = twins.get(twin_id)
            return twin.watermark if twin is not None and twin.max_ts > -math.inf else math.inf
        return arrival

    def _restore_partition(self, tp: TP, ps: PartitionState) -> bool:
        """Install the newest snapshot of ``tp`` whose twins all restore; older ones are the fallback."""
        manifests = self.store.manifests(*tp)
        legacy = self.store.path(*tp)
        newest = manifests[0] if manifests else (legacy if legacy.exists() else None)
        for path, snap in self.store.candidates(*tp):
            twins: dict[str, InstanceTwin] = {}
            routing = RankRouter()
            try:
                for iid, tstate in snap["twins"].items():
                    twin = self._new_twin(iid)
                    twin.restore(tstate)
                    twins[iid] = twin
                if snap.get("ranks") is not None:  # checkpoints before the router was in them have none
                    routing.restore(snap["ranks"], untimed_arrival=self._untimed_arrival(twins))  # checked here,
                    # installed below with the twins
            except Exception as exc:  # noqa: BLE001 - a wrong-structure state: try the previous checkpoint
                log.warning("snapshot %s: its state does not restore (%s: %s); trying an older snapshot", path,
                            type(exc).__name__, " ".join(str(exc).split())[:200])
                continue
            if path != newest:
                self.counters["snapshot_fallbacks"] += 1
                log.warning("partition %s-%d resumes from the older snapshot %s (offset %d)", tp[0], tp[1], path,
                            snap["next_offset"])
            self.store.use(tp[0], tp[1], path)
            ps.next_offset = int(snap["next_offset"])
            ps.dead_letters = {str(k): int(v) for k, v in snap.get("dead_letters", {}).items()}
            ps.skipped = int(snap.get("skipped", 0))
            ps.applied = int(snap.get("applied", 0))  # absent in older checkpoints
            ps.max_ts = float(snap["max_ts"]) if snap.get("max_ts") is not None else -math.inf
            if snap.get("ranks") is not None:
                # requests in flight keep their DP rank
                self.ranks.restore(snap["ranks"], merge=True, untimed_arrival=self._untimed_arrival(twins))
            for iid, twin in twins.items():
                self.twins[iid] = twin
                self.twin_partition[iid] = tp
                self._journal[iid] = []
                ps.instances.add(iid)
            ps.saved = set(twins)
            return True
        if newest is not None:
            self.counters["snapshot_fallbacks"] += 1
            log.error("partition %s-%d: no snapshot is usable; resuming from the group's committed offset with "
                      "empty twins", tp[0], tp[1])
        return False

    def _check_offset_range(self, tp: TP, ps: PartitionState) -> None:
        """A snapshot's offset outside the partition (retention deleted records, or the topic was recreated):
        log it, count it, and apply ``limits.offset_reset``."""
        offset_range = getattr(self.source, "offset_range", None)
        if offset_range is None or ps.next_offset is None:
            return
        lo, hi = offset_range(tp)
        if lo <= ps.next_offset <= hi:
            return
        if ps.next_offset > hi:
            # Kafka resets a fetch position past the end to the earliest offset (auto_offset_reset), after which
            # every record would look "already in the snapshot". Some brokers (the embedded Tansu) report the last
            # batch's base offset as the end, so a position past it is only suspect: the first record fetched
            # tells (an offset below the snapshot's = the position was reset).
            ps.verify_position = True
            log.info("partition %s-%d: the snapshot's offset %d is past the broker's end offset %d; checking the "
                     "first record fetched", tp[0], tp[1], ps.next_offset, hi)
            return
        self._reset_offset(tp, ps, lo, hi, "before the start")

    def _reset_offset(self, tp: TP, ps: PartitionState, lo: int, hi: int | None, what: str) -> None:
        assert ps.next_offset is not None
        policy = self.config.limits.offset_reset
        self.counters["offset_resets"] += 1
        if policy == "fail":
            raise UserError("limits.offset_reset", f"partition {tp[0]}-{tp[1]}: the snapshot's offset "
                            f"{ps.next_offset} is {what} of the partition ({lo}..{hi})",
                            "delete the state directory, or set limits.offset_reset: earliest")
        if policy == "latest" and hi is None:
            hi = self.source.offset_range(tp)[1]  # type: ignore[attr-defined]
        new = lo if policy == "earliest" else hi
        assert new is not None
        log.warning("partition %s-%d: the snapshot's offset %d is %s of the partition (a recreated topic, a "
                    "restarted in-memory broker, or expired records); resuming from the %s offset %d "
                    "(limits.offset_reset)", tp[0], tp[1], ps.next_offset, what, policy, new)
        ps.next_offset = new
        if policy == "latest":
            self.source.seek(tp, new)

    def _on_revoke(self, parts: set[TP]) -> None:
        with self.lock:
            owned = [tp for tp in parts if tp in self.partitions]
            self.checkpoint(owned, commit=True)
            for tp in owned:
                ps = self.partitions.pop(tp)
                self.ranks.forget({base_instance_id(iid) for iid in ps.instances})
                for iid in ps.instances:
                    self.twins.pop(iid, None)
                    self.twin_partition.pop(iid, None)
                    self._journal.pop(iid, None)
                    self._drained.pop(iid, None)

    def _new_twin(self, iid: str) -> InstanceTwin:
        c = self.config
        return InstanceTwin(iid, c.instance(base_instance_id(iid)), c.time, c.drift, self.engine_factory, self.clock,
                            max_simulated_queue=c.limits.max_simulated_queue)

    # ---- processing ----------------------------------------------------------------------------------------------
    def process(self, rec: Any, *, flush: bool = True) -> bool:
        """Apply one record; False when it was skipped as already reflected in a restored snapshot. ``flush=False``
        leaves the twins' simulation runs to ``flush_twins`` (``run`` does that once per poll batch)."""
        tp = (rec.topic, rec.partition)
        ps = self.partitions.get(tp)
        if ps is None:
            ps = self.partitions[tp] = PartitionState()
        if ps.next_offset is not None and rec.offset < ps.next_offset:
            if not ps.verify_position:
                return False
            # the first record after seeking past the broker's end lies before the snapshot: the broker reset the
            # position (the snapshot's offset does not exist in this partition)
            ps.verify_position = False
            self._reset_offset(tp, ps, rec.offset, None, "past the end")
            if rec.offset < ps.next_offset:  # policy latest: skip to the end
                return False
        ps.verify_position = False
        events = rec.events
        if rec.error is not None:
            self._count(ps, dead_letter_reason(rec.error))  # the source parked it
        elif not events:
            ps.skipped += 1
        elif (self._apply_one(tp, ps, rec, events[0]) if len(events) == 1 else self._apply_record(tp, ps, rec)):
            self.counters["records_applied"] += 1
            ps.applied += 1
        ps.next_offset = rec.offset + 1
        ps.since_checkpoint += 1
        self.records_processed += 1
        if flush:
            self.flush_twins()
        return True

    def _process_batch(self, recs: Any, limit: int | None) -> int:
        """``process(rec, flush=False)`` of each record of a poll batch, in order, at most ``limit`` of them (the
        rest is rewound); returns how many counted. The common record (one event, no decode error, at or after the
        partition's next offset, no position to verify) takes ``process``'s steps written out here, its partition's
        state looked up once per run of records of one partition; any other record goes through ``process``."""
        done = 0
        fast = applied = 0  # records of the written-out path, and those of them applied (added to the counters)
        partitions, apply_one, process = self.partitions, self._apply_one, self.process
        topic = part = ps = tp = None
        try:
            for i, rec in enumerate(recs):
                if limit is not None and done >= limit:
                    self._rewind(recs[i:])
                    break
                if rec.partition != part or rec.topic != topic or ps is None:
                    topic, part = rec.topic, rec.partition
                    tp = (topic, part)
                    ps = partitions.get(tp)
                events = rec.events
                if ps is None or ps.verify_position or rec.error is not None or len(events) != 1 or \
                        (ps.next_offset is not None and rec.offset < ps.next_offset):
                    if process(rec, flush=False):
                        done += 1
                    ps = None  # process() may have created it: look it up again
                    continue
                if apply_one(tp, ps, rec, events[0]):
                    applied += 1
                    ps.applied += 1
                ps.next_offset = rec.offset + 1
                ps.since_checkpoint += 1
                fast += 1
                done += 1
        finally:
            self.counters["records_applied"] += applied
            self.records_processed += fast
        return done

    @staticmethod
    def _count(ps: PartitionState, reason: str) -> None:
        ps.dead_letters[reason] = ps.dead_letters.get(reason, 0) + 1

    def _reject(self, ps: PartitionState, rec: Any, reason: str, detail: str) -> None:
        self._count(ps, reason)
        park = getattr(self.source, "dead_letter", None)
        if park is not None:
            park(rec, f"{reason}: {detail}")

    def _admit(self, ps: PartitionState, rec: Any, ids: list[str]) -> tuple[str, str] | None:
        """(reason, detail) when the record must not be applied at all (``ids``: the events' twin ids)."""
        tc, cap = self.config.time, self.config.limits.max_twins
        new: set[str] = set()
        for ev, iid in zip(rec.events, ids):
            twin = self.twins.get(iid)
            # The window's reference: the instance's own newest event time, so that no other instance's records
            # can move it; for an instance's first record, the partition's (none for instances shadow.yaml names)
            if twin is not None and twin.max_ts > -math.inf:
                ref, whose = twin.max_ts, "the instance's"
            elif base_instance_id(iid) in self.config.instances:
                ref, whose = -math.inf, ""
            else:
                ref, whose = ps.max_ts, "the partition's"
            if ref > -math.inf and not (ref - tc.max_past_s <= ev.ts <= ref + tc.max_future_s):
                return "ts_window", (f"{ev.kind} at ts {ev.ts!r} is outside [{ref - tc.max_past_s!r}, "
                                     f"{ref + tc.max_future_s!r}] ({whose} newest event time − time.max_past_s, "
                                     f"+ time.max_future_s)")
            if twin is None and base_instance_id(iid) not in self.config.instances:
                new.add(iid)
        if new and len(self.twins) + len(new) > cap:
            return "twin_cap", (f"{len(self.twins)} twins already (limits.max_twins = {cap}); instance "
                                f"{sorted(new)[0][:80]!r} is not in shadow.yaml")
        return None

    def _apply_one(self, tp: TP, ps: PartitionState, rec: Any, ev: Any) -> bool:
        """``_apply_record`` of a record with one event (one log line: nearly every record), written out: the same
        admission, transaction and roll-back, without the bookkeeping of several events and twins."""
        ranks = self.ranks
        # ranks.twin_id(ev); for a batch line (routed by its own DP rank, nothing to read or change) written out
        cls = type(ev)
        only = _RANK_ONLY.get(cls)
        if only is None:
            only = routes_by_rank_only(cls)
        if only:  # a pydantic event class: its fields read from its __dict__ (no __getattr__ hook, see the anchor)
            f = ev.__dict__
            rank, iid, ts = f["dp_rank"], f["instance_id"], f["ts"]
            if rank is not None:
                iid = rank_twin_id(iid, int(rank))
        else:
            iid = ranks.twin_id(ev)
            ts = ev.ts
        twins = self.twins
        twin = twins.get(iid)
        # _admit(ps, rec, [iid]), for one event
        if twin is not None and twin.max_ts > _NEG_INF:
            ref = twin.max_ts
        elif base_instance_id(iid) in self.config.instances:
            ref = _NEG_INF
        else:
            ref = ps.max_ts
        if ref > _NEG_INF:
            if not (ref - self._max_past_s <= ts <= ref + self._max_future_s):  # time.max_past_s / max_future_s
                refused = self._admit(ps, rec, [iid])  # the reason and its text, as for any record
                assert refused is not None
                ranks.roll_back()
                self._reject(ps, rec, *refused)
                return False
        created = twin is None
        if created and base_instance_id(iid) not in self.config.instances and \
                len(twins) + 1 > self.config.limits.max_twins:
            refused = self._admit(ps, rec, [iid])
            assert refused is not None
            ranks.roll_back()
            self._reject(ps, rec, *refused)
            return False
        journals = self._journal
        if created:
            twin = twins[iid] = self._new_twin(iid)
            self.twin_partition[iid] = tp
            journals[iid] = []
            ps.instances.add(iid)
        journal = journals.get(iid)
        if journal is None:
            journal = journals[iid] = []
        n_events, n_out = len(journal), len(twin.out)  # type: ignore[union-attr]  # (the roll-back's "before")
        try:
            twin.apply(ev, defer=True)  # type: ignore[union-attr]
        except RecordRejected as exc:
            ranks.roll_back()
            self._roll_back(tp, ps, rec, {iid: (n_events, n_out)}, {iid} if created else set(), clean=True,
                            why=str(exc))
            self._reject(ps, rec, exc.reason, str(exc).split(": ", 1)[-1])
            return False
        except Exception as exc:  # noqa: BLE001 - no record may stop the service
            ranks.roll_back()
            why = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            self._roll_back(tp, ps, rec, {iid: (n_events, n_out)}, {iid} if created else set(), clean=False,
                            why=why)
            self._reject(ps, rec, "apply_error", why)
            return False
        journal.append(ev)
        ps.dirty.add(iid)
        self._held.add(iid)
        if ranks._undo:  # ranks.commit()  # noqa: SLF001
            ranks.commit()
        if ranks._open.get(iid):  # noqa: SLF001 - this twin has DP routing entries: forget those it forgets (issue 11)
            ranks.expire(iid, self.config.time.expiry_before(twin.watermark))  # type: ignore[union-attr]
        if ts > ps.max_ts:
            ps.max_ts = ts
        return True

    def _apply_record(self, tp: TP, ps: PartitionState, rec: Any) -> bool:
        """Apply a decoded record as one transaction; False when it was refused (counted and dead-lettered)."""
        events = rec.events  # two or more: process() sends one-event records to _apply_one
        twin_id = self.ranks.twin_id
        ids = [twin_id(ev) for ev in events]  # one twin per DP rank (shadowsim/shadow/ranks.py)
        refused = self._admit(ps, rec, ids)
        if refused is not None:
            self.ranks.roll_back()  # a refused record routes nothing (and a flood of new ids leaves no trace)
            self._reject(ps, rec, *refused)
            return False
        before: dict[str, tuple[int, int]] = {}  # iid -> (journal length, outputs) before this record
        created: set[str] = set()
        applied = 0
        twins, journals, dirty, held = self.twins, self._journal, ps.dirty, self._held
        try:
            for ev, iid in zip(events, ids):
                twin = twins.get(iid)
                if twin is None:
                    twin = twins[iid] = self._new_twin(iid)
                    self.twin_partition[iid] = tp
                    journals[iid] = []
                    ps.instances.add(iid)
                    created.add(iid)
                journal = journals.get(iid)
                if journal is None:
                    journal = journals[iid] = []
                if iid not in before:
                    before[iid] = (len(journal), len(twin.out))
                twin.apply(ev, defer=True)
                journal.append(ev)
                applied += 1
                dirty.add(iid)
                held.add(iid)
        except RecordRejected as exc:
            self.ranks.roll_back()
            self._roll_back(tp, ps, rec, before, created, clean=applied == 0, why=str(exc))
            self._reject(ps, rec, exc.reason, str(exc).split(": ", 1)[-1])
            return False
        except Exception as exc:  # noqa: BLE001 - no record may stop the service
            self.ranks.roll_back()
            why = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            self._roll_back(tp, ps, rec, before, created, clean=False, why=why)
            self._reject(ps, rec, "apply_error", why)
            return False
        self.ranks.commit()
        if self.ranks._open:  # noqa: SLF001
            tc = self.config.time
            for iid in set(ids):
                self.ranks.expire(iid, tc.expiry_before(twins[iid].watermark))
        newest = max(ev.ts for ev in events)
        if newest > ps.max_ts:  # max(ps.max_ts, newest)
            ps.max_ts = newest
        return True

    def _roll_back(self, tp: TP, ps: PartitionState, rec: Any, before: dict[str, tuple[int, int]], created: set[str],
                   *, clean: bool, why: str) -> None:
        """Undo a record: twins it created are dropped; twins it changed are rebuilt from their last checkpoint
        plus the events applied to them since, before this record (replay is deterministic)."""
        for iid, (n_events, n_out) in before.items():
            if iid in created:
                self.twins.pop(iid, None)
                self.twin_partition.pop(iid, None)
                self._journal.pop(iid, None)
                self._drained.pop(iid, None)
                ps.instances.discard(iid)
                ps.dirty.discard(iid)
                continue
            if clean:
                continue  # RecordRejected before any change, and no earlier event of the record was applied
            old = self.twins[iid]
            replayed: list[dict[str, Any]] = []
            journal = self._journal[iid][:n_events]
            self._journal[iid] = journal
            twin = self._new_twin(iid)
            try:
                base = self.store.load_twin(tp[0], tp[1], iid) if iid in ps.saved else None
                if base is not None:
                    twin.restore(base)
                for ev in journal:
                    twin.apply(ev, defer=True)
                twin.flush()
                # the replay re-creates every output since the checkpoint: keep those not written yet
                written = self._drained.get(iid, set()) | {o["request_id"] for o in old.out[:n_out]}
                replayed = [o for o in twin.out if o["request_id"] not in written]
                twin.out = []
                self.counters["twin_rebuilds"] += 1
                log.warning("record %s-%d@%d failed on twin %s (%s): dead-lettered; the twin was rebuilt from its "
                            "last checkpoint and the %d events applied since", rec.topic, rec.partition, rec.offset,
                            iid, why, len(journal))
            except Exception as exc:  # noqa: BLE001 - even the rebuild failed: start the twin afresh
                replayed = []
                twin = self._new_twin(iid)
                self._journal[iid] = []
                ps.saved.discard(iid)
                self.counters["twin_resets"] += 1
                log.error("record %s-%d@%d failed on twin %s (%s), and rebuilding it failed too (%s: %s): the twin "
                          "starts afresh", rec.topic, rec.partition, rec.offset, iid, why, type(exc).__name__, exc)
            twin.out = old.out[:n_out] + replayed
            twin.last_event_wall_ts = old.last_event_wall_ts
            self.twins[iid] = twin
            ps.dirty.add(iid)

    def flush_twins(self) -> None:
        """Run the simulation of every twin that received events since the last flush (once per poll batch)."""
        for iid in sorted(self._held):
            twin = self.twins.get(iid)
            if twin is None:
                continue
            try:
                twin.flush()
            except Exception as exc:  # noqa: BLE001 - the simulator itself failed: rebuild that twin
                self._rebuild_after_flush(iid, exc)
        self._held.clear()

    def _rebuild_after_flush(self, iid: str, exc: Exception) -> None:
        """A twin whose simulation raised while running a batch: rebuilt from its last checkpoint (a replay of
        its journal would raise again, the events are not at fault one by one), counted, logged."""
        tp = self.twin_partition.get(iid)
        ps = self.partitions.get(tp) if tp is not None else None
        old = self.twins[iid]
        twin = self._new_twin(iid)
        again = iid in self._restarted
        base = None
        try:
            if not again and ps is not None and tp is not None and iid in ps.saved:
                base = self.store.load_twin(tp[0], tp[1], iid)
            if base is not None:
                twin.restore(base)
        except Exception:  # noqa: BLE001
            twin, base = self._new_twin(iid), None
        self.counters["twin_resets"] += 1
        self._restarted.add(iid)
        how = ("its last checkpoint" if base is not None else
               "empty (it failed again after a restart from its checkpoint)" if again else "empty")
        log.error("twin %s: the simulation failed (%s: %s); the twin restarts from %s, without the %d events since",
                  iid, type(exc).__name__, " ".join(str(exc).split())[:300], how, len(self._journal.get(iid, [])))
        twin.out = old.out
        self._journal[iid] = []
        self.twins[iid] = twin
        if ps is not None:
            ps.dirty.add(iid)

    def _drain_outputs(self) -> None:
        for iid, twin in self.twins.items():
            if twin.out:
                if self.sink is not None:
                    self.sink.write(twin.out)
                self._drained.setdefault(iid, set()).update(o["request_id"] for o in twin.out)
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
                done += self._process_batch(recs, None if max_records is None else max_records - done)
                self.flush_twins()
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
        self.flush_twins()
        self._drain_outputs()
        if self.sink is not None:
            self.sink.flush()
        flush_dl = getattr(self.source, "flush_dead_letters", None)
        if flush_dl is not None:
            flush_dl()
        # 2. snapshots, atomically per partition: the states are taken here, under the lock; the files are written
        # (and fsync'd) for all partitions at once, each partition's in its own order (CHECKPOINT_WRITERS)
        offsets: dict[TP, int] = {}
        jobs: list[tuple[TP, PartitionState, list[str], dict[str, Any]]] = []
        for tp in todo:
            ps = self.partitions[tp]
            assert ps.next_offset is not None
            live = [iid for iid in sorted(ps.instances) if iid in self.twins]
            # O(changed twins): a twin without events since the last checkpoint keeps its file
            jobs.append((tp, ps, live, {
                "next_offset": ps.next_offset,
                "dead_letters": ps.dead_letters,
                "skipped": ps.skipped,
                "applied": ps.applied,
                "max_ts": ps.max_ts if math.isfinite(ps.max_ts) else None,
                # the DP-rank router's state of this partition's instances (ranks.py: ROUTER_STATE_VERSION)
                "ranks": self.ranks.snapshot({base_instance_id(iid) for iid in ps.instances}),
                "twins": {iid: self.twins[iid].snapshot() if iid in ps.dirty or iid not in ps.saved else UNCHANGED
                          for iid in live},
            }))
        errors = self._save_all(jobs)
        for (tp, ps, live, _), error in zip(jobs, errors):
            if error is not None:
                continue
            ps.saved = set(live)
            ps.dirty.clear()
            for iid in live:
                self._journal[iid] = []
                self._drained.pop(iid, None)
                self._restarted.discard(iid)
            ps.since_checkpoint = 0
            offsets[tp] = ps.next_offset
        first_error = next((e for e in errors if e is not None), None)
        if first_error is not None:
            raise first_error  # nothing is committed: the previous checkpoints stay in force
        # 3. commit: only now may the group forget the records (a failed commit is harmless: the snapshot wins)
        if commit and offsets:
            self.source.commit(offsets)
        self._last_checkpoint_wall = self.clock()
        self.checkpoints += 1

    def _save_all(self, jobs: list[tuple[TP, PartitionState, list[str], dict[str, Any]]]) -> list[BaseException | None]:
        """Write each partition's checkpoint (``SnapshotStore.save``); partitions in parallel threads, since most
        of a save is waiting for fsync (3 per partition): 12 fsyncs one after the other held the loop ~40 ms per
        checkpoint of 4 partitions. Returns each job's exception or None."""
        def save(job: tuple[TP, PartitionState, list[str], dict[str, Any]]) -> None:
            self.store.save(job[0][0], job[0][1], job[3])

        if len(jobs) <= 1:
            errors: list[BaseException | None] = []
            for job in jobs:
                try:
                    save(job)
                    errors.append(None)
                except Exception as exc:  # noqa: BLE001 - raised by checkpoint() after the others are written
                    errors.append(exc)
            return errors
        with ThreadPoolExecutor(max_workers=min(len(jobs), CHECKPOINT_WRITERS),
                                thread_name_prefix="shadowsim-checkpoint") as pool:
            futures = [pool.submit(save, job) for job in jobs]
        return [f.exception() for f in futures]

    def close(self) -> None:
        with self.lock:
            self.checkpoint()
        self.source.close()
        if self.sink is not None:
            self.sink.close()

    # ---- read-only view for the exporter -------------------------------------------------------------------------
    def dead_letters(self) -> dict[str, int]:
        """Records not applied, by reason, over the partitions owned (decode errors and the service's own)."""
        out: dict[str, int] = {}
        for ps in self.partitions.values():
            for r, n in ps.dead_letters.items():
                out[r] = out.get(r, 0) + n
        return out

    def records_skipped(self) -> int:
        """Records with nothing of SGLang's in them (other programs' lines), over the partitions owned."""
        return sum(ps.skipped for ps in self.partitions.values())
