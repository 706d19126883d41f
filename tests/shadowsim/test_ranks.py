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
    assert r._dp_size == {} and r._next_rank == {} and r._request_rank == {} and r._undo == []
    assert len(r._configured) <= MAX_CONFIGURED_CACHE


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
