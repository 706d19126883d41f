"""The service loop: checkpoint order, resume from a snapshot after a crash, dead letters, skipped offsets.

A crash is modelled in memory by abandoning a service without its final checkpoint: whatever it wrote after its
last snapshot (predictions) is written again by the next run, which resumes from that snapshot.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from shadowsim.shadow.config import InstanceConfig, ShadowConfig, SnapshotConfig
from shadowsim.shadow.engine import engine_factory
from shadowsim.shadow.service import ShadowService
from shadowsim.shadow.sink import PredictionSink, read_predictions
from shadowsim.shadow.sources import MemorySource, Record


def _config(base: ShadowConfig, state: Path, every_events: int) -> ShadowConfig:
    return base.model_copy(update={"snapshot": SnapshotConfig(dir=state, every_s=1e9, every_events=every_events)})


def _service(cfg: ShadowConfig, recs: tuple[Record, ...], sink: PredictionSink, committed: dict | None = None,
             ) -> ShadowService:
    clock = [0.0]

    def make(on_assign: Any, on_revoke: Any) -> MemorySource:
        return MemorySource(recs, on_assign, on_revoke, batch=97, committed=committed)

    return ShadowService(cfg, make, engine_factory, clock=lambda: clock[0], sink=sink)


def _stats(svc: ShadowService) -> dict[str, Any]:
    return {iid: t.stats.snapshot() for iid, t in sorted(svc.twins.items())}


def test_crash_and_resume_gives_the_uninterrupted_predictions_and_counters(short_log: Any, tmp_path: Path) -> None:
    sc, recs = short_log
    ref_sink = PredictionSink(tmp_path / "ref.jsonl")
    ref = _service(_config(sc.shadow, tmp_path / "ref-state", 400), recs, ref_sink)
    assert ref.run(idle_timeout_s=0) == len(recs)
    ref.close()
    want = read_predictions(tmp_path / "ref.jsonl")
    assert len(want) > 100
    want_stats = _stats(ref)
    events_per_instance = {iid: sum(1 for r in recs for e in r.events if e.instance_id == iid) for iid in want_stats}
    assert {iid: s["events_processed"] for iid, s in want_stats.items()} == events_per_instance

    rng = random.Random(5)
    for trial in range(3):
        state, out = tmp_path / f"state{trial}", tmp_path / f"out{trial}.jsonl"
        cfg = _config(sc.shadow, state, 250)
        committed: dict = {}
        crashes = 0
        while True:  # crash at random points until a run gets to the end
            sink = PredictionSink(out)
            svc = _service(cfg, recs, sink, committed)
            k = rng.randint(1, 1500)
            if svc.run(max_records=k, idle_timeout_s=0, checkpoint_at_end=False) < k:
                svc.close()
                break
            # the crash: no final checkpoint; the source remembers only what was committed
            crashes += 1
            committed = dict(svc.source.committed)  # type: ignore[attr-defined]
            sink._f.flush()  # what the OS already had survives a process kill
        assert crashes >= 2
        got = read_predictions(out)
        assert got == want, trial
        assert _stats(svc) == want_stats, trial


def test_checkpoint_writes_outputs_then_snapshot_then_commit(short_log: Any, tmp_path: Path) -> None:
    sc, recs = short_log
    sink = PredictionSink(tmp_path / "p.jsonl")
    svc = _service(_config(sc.shadow, tmp_path / "s", 10**9), recs, sink)
    order: list[str] = []
    orig_flush, orig_save, orig_commit = sink.flush, svc.store.save, svc.source.commit
    sink.flush = lambda: (order.append("flush"), orig_flush())[1]  # type: ignore[method-assign]
    svc.store.save = lambda *a, **k: (order.append("save"), orig_save(*a, **k))[1]  # type: ignore[method-assign]
    svc.source.commit = lambda o: (order.append("commit"), orig_commit(o))[1]  # type: ignore[method-assign]
    svc.run(max_records=300)
    # 300 records all come from partition 0 (the memory source drains partitions in order); partitions with
    # nothing read yet get no snapshot: the group's committed offset already describes them.
    assert order == ["flush", "save", "commit"]
    snap = svc.store.load("sglang.events", 0)
    assert snap is not None and snap["next_offset"] == svc.source.committed[("sglang.events", 0)]  # type: ignore[attr-defined]


def test_records_already_in_the_snapshot_are_skipped(short_log: Any, tmp_path: Path) -> None:
    sc, recs = short_log
    cfg = _config(sc.shadow, tmp_path / "s", 10**9)
    a = _service(cfg, recs, PredictionSink(tmp_path / "a.jsonl"))
    a.run(max_records=500)
    a.close()
    # A new member whose group offsets were never committed (commit lost): it must still not re-apply records.
    b = _service(cfg, recs, PredictionSink(tmp_path / "b.jsonl"), committed={})
    b.source.poll_batch(0, max_records=0)  # joins: restores snapshots and seeks
    first = [r for r in recs if r.partition == 0][:50]
    assert a.partitions[("sglang.events", 0)].next_offset == 500  # a read 500 records of partition 0
    skipped = sum(0 if b.process(r) else 1 for r in first)
    assert skipped == 50
    assert b.records_processed == 0


def test_dead_letters_are_counted_by_reason_and_survive_a_restart(tmp_path: Path) -> None:
    from simcore.events import parse_event

    ok = parse_event({"kind": "decode_batch", "instance_id": "x", "ts": 10.0, "running_reqs": 0})
    recs = (Record("t", 0, 0, b"x", [ok]),
            Record("t", 0, 1, b"x", [], "ValidationError: 1 validation error for Event"),
            Record("t", 0, 2, b"x", [], "JSONDecodeError: Expecting value"),
            Record("t", 0, 3, b"x", [], "ValidationError: kind"))
    cfg = ShadowConfig(instances={"default": InstanceConfig(latency_backend="linear")},
                       snapshot=SnapshotConfig(dir=tmp_path / "s"))
    svc = _service(cfg, recs, PredictionSink(tmp_path / "p.jsonl"))
    svc.run(idle_timeout_s=0)
    svc.close()
    assert svc.dead_letters() == {"ValidationError": 2, "JSONDecodeError": 1}
    again = _service(cfg, recs, PredictionSink(tmp_path / "p.jsonl"))
    again.run(idle_timeout_s=0)
    assert again.dead_letters() == {"ValidationError": 2, "JSONDecodeError": 1}
    assert again.twins["x"].stats.events_processed == 1
