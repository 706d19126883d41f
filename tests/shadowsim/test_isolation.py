"""Issue 11: no record can stop the live shadow. Each failure the issue reports is reproduced as raw record bytes
through the consumer's decoder into ``ShadowService``; then a seeded fuzz mix of hostile records interleaved with
the demo scenario must leave the healthy instances' predictions exactly as in a clean run, with every record
accounted for."""
from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import pytest

from benchmarks.hostile import hostile_records
from shadowsim.shadow.config import InstanceConfig, LimitsConfig, ShadowConfig, SnapshotConfig, TimeConfig
from shadowsim.shadow.engine import SimEngine, SimEngineFactory, engine_factory
from shadowsim.shadow.service import DECODE_REASONS, SERVICE_REASONS, ShadowService
from shadowsim.shadow.sink import PredictionSink, read_predictions
from shadowsim.shadow.sources import MemorySource, Record
from streams.kafka_io import RecordDecoder

T = 1_800_000_000.0


def decoded(values: list[tuple[bytes | None, bytes]], topic: str = "t", partitions: int = 1,
            start: dict[int, int] | None = None) -> list[Record]:
    """Records as the Kafka consumer hands them over: decoded by ``RecordDecoder``, partitioned by key."""
    dec = RecordDecoder("auto")
    offsets = dict(start or {})
    out = []
    for key, value in values:
        p = zlib.crc32(key or b"") % partitions
        ev, err = dec(value, key, topic, p, [], None)
        out.append(Record(topic, p, offsets.get(p, 0), key, ev, err))
        offsets[p] = offsets.get(p, 0) + 1
    return out


def ev(kind: str, **kw: Any) -> bytes:
    return json.dumps({"schema_version": 1, "kind": kind, "instance_id": "a", "ts": T, **kw}).encode()


def requests(n: int, iid: str = "a", t0: float = T, prefix: str = "r") -> list[bytes]:
    out = []
    for i in range(n):
        a = t0 + i * 0.5
        out.append(ev("request_arrived", instance_id=iid, request_id=f"{prefix}{i}", prompt_tokens=200 + i, ts=a))
        out.append(ev("request_finished", instance_id=iid, request_id=f"{prefix}{i}", prompt_tokens=200 + i,
                      output_tokens=8 + i % 5, ts=a + 0.4, ttft_s=0.05, e2e_s=0.4))
    out.append(ev("decode_batch", instance_id=iid, running_reqs=0, ts=t0 + n * 0.5 + 30))
    return out


def run(tmp: Path, recs: list[Record], *, cfg: ShadowConfig | None = None, factory: Any = engine_factory,
        name: str = "p") -> tuple[ShadowService, dict[tuple[str, str], dict[str, Any]]]:
    cfg = cfg or ShadowConfig(instances={"default": InstanceConfig(latency_backend="linear")},
                              snapshot=SnapshotConfig(dir=tmp / f"{name}-state"))
    sink = PredictionSink(tmp / f"{name}.jsonl")
    svc = ShadowService(cfg, lambda a, r: MemorySource(recs, a, r, batch=64), factory, sink=sink)
    svc.run(idle_timeout_s=0, poll_timeout_s=0)
    svc.close()
    return svc, read_predictions(tmp / f"{name}.jsonl")


CASES = {  # the issue's reproductions: bytes of one record, and the reason it is counted under
    "tp_size 0": (ev("server_config", tp_size=0), "server_config"),
    "page_size 0": (ev("server_config", page_size=0), "server_config"),
    "max_running_requests 0": (ev("server_config", max_running_requests=0), "server_config"),
    "count beyond float range": (b'{"schema_version":1,"kind":"request_arrived","instance_id":"a","ts":1800000000,'
                                 b'"request_id":"big","prompt_tokens":1' + b"0" * 400 + b"}", "request_arrived"),
    "ts 1e308": (ev("decode_batch", running_reqs=1, ts=1e308), "decode_batch"),
    "#new-seq: 1000000000": (b"[2027-01-15 08:00:00 TP0] Prefill batch. #new-seq: 1000000000, #new-token: 5, "
                             b"#cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0", "prefill_batch"),
    "truncated JSON": (ev("decode_batch", running_reqs=3)[:40], "json"),
    "invalid JSON": (b'{"schema_version":1,"kind":"decode_batch",}', "json"),
    "settings no engine accepts": (ev("server_config", context_len=1), "invalid_server_config"),
    "two hours ahead": (ev("decode_batch", running_reqs=1, ts=T + 7200), "ts_window"),
    "two days behind": (ev("decode_batch", running_reqs=1, ts=T - 2 * 86400), "ts_window"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_record_the_issue_reports_is_counted_by_reason_and_changes_nothing(case: str, tmp_path: Path) -> None:
    bad, reason = CASES[case]
    clean = requests(6)
    _, want = run(tmp_path, decoded([(b"a", v) for v in clean]), name="clean")
    # the bad record in the middle of the stream, twice (a restart would meet it again)
    mixed = clean[:5] + [bad] + clean[5:9] + [bad] + clean[9:]
    svc, got = run(tmp_path, decoded([(b"a", v) for v in mixed]), name="mixed")
    assert svc.dead_letters() == {reason: 2}
    assert got == want and len(want) == 6
    assert svc.records_processed == len(mixed)


def test_a_duplicate_delivery_with_a_reordered_time_is_applied_once(tmp_path: Path) -> None:
    clean = requests(6)
    _, want = run(tmp_path, decoded([(b"a", v) for v in clean]), name="clean")
    dups = [ev("request_arrived", request_id="r2", prompt_tokens=202, ts=T - 100),
            ev("request_finished", request_id="r2", prompt_tokens=202, output_tokens=9, ts=T - 50, e2e_s=3.0),
            ev("request_finished", request_id="r1", prompt_tokens=201, output_tokens=9, ts=T + 0.1, e2e_s=0.1)]
    svc, got = run(tmp_path, decoded([(b"a", v) for v in clean[:8] + dups + clean[8:]]), name="dup")
    assert got == want
    assert svc.twins["a"].stats.counters["requests_finished"]["actual"] == 6


class _PoisonFactory(SimEngineFactory):
    """A simulator with a bug: it raises when request ``poison`` is submitted (an exception in the middle of a
    record, after the twin already changed)."""

    def __call__(self, cfg: Any, server_config: Any, epoch_ts: float, snapshot: Any) -> SimEngine:
        eng = super().__call__(cfg, server_config, epoch_ts, snapshot)
        submit = eng.submit

        def poisoned(rid: str, *a: Any, **k: Any) -> None:
            if rid == "poison":
                raise ZeroDivisionError("simulated bug")
            submit(rid, *a, **k)

        eng.submit = poisoned  # type: ignore[method-assign]
        return eng


def test_an_exception_while_applying_rolls_the_record_back_and_rebuilds_only_that_twin(tmp_path: Path) -> None:
    clean = requests(8) + requests(4, "b")
    _, want = run(tmp_path, decoded([(k.encode(), v) for k, v in zip(["a"] * 17 + ["b"] * 9, clean)]), name="c")
    poison = [ev("request_arrived", request_id="poison", prompt_tokens=10, ts=T + 1.1, output_tokens_hint=3)]
    stream = [(b"a", v) for v in clean[:7]] + [(b"a", poison[0])] + [(b"a", v) for v in clean[7:17]] + \
        [(b"b", v) for v in clean[17:]]
    cfg = ShadowConfig(instances={"default": InstanceConfig(latency_backend="linear")},
                       snapshot=SnapshotConfig(dir=tmp_path / "s", every_events=5))  # checkpoints mid-stream
    svc, got = run(tmp_path, decoded(stream), cfg=cfg, factory=_PoisonFactory(), name="poison")
    assert svc.dead_letters() == {"apply_error": 1}
    assert svc.counters["twin_rebuilds"] == 1 and svc.counters["twin_resets"] == 0
    assert got == want
    # nothing of the failed record survives in the state: the event counts are the clean run's
    assert svc.twins["a"].stats.events_processed == 17
    parked = svc.source.dead_lettered  # type: ignore[attr-defined]
    assert len(parked) == 1 and parked[0][1].startswith("apply_error: ZeroDivisionError: simulated bug")


class _BombFactory(SimEngineFactory):
    """A simulator with a state-dependent bug: once request ``bomb`` was submitted, running it more than 2 s past
    that arrival raises, and the armed state survives a snapshot (a checkpoint taken before the failure carries
    it, like a corrupt KV count would)."""

    def __call__(self, cfg: Any, server_config: Any, epoch_ts: float, snapshot: Any) -> SimEngine:
        eng = super().__call__(cfg, server_config, epoch_ts, snapshot)
        armed = {"at": (snapshot or {}).get("bomb_at")}
        submit, advance_to, snap = eng.submit, eng.advance_to, eng.snapshot

        def submit_(rid: str, arrival_ts: float, *a: Any, **k: Any) -> None:
            if rid == "bomb":
                armed["at"] = arrival_ts + 2.0
            submit(rid, arrival_ts, *a, **k)

        def advance_to_(ts: float) -> Any:
            if armed["at"] is not None and ts > armed["at"]:
                raise ZeroDivisionError("simulated bug in the simulator's state")
            return advance_to(ts)

        eng.submit, eng.advance_to = submit_, advance_to_  # type: ignore[method-assign]
        eng.snapshot = lambda: {**snap(), "bomb_at": armed["at"]}  # type: ignore[method-assign]
        return eng


def test_a_twin_whose_checkpoint_fails_again_restarts_empty_instead_of_failing_on_every_batch(
        tmp_path: Path, caplog: Any) -> None:
    """The simulation of twin ``a`` raises in the middle of a run (not while a record is applied), from a state its
    last checkpoint already holds: restarted from that checkpoint it fails again at the next batch, and then starts
    empty — two resets, not one per batch for ever (issue 11's 1,000,000-record run spent most of its time so).
    Twin ``b`` is not touched."""
    clean_b = requests(4, "b", t0=T + 100)
    _, want_b = run(tmp_path, decoded([(b"b", v) for v in clean_b]), name="clean-b")
    a = requests(8)[:-1] + [ev("request_arrived", request_id="bomb", prompt_tokens=10, ts=T + 1.1,
                                  output_tokens_hint=3)]
    a += [ev("decode_batch", running_reqs=1, ts=T + 3.6 + 0.1 * k) for k in range(4)]  # a checkpoint holds it
    a += [ev("decode_batch", running_reqs=0, ts=T + 30 + k) for k in range(6)]
    stream = [(b"a", v) for v in a] + [(b"b", v) for v in clean_b]
    cfg = ShadowConfig(instances={"default": InstanceConfig(latency_backend="linear")},
                       snapshot=SnapshotConfig(dir=tmp_path / "s", every_events=3))
    sink = PredictionSink(tmp_path / "bomb.jsonl")
    svc = ShadowService(cfg, lambda a_, r_: MemorySource(decoded(stream), a_, r_, batch=1), _BombFactory(),
                        sink=sink)
    with caplog.at_level("ERROR", logger="shadowsim.shadow"):
        svc.run(idle_timeout_s=0, poll_timeout_s=0)
    svc.close()
    assert svc.counters["twin_resets"] == 2
    msgs = [r.getMessage() for r in caplog.records if "the simulation failed" in r.getMessage()]
    assert len(msgs) == 2 and "restarts from its last checkpoint" in msgs[0]
    assert "restarts from empty (it failed again after a restart from its checkpoint)" in msgs[1]
    assert svc.records_processed == len(stream)
    got = read_predictions(tmp_path / "bomb.jsonl")
    assert {k: v for k, v in got.items() if k[0] == "b"} == want_b and len(want_b) == 4


def test_beyond_the_twin_cap_new_instances_are_dead_lettered_but_named_ones_are_not(tmp_path: Path) -> None:
    values = []
    for i in range(10):
        values += [(f"fake{i}".encode(), v) for v in requests(1, f"fake{i}")]
    values += [(b"named", v) for v in requests(2, "named")]
    cfg = ShadowConfig(instances={"default": InstanceConfig(latency_backend="linear"),
                                  "named": InstanceConfig(latency_backend="linear")},
                       limits=LimitsConfig(max_twins=3), snapshot=SnapshotConfig(dir=tmp_path / "s"))
    svc, got = run(tmp_path, decoded(values), cfg=cfg)
    assert set(svc.twins) == {"fake0", "fake1", "fake2", "named"}
    assert svc.dead_letters() == {"twin_cap": 7 * 3}
    assert {k[0] for k in got} == {"fake0", "fake1", "fake2", "named"}


def test_requests_whose_finish_never_arrives_expire_and_memory_stays_bounded(tmp_path: Path) -> None:
    values = [ev("request_arrived", request_id=f"lost{i}", prompt_tokens=100, ts=T + i) for i in range(3000)]
    cfg = ShadowConfig(instances={"default": InstanceConfig(latency_backend="linear")},
                       time=TimeConfig(max_wait_s=5.0, pending_expiry_margin_s=10.0),
                       snapshot=SnapshotConfig(dir=tmp_path / "s"))
    svc, _ = run(tmp_path, decoded([(b"a", v) for v in values]), cfg=cfg)
    twin = svc.twins["a"]
    # older than max_wait + margin (15 s) + allowed lateness (2 s) behind the newest event: forgotten
    assert len(twin.pending) <= 18 and len(twin.predicted) <= 18
    assert twin.stats.requests_expired >= 3000 - 18
    assert len(twin.done) <= 10 * 5 + 18  # ids of forgotten requests are kept 10 × max_wait_s, then dropped


def test_a_snapshot_offset_past_the_end_of_the_partition_resumes_from_the_earliest(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    recs = decoded([(b"a", v) for v in requests(5)])
    cfg = ShadowConfig(instances={"default": InstanceConfig(latency_backend="linear")},
                       snapshot=SnapshotConfig(dir=tmp_path / "s"))
    first, _ = run(tmp_path, recs, cfg=cfg, name="one")
    # the broker lost its log (in-memory broker restarted): offsets 0.. again, fewer records than the snapshot's
    fresh = decoded([(b"a", v) for v in requests(3, t0=T + 100, prefix="new")])
    again, got = run(tmp_path, fresh, cfg=cfg, name="two")
    assert again.counters["offset_resets"] == 1
    assert again.records_processed == len(fresh)  # none skipped as "already in the snapshot"
    assert "past the end" in caplog.text and "resuming from the earliest offset 0" in caplog.text
    assert again.partitions[("t", 0)].next_offset == len(fresh)
    assert len(got) == 3


def test_a_corrupt_newest_snapshot_falls_back_to_the_previous_one(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    recs = decoded([(b"a", v) for v in requests(10)])
    cfg = ShadowConfig(instances={"default": InstanceConfig(latency_backend="linear")},
                       snapshot=SnapshotConfig(dir=tmp_path / "s", every_events=4, keep=3))
    ref, want = run(tmp_path, recs, cfg=cfg, name="ref")
    manifests = ref.store.manifests("t", 0)
    assert len(manifests) == 3
    manifests[0].write_text('{"format": 2, "twins": {"a": 7}}')  # wrong structure
    svc, got = run(tmp_path, recs, cfg=cfg, name="ref")  # same sink: replays append identical records
    assert svc.counters["snapshot_fallbacks"] == 1
    assert str(manifests[0]) in caplog.text
    assert got == want
    assert svc.twins["a"].stats.snapshot() == ref.twins["a"].stats.snapshot()


def test_fuzz_mix_leaves_healthy_predictions_unchanged_and_every_record_accounted(short_log: Any,
                                                                                tmp_path: Path) -> None:
    sc, clean_recs = short_log
    healthy = sorted({r.events[0].instance_id for r in clean_recs})
    clean_values = [(r.key, r.events[0].model_dump_json(exclude_none=True).encode()) for r in clean_recs]
    cfg = sc.shadow.model_copy(update={"snapshot": SnapshotConfig(dir=tmp_path / "ref-state", every_events=700),
                                       "limits": LimitsConfig(max_twins=40)})
    _, want = run(tmp_path, decoded(clean_values, partitions=3), cfg=cfg, name="ref")
    bad = hostile_records(2500, seed=11, healthy=healthy, huge_every=1250)  # two 10 MB lines
    mixed: list[tuple[bytes | None, bytes]] = []
    step = len(clean_values) // len(bad) + 1
    for i, (key, value) in enumerate(clean_values):
        mixed.append((key, value))
        if i % step == 0 and bad:
            k, v, _ = bad.pop()
            mixed.append((k, v))
    mixed += [(k, v) for k, v, _ in bad]
    cfg2 = cfg.model_copy(update={"snapshot": SnapshotConfig(dir=tmp_path / "mix-state", every_events=700)})
    svc, got = run(tmp_path, decoded(mixed, partitions=3), cfg=cfg2, name="mix")
    assert {k: v for k, v in got.items() if k[0] in healthy} == want
    # 0 silent: every record was applied, skipped (not SGLang's) or counted under a reason
    accounted = svc.counters["records_applied"] + svc.records_skipped() + sum(svc.dead_letters().values())
    assert accounted == svc.records_processed == len(mixed)
    assert set(svc.dead_letters()) <= DECODE_REASONS | set(SERVICE_REASONS) | {"other"}  # bounded label values
    assert svc.dead_letters()["json"] > 0 and svc.records_skipped() > 0
    assert len(svc.twins) <= 40 + len(healthy)


def test_twenty_crashes_while_failing_records_are_applied_lose_and_double_nothing(tmp_path: Path) -> None:
    """A crash = the process state abandoned without a final checkpoint (what SIGKILL leaves: the files on disk and
    the group's committed offsets), at random points, with records that fail inside the twin's apply."""
    import random

    clean = requests(30) + requests(20, "b")
    keys = [b"a"] * 61 + [b"b"] * 41
    poison = ev("request_arrived", request_id="poison", prompt_tokens=10, ts=T + 3.2, output_tokens_hint=3)
    stream = list(zip(keys, clean))
    for at in (9, 33, 70, 71, 90):
        stream.insert(at, (b"a", poison))
    recs = decoded(stream, partitions=2)
    cfg = ShadowConfig(instances={"default": InstanceConfig(latency_backend="linear")},
                       snapshot=SnapshotConfig(dir=tmp_path / "ref", every_events=7, every_s=1e9))
    ref, want = run(tmp_path, recs, cfg=cfg, factory=_PoisonFactory(), name="ref")
    assert ref.dead_letters() == {"apply_error": 5} and len(want) == 50
    rng = random.Random(7)
    crashes = 0
    for trial in range(4):
        cfg_t = cfg.model_copy(update={"snapshot": SnapshotConfig(dir=tmp_path / f"s{trial}", every_events=7,
                                                                  every_s=1e9)})
        sink_path = tmp_path / f"p{trial}.jsonl"
        committed: dict[Any, int] = {}
        for _ in range(5):
            svc = ShadowService(cfg_t, lambda a, r: MemorySource(recs, a, r, batch=rng.randint(1, 9),
                                                                  committed=dict(committed)),
                                _PoisonFactory(), sink=PredictionSink(sink_path))
            svc.run(max_records=rng.randint(1, 30), poll_timeout_s=0, checkpoint_at_end=False)
            committed = dict(svc.source.committed)  # type: ignore[attr-defined]
            svc.sink._f.close()  # type: ignore[union-attr]  # no flush, no checkpoint: the process is gone
            crashes += 1
        svc = ShadowService(cfg_t, lambda a, r: MemorySource(recs, a, r, committed=committed), _PoisonFactory(),
                            sink=PredictionSink(sink_path))
        svc.run(idle_timeout_s=0, poll_timeout_s=0)
        svc.close()
        assert read_predictions(sink_path) == want, trial
        for iid in ("a", "b"):
            assert svc.twins[iid].stats.snapshot() == ref.twins[iid].stats.snapshot(), (trial, iid)
    assert crashes == 20


def _flood(n: int) -> list[bytes]:
    """``n`` requests at 1,000/s, each 4,000 prompt tokens and 200 output tokens (known at arrival, as in a trace
    replay), finishing 1 s later: far more than one simulated server serves, so its queue grows by ~900/s."""
    out = []
    for i in range(n):
        a = T + i * 0.001
        out.append(ev("request_arrived", request_id=f"f{i}", prompt_tokens=4000, ts=a, output_tokens_hint=200))
        out.append(ev("request_finished", request_id=f"f{i}", prompt_tokens=4000, output_tokens=200, ts=a + 1.0,
                      ttft_s=0.5, e2e_s=1.0))
    out.sort(key=lambda v: json.loads(v)["ts"])
    out.append(ev("decode_batch", running_reqs=0, ts=T + n * 0.001 + 5.0))
    return out


def test_a_flooded_twins_simulator_queue_stays_bounded_and_every_refused_request_is_counted(tmp_path: Path) -> None:
    """Issue 11: the simulator's own waiting queue of a flooded instance grew with everything the flood submitted.
    It is bounded now by ``limits.max_simulated_queue``: a request entering a full queue is refused, as SGLang's
    ``--max-queued-requests`` refuses it (0.5.9 ``Scheduler._abort_on_queued_limit``: len(waiting_queue) + 1 >
    the limit), forgotten like an expired request, and counted in ``requests_shed``
    (``shadowsim_requests_shed_total``). The refusal is decided in simulated time, so it does not depend on how
    the records were batched, and it survives a checkpoint."""
    from exporters.prometheus import ShadowCollector
    from prometheus_client import CollectorRegistry, generate_latest
    from shadowsim.shadow.view import build_view

    cap = 200
    values = [(b"a", v) for v in _flood(3000)]
    recs = decoded(values)
    seen: list[int] = []

    def make(batch: int, state: str) -> ShadowService:
        cfg = ShadowConfig(instances={"default": InstanceConfig(latency_backend="linear")},
                           limits=LimitsConfig(max_simulated_queue=cap),
                           snapshot=SnapshotConfig(dir=tmp_path / state, every_events=500, every_s=1e9))
        return ShadowService(cfg, lambda a, r: MemorySource(recs, a, r, batch=batch), engine_factory,
                             sink=PredictionSink(tmp_path / f"{state}.jsonl"))

    svc = make(64, "big")
    svc.run(idle_timeout_s=0, poll_timeout_s=0, on_batch=lambda s: seen.append(s.twins["a"].engine.queued()))
    svc.close()
    twin = svc.twins["a"]
    assert max(seen) <= cap  # the queue never held more than the cap
    assert twin.stats.requests_shed > 1000  # most of the flood was refused ...
    got = read_predictions(tmp_path / "big.jsonl")
    # ... and every request is accounted for: predicted and joined, refused, or expired
    assert len(got) + twin.stats.requests_shed + twin.stats.requests_expired + len(twin.pending) == 3000
    assert not any(k[1] in twin.pending for k in got)
    # the same requests are refused whatever the batching
    one = make(1, "one")
    one.run(idle_timeout_s=0, poll_timeout_s=0)
    one.close()
    assert read_predictions(tmp_path / "one.jsonl") == got
    assert one.twins["a"].stats.snapshot() == twin.stats.snapshot()
    # exported, and restored from the checkpoint
    reg = CollectorRegistry()
    reg.register(ShadowCollector(lambda: build_view(svc)))
    assert (f'shadowsim_requests_shed_total{{sglang_instance="a"}} {float(twin.stats.requests_shed)}'
            in generate_latest(reg).decode())
    again = make(64, "big")
    again.run(max_records=0, poll_timeout_s=0, checkpoint_at_end=False)
    assert again.twins["a"].stats.requests_shed == twin.stats.requests_shed
