"""Per-rank twins of a data-parallel server (shadowsim/shadow/ranks.py), driven by a real DP-attention log.

The log: SGLang 0.4.8.post1, DeepSeek-R1 PD decode node, TP32 DP32 with --enable-dp-attention on 4×8 H800
(sgl-project/sglang#7707; ../shared/data/sglang_logs/CATALOG.json). Nine ``Decode batch`` lines from DP ranks
0, 1, 2, 4, 5, 6, 7 (5, 6 and 7 twice), each rank with its own running request and KV tokens.
Request dispatch follows SGLang's DataParallelController default, round robin
(managers/data_parallel_controller.py:round_robin_scheduler; arg_groups/serving_hook.py: auto → round_robin).
"""
from __future__ import annotations

from pathlib import Path

from shadowsim.shadow.config import InstanceConfig, ShadowConfig, SnapshotConfig
from shadowsim.shadow.engine import engine_factory
from shadowsim.shadow.ranks import RankRouter, base_instance_id, rank_twin_id
from shadowsim.shadow.service import ShadowService
from shadowsim.shadow.sources import MemorySource, Record
from simcore.events import DecodeBatch, RequestArrived, RequestFinished, RequestFirstToken
from streams.decode import iter_file_events

LOG = "data/sglang_logs/issue7707_v0.4.8_deepseek-r1_pd-decode_dp8-attn_tbo_decode-prealloc_crash.log"


def test_dp_attention_log_drives_one_twin_per_rank(shared_dir, tmp_path: Path) -> None:
    events = [it.event for it in iter_file_events(shared_dir / LOG, instance_id="r1-decode")
              if isinstance(it.event, DecodeBatch)]
    assert len(events) == 9
    cfg = ShadowConfig(instances={"default": InstanceConfig(model="unknown", latency_backend="linear")},
                       snapshot=SnapshotConfig(dir=tmp_path / "state", every_s=1e9, every_events=10_000))
    recs = tuple(Record("sglang.events", 0, i, b"r1-decode", [ev]) for i, ev in enumerate(events))
    svc = ShadowService(cfg, lambda a, r: MemorySource(recs, a, r), engine_factory, clock=lambda: 0.0)
    assert svc.run(idle_timeout_s=0) == 9
    assert sorted(svc.twins) == [rank_twin_id("r1-decode", k) for k in (0, 1, 2, 4, 5, 6, 7)]
    # each twin saw its own rank's lines only: DP0 has 13,148 KV tokens, DP1 647 (token usage 0.04 vs 0.00)
    assert svc.twins["r1-decode#dp0"].stats.events_processed == 1
    assert svc.twins["r1-decode#dp5"].stats.events_processed == 2
    assert svc.twins["r1-decode#dp0"].observed["kv_usage"] == 0.04
    assert svc.twins["r1-decode#dp1"].observed["kv_usage"] == 0.0
    assert {base_instance_id(t) for t in svc.twins} == {"r1-decode"}
    svc.close()


def test_requests_are_dispatched_round_robin_and_followed() -> None:
    router = RankRouter(lambda iid: 3 if iid == "dp" else 1)
    common = {"instance_id": "dp", "source": "t"}

    def arrived(rid: str) -> RequestArrived:
        return RequestArrived(ts=1.0, event_id=f"{rid}:a", request_id=rid, prompt_tokens=10, **common)

    ranks = [router.twin_id(arrived(f"r{k}")) for k in range(5)]
    assert ranks == ["dp#dp0", "dp#dp1", "dp#dp2", "dp#dp0", "dp#dp1"]
    first = RequestFirstToken(ts=2.0, event_id="r4:f", request_id="r4", ttft_s=1.0, **common)
    done = RequestFinished(ts=3.0, event_id="r4:d", request_id="r4", prompt_tokens=10, output_tokens=3, **common)
    assert router.twin_id(first) == router.twin_id(done) == "dp#dp1"
    single = RequestArrived(ts=1.0, event_id="x", request_id="x", prompt_tokens=1, instance_id="tp", source="t")
    assert router.twin_id(single) == "tp"  # no DP: the instance's own twin
    state = router.snapshot()
    again = RankRouter(lambda iid: 3)
    again.restore(state)
    assert again.twin_id(RequestFinished(ts=3.0, event_id="r3:d", request_id="r3", prompt_tokens=10, output_tokens=1,
                                         **common)) == "dp#dp0"


def test_refused_records_leave_the_router_as_it_was_and_a_flood_of_ids_keeps_it_bounded(tmp_path: Path) -> None:
    """Found by the memory benchmark (1,000,000 fake instance ids, issue 11): routing a record registered its
    instance in the router before admission, so every refused record of a new id stayed there (one cache entry per
    id, without end), and a refused server_config's dp_size re-routed the instance. A refused record routes
    nothing now, and the configured-DP-size cache is bounded."""
    from shadowsim.shadow.config import LimitsConfig
    from shadowsim.shadow.ranks import MAX_CONFIGURED_CACHE
    from simcore.events import DecodeBatch, ServerConfig

    cfg = ShadowConfig(instances={"default": InstanceConfig(model="unknown", latency_backend="linear")},
                       limits=LimitsConfig(max_twins=2),
                       snapshot=SnapshotConfig(dir=tmp_path / "s", every_s=1e9, every_events=10**9))
    t = 1.8e9
    common = {"source": "t"}
    evs = [DecodeBatch(instance_id=f"real-{k}", ts=t, event_id=f"d{k}", running_reqs=1, **common) for k in range(2)]
    evs += [ServerConfig(instance_id="fake-dp", ts=t, event_id="c", dp_size=4, **common)]  # beyond the cap
    evs += [RequestArrived(instance_id="fake-dp", ts=t, event_id="a", request_id="q", prompt_tokens=5, **common)]
    evs += [DecodeBatch(instance_id=f"fake-{k}", ts=t, event_id=f"f{k}", running_reqs=1, **common)
            for k in range(MAX_CONFIGURED_CACHE + 5000)]
    recs = tuple(Record("t", 0, i, ev.instance_id.encode(), [ev]) for i, ev in enumerate(evs))
    svc = ShadowService(cfg, lambda a, r: MemorySource(recs, a, r), engine_factory, clock=lambda: t)
    svc.run(idle_timeout_s=0, checkpoint_at_end=False)
    assert sorted(svc.twins) == ["real-0", "real-1"]
    assert svc.dead_letters() == {"twin_cap": len(evs) - 2}
    r = svc.ranks
    assert r._dp_size == {} and r._next_rank == {} and r._request_rank == {} and r._open == {} and r._undo == []
    assert len(r._configured) <= MAX_CONFIGURED_CACHE


# ---- the router's table in the checkpoint (issue 11) ------------------------------------------------------------
T0 = 1_800_000_000.0


def _dp_stream(n: int = 40) -> list[Record]:
    """A DP-3 instance (``settings.dp_size``) with ~8 requests in flight at any time: arrivals every 0.25 s, each
    finishing 2 s later, so every checkpoint holds requests whose rank only the router knows."""
    evs: list[tuple[float, object]] = []
    for i in range(n):
        a = T0 + i * 0.25
        evs.append((a, RequestArrived(instance_id="dp", ts=a, event_id=f"a{i}", request_id=f"q{i}",
                                      prompt_tokens=100 + 7 * i, source="t")))
        evs.append((a + 2.0, RequestFinished(instance_id="dp", ts=a + 2.0, event_id=f"f{i}", request_id=f"q{i}",
                                             prompt_tokens=100 + 7 * i, output_tokens=4 + i % 5, ttft_s=0.1,
                                             e2e_s=2.0, source="t")))
    evs.sort(key=lambda x: x[0])
    evs += [(T0 + n, DecodeBatch(instance_id="dp", ts=T0 + n * 0.25 + 60, event_id=f"end{k}", running_reqs=0,
                                 dp_rank=k, source="t")) for k in range(3)]  # each rank's clock moves on
    return [Record("t", 0, k, b"dp", [e]) for k, (_, e) in enumerate(evs)]


def _dp_config(state: Path) -> ShadowConfig:
    return ShadowConfig(instances={"default": InstanceConfig(model="unknown", latency_backend="linear",
                                                             settings={"dp_size": 3})},
                        snapshot=SnapshotConfig(dir=state, every_events=7, every_s=1e9))


def test_a_crash_and_restore_keeps_every_request_on_its_dp_rank(tmp_path: Path) -> None:
    """Issue 11: the router's request-to-rank table was not checkpointed, so after a restore the requests in flight
    finished on the instance's own twin (``dp``), which had never seen them arrive. Now it is in each partition's
    checkpoint: 12 crashes (state abandoned without a final checkpoint, as SIGKILL leaves it) at random points
    give exactly the predictions and per-rank counters of an uninterrupted run, and no request reaches ``dp``."""
    import random

    from shadowsim.shadow.sink import PredictionSink, read_predictions

    recs = _dp_stream()
    ref = ShadowService(_dp_config(tmp_path / "ref"), lambda a, r: MemorySource(recs, a, r), engine_factory,
                        sink=PredictionSink(tmp_path / "ref.jsonl"), clock=lambda: 0.0)
    ref.run(idle_timeout_s=0, poll_timeout_s=0)
    ref.close()
    want = read_predictions(tmp_path / "ref.jsonl")
    assert len(want) == 40 and sorted(ref.twins) == ["dp#dp0", "dp#dp1", "dp#dp2"]
    assert {k[0] for k in want} == {"dp#dp0", "dp#dp1", "dp#dp2"}
    rng = random.Random(11)
    for trial in range(3):
        state, sink_path = tmp_path / f"s{trial}", tmp_path / f"p{trial}.jsonl"
        committed: dict = {}
        for _ in range(4):
            svc = ShadowService(_dp_config(state), lambda a, r: MemorySource(recs, a, r, batch=rng.randint(1, 6),
                                                                             committed=dict(committed)),
                                engine_factory, sink=PredictionSink(sink_path), clock=lambda: 0.0)
            svc.run(max_records=rng.randint(5, 25), poll_timeout_s=0, checkpoint_at_end=False)
            committed = dict(svc.source.committed)  # type: ignore[attr-defined]
            svc.sink._f.close()  # type: ignore[union-attr]  # no flush, no checkpoint: the process is gone
        svc = ShadowService(_dp_config(state), lambda a, r: MemorySource(recs, a, r, committed=committed),
                            engine_factory, sink=PredictionSink(sink_path), clock=lambda: 0.0)
        svc.run(idle_timeout_s=0, poll_timeout_s=0)
        svc.close()
        assert read_predictions(sink_path) == want, trial
        assert "dp" not in svc.twins, trial  # no finish was routed to the instance's own twin
        for iid in ref.twins:
            assert svc.twins[iid].stats.snapshot() == ref.twins[iid].stats.snapshot(), (trial, iid)
        assert svc.ranks.snapshot() == ref.ranks.snapshot()


def test_the_router_state_is_versioned_and_older_checkpoints_still_restore(tmp_path: Path) -> None:
    """A checkpoint written before the router was in it (no ``ranks``) restores as before (requests in flight then
    finish on the instance twin); a router state of an unknown version makes the service fall back to the older
    checkpoint, like any state that does not restore."""
    import json

    recs = _dp_stream(12)
    cfg = _dp_config(tmp_path / "s")
    svc = ShadowService(cfg, lambda a, r: MemorySource(recs, a, r, batch=1), engine_factory, clock=lambda: 0.0)
    svc.run(max_records=7, poll_timeout_s=0)  # a checkpoint at offset 7
    svc.run(max_records=3, poll_timeout_s=0)  # and one at offset 10
    newest, older, *oldest = svc.store.manifests("t", 0)
    doc = json.loads(newest.read_bytes())
    assert doc["next_offset"] == 10 and json.loads(older.read_bytes())["next_offset"] == 7
    assert doc["ranks"]["version"] == 2 and doc["ranks"]["request_rank"]  # requests in flight, with their ranks
    in_flight = {r for _, r, _, _ in doc["ranks"]["request_rank"]}
    # an unknown version: the newest checkpoint is refused, the older one (offset 7) is used
    bad = dict(doc, ranks=dict(doc["ranks"], version=99))
    newest.write_bytes(json.dumps(bad).encode())
    again = ShadowService(cfg, lambda a, r: MemorySource(recs, a, r), engine_factory, clock=lambda: 0.0)
    again.run(max_records=0, poll_timeout_s=0, checkpoint_at_end=False)
    assert again.partitions[("t", 0)].next_offset == 7 and again.counters["snapshot_fallbacks"] == 1
    # the format before the router was checkpointed: no `ranks` key at all
    old = {k: v for k, v in doc.items() if k != "ranks"}
    newest.write_bytes(json.dumps(old).encode())
    for path in (older, *oldest):
        path.unlink()
    legacy = ShadowService(cfg, lambda a, r: MemorySource(recs, a, r), engine_factory, clock=lambda: 0.0)
    legacy.run(idle_timeout_s=0, poll_timeout_s=0, checkpoint_at_end=False)
    assert legacy.partitions[("t", 0)].next_offset == len(recs) and legacy.counters["snapshot_fallbacks"] == 0
    # without the table, the finishes of the requests in flight at the checkpoint reach the instance's twin
    assert legacy.twins["dp"].stats.counters["requests_finished"]["actual"] == len(in_flight)


def test_a_dp_attention_server_config_builds_each_rank_twin_as_a_dp_rank() -> None:
    """SGLang logs ``server_args`` after ``_handle_data_parallelism`` (0.5.9 server_args.py): a DP-attention server
    says ``enable_dp_attention=True, dp_size=8`` and its per-rank ``chunked_prefill_size``. The twin of each rank is
    then the rank scheduler of simcore/dp_attention.py: per-rank KV pool (simcore.memory for an attention TP group of
    tp/dp), schedule_conservativeness × 0.3, and each forward priced by DpAttentionLatency (attention on this rank's
    batch at attention TP 1, the MoE on the tokens of all eight ranks, as if they ran batches like this one)."""
    from streams.adapters.base import ParseContext
    from streams.adapters.sglang_log import parse_line
    from shadowsim.shadow.engine import SimEngine
    from simcore.gpus import load_gpu
    from simcore.memory import size_kv_pool
    from simcore.models import load_model
    from simcore.perf.base import BatchShape
    from simcore.settings import ServerSettings

    (ev,) = parse_line("[2026-10-30 12:00:01] server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V3', "
                       "tp_size=8, dp_size=8, enable_dp_attention=True, chunked_prefill_size=1024)", ParseContext())
    assert (ev.tp_size, ev.dp_size, ev.enable_dp_attention, ev.chunked_prefill_size) == (8, 8, True, 1024)
    server_config = ev.model_dump(exclude_none=True)
    cfg = InstanceConfig(model="deepseek-ai/DeepSeek-V3", gpu="h200_sxm", precision="fp8")
    eng = SimEngine(cfg, server_config, epoch_ts=1.8e9)
    assert eng.dp_ranks == 8
    assert eng.settings.chunked_prefill_size == 1024  # the reported per-rank value, not divided again
    assert eng.settings.schedule_conservativeness == 0.3 and not eng.settings.enable_dp_attention
    gpu = load_gpu("h200_sxm")
    pool = size_kv_pool(load_model(cfg.model), gpu, ServerSettings(tp_size=8, dp_size=8, enable_dp_attention=True,
                                                                   chunked_prefill_size=8192), "fp8")
    assert eng.kv_capacity == pool.max_total_num_tokens
    lat = eng.base_latency
    assert lat.name.endswith(":dp8")
    shape = BatchShape((), (), 16, 16 * 1000)
    assert lat.step_time(shape) == lat.latency.step_time_ranks([shape] * 8)
    # the twin runs: a request submitted to it completes
    eng.submit("q", 1.8e9 + 0.5, 200, 8, key=None, key_unit=1, max_new_tokens=8, ignore_eos=True, priority=None,
               order=0)
    done = eng.advance_to(1.8e9 + 60)
    assert [c.rid for c in done] == ["q"] and done[0].ttft_s > 0
    # without DP attention (dp_size 8 of whole replicas) the twin is a plain server of the TP group
    plain = SimEngine(cfg, {"tp_size": 8, "dp_size": 8}, epoch_ts=1.8e9)
    assert plain.dp_ranks == 1 and plain.settings.schedule_conservativeness == 1.0
    assert not plain.base_latency.name.endswith(":dp8")


# ---- router entries expire like the twins' pending requests (issue 11, bounded memory) ---------------------------
def _expiry_config(state: Path, every_events: int = 10**9) -> ShadowConfig:
    from shadowsim.shadow.config import TimeConfig

    # a request neither finished nor forgotten 5 + 10 s after its arrival is forgotten (watermark: newest − 2 s)
    return ShadowConfig(instances={"default": InstanceConfig(model="unknown", latency_backend="linear",
                                                             settings={"dp_size": 3})},
                        time=TimeConfig(max_wait_s=5.0, pending_expiry_margin_s=10.0, allowed_lateness_s=2.0),
                        snapshot=SnapshotConfig(dir=state, every_events=every_events, every_s=1e9))


def test_requests_that_never_finish_keep_the_router_table_bounded(tmp_path: Path) -> None:
    """600 requests of a DP-3 instance arrive 1 s apart and none finishes (a lossy stream). The router kept every
    entry (600 at the end); now an entry leaves when its rank twin forgets the request (arrival more than
    max_wait_s + pending_expiry_margin_s = 15 s behind that twin's watermark): each rank twin sees an arrival every
    3 s, so it holds at most ceil((15 + 2) / 3) + 1 = 7 entries, 21 in all. The router forgets exactly what the
    twins forget, counted, the same with 1 or 64 records per poll batch."""
    from exporters.prometheus import make_registry
    from shadowsim.shadow.view import build_view

    n = 600
    evs = [RequestArrived(instance_id="dp", ts=T0 + i, event_id=f"a{i}", request_id=f"q{i}", prompt_tokens=50 + i % 7,
                          max_new_tokens=8, source="t") for i in range(n)]
    recs = tuple(Record("t", 0, k, b"dp", [e]) for k, e in enumerate(evs))
    got = {}
    for batch in (1, 64):
        sizes: list[int] = []
        svc = ShadowService(_expiry_config(tmp_path / f"s{batch}"),
                            lambda a, r: MemorySource(recs, a, r, batch=batch), engine_factory, clock=lambda: 0.0)
        svc.run(idle_timeout_s=0, poll_timeout_s=0, on_batch=lambda s: sizes.append(len(s.ranks._request_rank)))
        table = svc.ranks._request_rank
        rank_twins = [svc.twins[rank_twin_id("dp", k)] for k in range(3)]
        assert max(sizes) <= 21 and len(table) <= 21, (batch, max(sizes))
        # exactly what the twins forgot and what they still hold
        assert svc.ranks.expired == sum(t.stats.requests_expired for t in rank_twins) == n - len(table) >= 570
        assert {r for _, r in table} == {r for t in rank_twins for r in t.pending}
        for (_, rid), rank in table.items():
            assert rid in svc.twins[rank_twin_id("dp", rank)].pending
        reg = make_registry(lambda: build_view(svc))
        assert reg.get_sample_value("shadowsim_table_entries_expired_total",
                                    {"table": "dp_rank_routes"}) == svc.ranks.expired
        got[batch] = (svc.ranks.snapshot(), svc.ranks.expired, [t.stats.snapshot() for t in rank_twins])
        svc.close()
    assert got[1] == got[64]


def _lost_finish_stream() -> list[Record]:
    """DP-3: request ``lost`` arrives first (rank 0) and its finish comes 61 s later, long after the router and the
    twin forgot it (15 s); 60 other requests arrive 1 s apart and finish 2 s after their arrival."""
    evs: list[tuple[float, int, object]] = [(T0, 0, RequestArrived(instance_id="dp", ts=T0, event_id="lost:a",
                                                                  request_id="lost", prompt_tokens=64, source="t"))]
    for i in range(60):
        a = T0 + 0.5 + i
        evs.append((a, 1, RequestArrived(instance_id="dp", ts=a, event_id=f"a{i}", request_id=f"q{i}",
                                         prompt_tokens=80 + 3 * i, source="t")))
        evs.append((a + 2.0, 2, RequestFinished(instance_id="dp", ts=a + 2.0, event_id=f"f{i}", request_id=f"q{i}",
                                                prompt_tokens=80 + 3 * i, output_tokens=3 + i % 4, ttft_s=0.1,
                                                e2e_s=2.0, source="t")))
    evs.append((T0 + 61.0, 3, RequestFinished(instance_id="dp", ts=T0 + 61.0, event_id="lost:f", request_id="lost",
                                              prompt_tokens=64, output_tokens=5, ttft_s=0.2, e2e_s=61.0,
                                              source="t")))
    evs.sort(key=lambda x: (x[0], x[1]))
    return [Record("t", 0, k, b"dp", [e]) for k, (_, _, e) in enumerate(evs)]


def test_an_entry_expired_before_a_crash_stays_expired_and_its_late_finish_is_an_unknown_request(
        tmp_path: Path) -> None:
    """The entry of ``lost`` expires (its rank twin forgets the request too); a checkpoint after that holds no entry
    for it, so after a crash it is not restored, and its finish, 61 s after its arrival, is routed as the finish of
    an unknown request is: to the instance's own twin, which counts it as a finished request (as a source that only
    reports finishes). Crashes at random points give the predictions, counters and router table of an
    uninterrupted run."""
    import json
    import random

    from shadowsim.shadow.sink import PredictionSink, read_predictions

    recs = _lost_finish_stream()
    lost_finish = next(k for k, r in enumerate(recs) if r.events[0].event_id == "lost:f")
    ref = ShadowService(_expiry_config(tmp_path / "ref", 7), lambda a, r: MemorySource(recs, a, r), engine_factory,
                        sink=PredictionSink(tmp_path / "ref.jsonl"), clock=lambda: 0.0)
    ref.run(idle_timeout_s=0, poll_timeout_s=0)
    ref.close()
    want = read_predictions(tmp_path / "ref.jsonl")
    assert ref.ranks.expired == 1 and ref.ranks._request_rank == {}
    assert ref.twins["dp#dp0"].stats.requests_expired == 1
    assert ref.twins["dp"].stats.counters["requests_finished"]["actual"] == 1  # the late finish, nowhere else
    assert sum(ref.twins[rank_twin_id("dp", k)].stats.counters["requests_finished"]["actual"] for k in range(3)) == 60

    # a crash after the expiry and a checkpoint: the manifest has no entry for `lost`, the restore brings none back
    state = tmp_path / "crash"
    svc = ShadowService(_expiry_config(state, 7), lambda a, r: MemorySource(recs, a, r, batch=1), engine_factory,
                        clock=lambda: 0.0)
    svc.run(max_records=lost_finish - 3, poll_timeout_s=0, checkpoint_at_end=False)
    assert svc.ranks.expired == 1 and ("dp", "lost") not in svc.ranks._request_rank
    committed = dict(svc.source.committed)  # type: ignore[attr-defined]
    doc = json.loads(svc.store.manifests("t", 0)[0].read_bytes())
    assert doc["next_offset"] < lost_finish and doc["ranks"]["request_rank"]  # other requests are in flight
    assert "lost" not in {r for _, r, _, _ in doc["ranks"]["request_rank"]}
    again = ShadowService(_expiry_config(state, 7), lambda a, r: MemorySource(recs, a, r, committed=committed),
                          engine_factory, clock=lambda: 0.0)
    again.run(max_records=0, poll_timeout_s=0, checkpoint_at_end=False)
    assert ("dp", "lost") not in again.ranks._request_rank and again.ranks._request_rank
    again.run(idle_timeout_s=0, poll_timeout_s=0)
    assert again.ranks.snapshot() == ref.ranks.snapshot()
    assert again.twins["dp"].stats.counters["requests_finished"]["actual"] == 1

    rng = random.Random(7)
    for trial in range(2):
        state, sink_path = tmp_path / f"s{trial}", tmp_path / f"p{trial}.jsonl"
        committed = {}
        for _ in range(4):
            svc = ShadowService(_expiry_config(state, 7),
                                lambda a, r: MemorySource(recs, a, r, batch=rng.randint(1, 6),
                                                          committed=dict(committed)),
                                engine_factory, sink=PredictionSink(sink_path), clock=lambda: 0.0)
            svc.run(max_records=rng.randint(10, 40), poll_timeout_s=0, checkpoint_at_end=False)
            committed = dict(svc.source.committed)  # type: ignore[attr-defined]
            svc.sink._f.close()  # type: ignore[union-attr]  # no flush, no checkpoint: the process is gone
        svc = ShadowService(_expiry_config(state, 7), lambda a, r: MemorySource(recs, a, r, committed=committed),
                            engine_factory, sink=PredictionSink(sink_path), clock=lambda: 0.0)
        svc.run(idle_timeout_s=0, poll_timeout_s=0)
        svc.close()
        assert read_predictions(sink_path) == want, trial
        assert svc.ranks.snapshot() == ref.ranks.snapshot(), trial
        for iid in ref.twins:
            assert svc.twins[iid].stats.snapshot() == ref.twins[iid].stats.snapshot(), (trial, iid)


def test_router_expiry_scans_from_the_oldest_and_reads_version_1_states() -> None:
    """``expire`` forgets entries older than the horizon, oldest first, and stops at the first younger one; a
    finish after expiry goes where an unknown request's goes (the instance twin). A version-1 state (entries
    without arrival time) restores with the time ``untimed_arrival`` gives; a bad arrival time is refused."""
    import pytest

    router = RankRouter(lambda iid: 3 if iid == "dp" else 1)
    common = {"instance_id": "dp", "source": "t"}
    for k, ts in enumerate([10.0, 11.0, 12.0, 13.0, 14.0, 15.0]):  # ranks 0 1 2 0 1 2
        router.twin_id(RequestArrived(ts=ts, event_id=f"r{k}:a", request_id=f"r{k}", prompt_tokens=5, **common))
    router.commit()
    assert router.expire("dp#dp0", 13.0) == 1 and router.expire("dp#dp0", 13.0) == 0  # r0 (10 s), not r3 (13 s)
    assert router.expire("dp#dp1", 100.0) == 2 and router.expired == 3 and router.expire("nope#dp0", 1e9) == 0
    late = RequestFinished(ts=99.0, event_id="r0:d", request_id="r0", prompt_tokens=5, output_tokens=2, **common)
    assert router.twin_id(late) == "dp"  # as if it had never arrived
    done = RequestFinished(ts=99.0, event_id="r3:d", request_id="r3", prompt_tokens=5, output_tokens=2, **common)
    assert router.twin_id(done) == "dp#dp0"
    router.commit()
    state = router.snapshot()
    assert state["version"] == 2 and state["request_rank"] == [["dp", "r2", 2, 12.0], ["dp", "r5", 2, 15.0]]
    v1 = dict(state, version=1, request_rank=[e[:3] for e in state["request_rank"]])
    again = RankRouter(lambda iid: 3)
    again.restore(v1, untimed_arrival=lambda twin: 50.0)
    assert again.expire("dp#dp2", 50.0) == 0 and again.expire("dp#dp2", 50.5) == 2
    untimed = RankRouter(lambda iid: 3)
    untimed.restore(v1)  # no time given: kept until their finish
    assert untimed.expire("dp#dp2", 1e18) == 0 and len(untimed._request_rank) == 2
    for bad in (float("nan"), "12", None, True):
        with pytest.raises(ValueError, match="arrival time"):
            RankRouter().restore(dict(state, request_rank=[["dp", "r2", 2, bad]]))


def test_the_services_rank_only_route_equals_twin_id_and_changes_nothing() -> None:
    # ShadowService._apply_one routes an event of a class routes_by_rank_only() names without RankRouter.twin_id:
    # instance id, or its rank twin with dp_rank. That must be what twin_id says, with no routing state touched,
    # whatever the router knows (a DP size, requests in flight); and a class twin_id must see (request_id,
    # server_config) is never named.
    import copy

    from simcore.events import EVENT_CLASSES
    from shadowsim.shadow.ranks import routes_by_rank_only

    router = RankRouter(lambda iid: 4 if iid == "dp" else 1)
    for k in range(6):
        router.twin_id(RequestArrived(ts=float(k), event_id=f"r{k}:a", request_id=f"r{k}", prompt_tokens=5,
                                      instance_id="dp", source="t"))
    router.commit()
    named = []
    for cls in EVENT_CLASSES:
        fields = cls.model_fields
        if not routes_by_rank_only(cls):
            assert "request_id" in fields or "dp_rank" not in fields or fields["kind"].default == "server_config"
            continue
        named.append(fields["kind"].default)
        assert "request_id" not in fields and "dp_rank" in fields
        required = {n: f for n, f in fields.items() if f.is_required()}
        for iid in ("dp", "solo"):
            for rank in (None, 0, 3):
                ev = cls.model_construct(**{**{n: 1 for n in required}, "ts": 7.0, "instance_id": iid,
                                            "dp_rank": rank})
                before = copy.deepcopy((router._dp_size, router._next_rank, router._request_rank, router._open))
                want = iid if rank is None else rank_twin_id(iid, rank)
                assert router.twin_id(ev) == want, (cls.__name__, iid, rank)
                # the service reads these fields from the instance dict
                assert [ev.__dict__[k] for k in ("dp_rank", "instance_id", "ts")] == [rank, iid, 7.0]
                assert not router._undo
                assert (router._dp_size, router._next_rank, router._request_rank, router._open) == before
    assert {"prefill_batch", "decode_batch"} <= set(named)
