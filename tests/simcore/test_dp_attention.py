"""DP attention inside one server (simcore/dp_attention.py): D schedulers, one lockstep forward.

SGLang 0.5.9 runs one ``Scheduler`` per attention-DP rank (``managers/data_parallel_controller.py``:
``launch_dp_attention_schedulers``), each with its own radix cache and KV pool; the ``DataParallelController``
dispatches every request to one rank (``round_robin_scheduler``, ``DPBudget.dispatch``); every scheduling pass
all-gathers the ranks' token counts and a rank with nothing to run runs an idle batch
(``scheduler_dp_attn_mixin.py::prepare_mlp_sync_batch_raw`` / ``get_idle_batch``), so the ranks step together.
The numbers below are derived by hand from those rules.
"""
from __future__ import annotations

import pytest
import simpy

from simcore.dp_attention import (DataParallelDispatcher, DpAttentionServer, PerRankLatency,
                                  build_dp_attention_latency, rank_settings)
from simcore.engine import simulate
from simcore.errors import UserError
from simcore.gpus import load_gpu
from simcore.memory import MiB, default_mem_fraction_static, dp_attention_weight_bytes_per_rank, size_kv_pool
from simcore.models import load_model
from simcore.perf.base import BatchShape, LinearLatencyModel, StepTime
from simcore.request import RequestSpec
from simcore.server import Server
from simcore.settings import ServerSettings, resolve
from simcore.workload import OpenLoop


class GatheredLinear:
    """A transparent lockstep price: 10 ms + 1 ms per token gathered from every rank (the MoE) + 2 ms per token of
    the busiest rank (attention, each rank on its own batch). No CPU time."""

    name = "gathered-linear"
    profile_hash = "none"
    pure_step_time = True

    def __init__(self) -> None:
        self.calls: list[tuple[int, ...]] = []

    def step_time_ranks(self, shapes):  # type: ignore[no-untyped-def]
        toks = tuple(0 if s is None else s.num_extend_tokens + s.num_decode for s in shapes)
        self.calls.append(toks)
        return StepTime(0.010 + 0.001 * sum(toks) + 0.002 * max(toks), 0.0)


def _dp2() -> ServerSettings:
    return resolve(ServerSettings(tp_size=2, dp_size=2, enable_dp_attention=True, disable_overlap_schedule=True),
                   None)


# ---- dispatch: DataParallelController ----------------------------------------------------------------------
def test_round_robin_is_the_default_and_cycles_the_ranks() -> None:
    # 0.5.9 server_args.py _handle_load_balance_method: "auto" -> round_robin outside PD prefill;
    # data_parallel_controller.py round_robin_scheduler: counter = (counter + 1) % len(workers)
    assert ServerSettings().load_balance_method == "round_robin"
    d = DataParallelDispatcher("round_robin", 3)
    assert [d.dispatch() for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_total_requests_and_total_tokens_follow_dpbudget() -> None:
    # DPBudget.dispatch: the rank with the fewest reported requests (first on ties), then +1 "as a heuristic"
    d = DataParallelDispatcher("total_requests", 3)
    d.update_load(0, 5, 0)
    d.update_load(1, 2, 0)
    d.update_load(2, 3, 0)
    assert [d.dispatch() for _ in range(4)] == [1, 1, 2, 1]  # loads 5,2,3 -> 5,3,3 -> 5,4,3 -> 5,4,4 -> 1
    assert d.total_requests == [5, 5, 4]
    # TOTAL_TOKENS: fewest tokens, total_requests breaking ties
    t = DataParallelDispatcher("total_tokens", 2)
    t.update_load(0, 4, 100)
    t.update_load(1, 1, 100)
    assert t.dispatch() == 1  # tie on tokens, rank 1 has fewer requests
    t.update_load(0, 4, 50)
    assert t.dispatch() == 0


def test_the_server_dispatches_in_arrival_order_round_robin() -> None:
    env = simpy.Environment()
    srv = DpAttentionServer(env, _dp2(), 1000, GatheredLinear())
    for i, at in enumerate([0.0, 0.3, 0.1, 0.2]):  # submitted out of order: the controller sees arrival order
        srv.submit(RequestSpec(f"r{i}", at, 10, 2))
    env.run()
    assert srv.dispatched == {"r0": 0, "r2": 1, "r3": 0, "r1": 1}


def test_total_requests_dispatch_follows_the_loads_the_ranks_report() -> None:
    # a, b, d at t = 0, before any report: budgets [0,0] -> a to 0 [1,0], b to 1 [1,1], d to 0 [2,1]. d finishes
    # after 2 tokens; rank 0's later decode steps report 1 request (a), rank 1's report 1 (b). e at t = 0.5: a tie,
    # the first rank -> 0 (round robin would say 1), then [2,1] -> f to rank 1.
    s = _dp2().model_copy(update={"load_balance_method": "total_requests"})
    env = simpy.Environment()
    srv = DpAttentionServer(env, s, 1000, GatheredLinear())
    for rid, at, out in (("a", 0.0, 200), ("b", 0.0, 200), ("d", 0.0, 2), ("e", 0.5, 2), ("f", 0.5, 2)):
        srv.submit(RequestSpec(rid, at, 10, out, max_new_tokens=out))
    env.run()
    assert srv.dispatched == {"a": 0, "b": 1, "d": 0, "e": 0, "f": 1}
    rr = DpAttentionServer(simpy.Environment(), _dp2(), 1000, GatheredLinear())
    for rid, at, out in (("a", 0.0, 200), ("b", 0.0, 200), ("d", 0.0, 2), ("e", 0.5, 2), ("f", 0.5, 2)):
        rr.submit(RequestSpec(rid, at, 10, out, max_new_tokens=out))
    rr.env.run()
    assert rr.dispatched == {"a": 0, "b": 1, "d": 0, "e": 1, "f": 0}


# ---- per-rank schedulers and pools ---------------------------------------------------------------------------
def test_rank_settings_divide_chunked_prefill_and_conservativeness() -> None:
    # server_args.py _handle_data_parallelism: chunked_prefill_size //= dp_size, schedule_conservativeness *= 0.3;
    # cuda_graph_runner.py get_batch_sizes_to_capture: captured sizes must be multiples of the attention TP size
    s = resolve(ServerSettings(tp_size=8, dp_size=4, enable_dp_attention=True), 143771 * MiB)
    assert s.chunked_prefill_size == 8192 and s.cuda_graph_bs[:6] == (1, 2, 4, 8, 12, 16)
    r = rank_settings(s)
    assert r.chunked_prefill_size == 2048
    assert r.schedule_conservativeness == 0.3
    assert abs(r.initial_new_token_ratio - 0.7 * 0.3) < 1e-12
    assert r.cuda_graph_bs[:5] == (2, 4, 8, 12, 16)  # attention TP 8/4 = 2: odd sizes dropped
    assert not r.enable_dp_attention and r.dp_size == 1


def test_enable_dp_attention_without_dp_size_is_plain_tp() -> None:
    # server_args.py _handle_data_parallelism (0.5.3, 0.5.6.post2, 0.5.9): "if self.dp_size == 1:
    # self.enable_dp_attention = False"
    assert ServerSettings(tp_size=8, enable_dp_attention=True).enable_dp_attention is False
    # scheduler_recv_skipper.py SchedulerRecvSkipper.__init__: "assert not server_args.enable_dp_attention"
    with pytest.raises(UserError, match="scheduler-recv-interval"):
        ServerSettings(tp_size=8, dp_size=8, enable_dp_attention=True, scheduler_recv_interval=10)
    with pytest.raises(UserError, match="dividing"):
        ServerSettings(tp_size=8, dp_size=3, enable_dp_attention=True)


def test_mem_fraction_reserves_the_dp_attention_padding() -> None:
    # server_args.py _handle_gpu_memory_settings: + cuda_graph_max_bs · dp · 3, and · 1.5 more above 300
    h200 = 143771 * MiB
    reserved = 512 + 8192 * 1.5 + 8 / 8 * 1024 + 512 * 2 + 512 * 8 * 3 + 512 * 8 * 1.5  # = 33280 MiB
    got = default_mem_fraction_static(h200, "0.5", 8, 8192, 512, dp_attention=True, dp_size=8)
    assert got == round((143771 - reserved) / 143771, 3) == 0.769
    assert default_mem_fraction_static(h200, "0.5", 8, 8192, 256, dp_attention=True, dp_size=8) == round(
        (143771 - (512 + 8192 * 1.5 + 1024 + 256 * 2 + 256 * 8 * 3)) / 143771, 3)


def test_per_rank_pool_replicates_attention_over_dp_groups() -> None:
    # Qwen3-30B-A3B (hidden 2048, 32 q / 4 kv heads of 128, 48 layers, vocab 151936), TP4 with DP attention 4:
    # attention TP 1, so each rank holds every attention weight and the whole embedding, 1/4 of the rest
    # (models/qwen2_moe.py VocabParallelEmbedding(use_attn_tp_group=is_dp_attention_enabled()))
    m = load_model("Qwen/Qwen3-30B-A3B")
    attn = 48 * (2048 * (32 * 128 + 4 * 256) + 32 * 128 * 2048) * 2  # 1,811,939,328 bytes
    embed = 151936 * 2048 * 2
    total = m.weight_bytes("bf16")
    assert dp_attention_weight_bytes_per_rank(m, "bf16", 4, 1) == int((total - attn - embed) / 4 + attn + embed)
    gpu = load_gpu("h200_sxm")
    plain = size_kv_pool(m, gpu, ServerSettings(tp_size=4, max_running_requests=1024))
    dp = size_kv_pool(m, gpu, ServerSettings(tp_size=4, dp_size=4, enable_dp_attention=True,
                                             max_running_requests=1024))
    # the KV cell: all 4 KV heads on each rank (attention TP 1) instead of 1: 4·(128+128)·48·2 bytes
    assert dp.cell_bytes_per_token == 4 * 256 * 48 * 2 == 4 * plain.cell_bytes_per_token
    # request slots per rank: --max-running-requests // dp (model_runner.py: max_running_requests // dp_size)
    assert dp.max_running_requests == 256 and plain.max_running_requests == 1024
    assert dp.max_total_num_tokens < plain.max_total_num_tokens


# ---- lockstep: one forward for every rank --------------------------------------------------------------------
def test_two_busy_ranks_step_together_priced_on_the_gathered_tokens() -> None:
    # prefill: both ranks extend 10 tokens -> 10 ms + 20 × 1 ms + 10 × 2 ms = 50 ms; decode: one row each ->
    # 10 + 2 + 2 = 14 ms; 3 output tokens: first at 50 ms, then 64 and 78 ms
    env = simpy.Environment()
    lat = GatheredLinear()
    srv = DpAttentionServer(env, _dp2(), 1000, lat)
    srv.submit(RequestSpec("a", 0.0, 10, 3))
    srv.submit(RequestSpec("b", 0.0, 10, 3))
    env.run()
    assert lat.calls == [(10, 10), (1, 1), (1, 1)]
    for r in srv.records:
        assert abs(r.ttft_s - 0.050) < 1e-12 and abs(r.finish_s - 0.078) < 1e-12
        assert abs(r.tpot_s - 0.014) < 1e-12


def test_an_idle_rank_runs_the_step_and_a_slow_rank_sets_it() -> None:
    # rank 1 has nothing: it runs an idle batch (None) in every forward; rank 0's prefill of 30 tokens costs
    # 10 + 30 + 60 = 100 ms, while rank 1's later 5-token prompt waits for that shared forward to end
    env = simpy.Environment()
    lat = GatheredLinear()
    srv = DpAttentionServer(env, _dp2(), 1000, lat)
    srv.submit(RequestSpec("long", 0.0, 30, 2))
    srv.submit(RequestSpec("short", 0.001, 5, 2))
    env.run()
    rec = {r.rid: r for r in srv.records}
    assert srv.dispatched == {"long": 0, "short": 1}
    # pass at 0: [30, idle] = 100 ms; pass at 0.1: rank 0 decodes 1, rank 1 prefills 5: 10 + 6 + 10 = 26 ms
    assert lat.calls[:2] == [(30, 0), (1, 5)]
    assert abs(rec["long"].ttft_s - 0.100) < 1e-12
    assert abs(rec["short"].first_token_s - 0.126) < 1e-12  # not 0.001 + 20 ms: it waited for the lockstep


def test_one_rank_lockstep_server_is_the_plain_server() -> None:
    # with a single rank (dp 1) the lockstep loop is Server._run: same records, same step count
    s = resolve(ServerSettings(chunked_prefill_size=64, cuda_graph_bs=(1, 2, 4, 8, 16)), None)
    lat = LinearLatencyModel(cpu_s=0.001)
    plain = simulate(s, lat, OpenLoop(20.0, 60, 100, 40, 3), kv_capacity_tokens=3000, decode_run_spacing=0)
    env = simpy.Environment()
    srv = DpAttentionServer(env, s, 3000, PerRankLatency(lat))
    OpenLoop(20.0, 60, 100, 40, 3).start(env, srv)
    env.run()
    key = lambda recs: sorted((r.rid, r.first_token_s, r.finish_s, r.cached_tokens) for r in recs)  # noqa: E731
    assert key(plain.records) == key(srv.records)
    assert plain.steps == srv.steps


def test_dp_simulation_is_deterministic_and_dp1_settings_are_unchanged() -> None:
    s = _dp2()
    runs = [simulate(s, GatheredLinear(), OpenLoop(40.0, 80, 64, 16, 7), kv_capacity_tokens=2000, seed=5)
            for _ in range(2)]
    assert [(r.rid, r.finish_s) for r in runs[0].records] == [(r.rid, r.finish_s) for r in runs[1].records]
    assert len(runs[0].records) == 80
    # --enable-dp-attention at dp 1 is the plain server (SGLang turns it off): the same simulation as without it
    lat = LinearLatencyModel()
    a = simulate(ServerSettings(tp_size=2), lat, OpenLoop(40.0, 50, 64, 16, 7), kv_capacity_tokens=2000)
    b = simulate(ServerSettings(tp_size=2, enable_dp_attention=True), lat, OpenLoop(40.0, 50, 64, 16, 7),
                 kv_capacity_tokens=2000)
    assert [(r.rid, r.finish_s) for r in a.records] == [(r.rid, r.finish_s) for r in b.records]


def test_each_rank_has_its_own_pool() -> None:
    # round robin puts a, c on rank 0 and b on rank 1: rank 0's pool of 100 tokens holds a (60) but not c (60) too
    env = simpy.Environment()
    srv = DpAttentionServer(env, _dp2(), 100, GatheredLinear())
    for rid, at in (("a", 0.0), ("b", 0.0), ("c", 0.0)):
        srv.submit(RequestSpec(rid, at, 60, 4))
    env.run()
    rec = {r.rid: r for r in srv.records}
    assert srv.dispatched == {"a": 0, "b": 1, "c": 0}
    assert rec["a"].ttft_s == rec["b"].ttft_s  # together in the first forward
    assert rec["c"].first_token_s > rec["a"].finish_s  # waited for a's KV on its own rank
    assert all(rk.kv.capacity == 100 for rk in srv.ranks)


# ---- the step price of the real model --------------------------------------------------------------------
def _deepseek_dp8():  # type: ignore[no-untyped-def]
    model, gpu = load_model("deepseek-ai/DeepSeek-V3"), load_gpu("h200_sxm")
    s = resolve(ServerSettings(tp_size=8, dp_size=8, enable_dp_attention=True), gpu.memory_bytes)
    return build_dp_attention_latency(model, gpu, s, "fp8"), s


def test_step_is_the_slowest_rank_attention_plus_moe_on_gathered_tokens() -> None:
    lat, s = _deepseek_dp8()
    assert lat.attention.tp == 1 and lat.mlp.tp == 8  # attention TP = tp / dp; the MLP over the whole group
    prof = lat.profile
    # an extend batch (SUM_LEN padding): rank 0 prefills 1000 tokens, rank 1 decodes 20 rows, 6 ranks idle
    pre = BatchShape((1000,), (0,), 0, 0)
    dec = BatchShape((), (), 20, 20 * 500)
    shapes = [pre, dec] + [None] * 6
    attn = max(lat.attention.attention_side_s(pre, 0, False), lat.attention.attention_side_s(dec, 20, False))
    L = lat.mlp.shapes.num_layers
    gathered = 1020
    tp_allreduce = lat.mlp.costs.tp_allreduce_s  # over the whole TP group of 8 (ParallelCosts)
    comm = L * 2 * tp_allreduce(gathered * 7168 * 2.0, 8, False)  # gather all-reduce + the one after the MLP
    comm += tp_allreduce(21 * 129280 * 2.0 / 8, 8, False)  # logits of 21 rows, vocab over 8 ranks
    want = attn + lat.mlp.mlp_side_s(gathered, 21) + lat._k_comm * comm
    want = max(want, lat.mlp.eager_floor_s) + prof.step_overhead_s + prof.gpu_per_req_s * 20
    got = lat.step_time_ranks(shapes).gpu_s
    assert abs(got - want) < 1e-12
    # the slow rank sets the step: dropping the decode rank's batch changes only the gathered part
    assert lat.attention.attention_side_s(pre, 0, False) > lat.attention.attention_side_s(dec, 20, False)


def test_idle_ranks_pay_the_moe_of_a_cuda_graph_step() -> None:
    # decode on rank 0 only (4 rows): every rank replays the graph padded to 4 (MAX_LEN padding, all-gather +
    # reduce-scatter = one all-reduce of 4 × 8 tokens per layer): the MoE runs on 32 gathered tokens, idle ranks'
    # padding included (cuda_graph_runner.py replay_prepare: bs from max(global_num_tokens))
    lat, s = _deepseek_dp8()
    dec = BatchShape((), (), 4, 4 * 300)
    L = lat.mlp.shapes.num_layers
    tp_allreduce = lat.mlp.costs.tp_allreduce_s
    want = (lat.attention.attention_side_s(dec, 4, True) + lat.mlp.mlp_side_s(32, 4, True)
            + lat._k_comm * (L * tp_allreduce(32 * 7168 * 2.0, 8, True) + tp_allreduce(4 * 129280 * 2.0 / 8, 8, True))
            + lat.profile.step_overhead_s + lat.profile.gpu_per_req_s * 4)
    one = lat.step_time_ranks([dec] + [None] * 7).gpu_s
    assert abs(one - want) < 1e-12
    # eight busy ranks of 4 rows gather the same 32 tokens through the MoE: only the LM head (32 logit rows
    # instead of 4) makes the step dearer than one busy rank's
    eight = lat.step_time_ranks([dec] * 8).gpu_s
    head = (lat.mlp.mlp_side_s(32, 32) - lat.mlp.mlp_side_s(32, 4, True)
            + lat._k_comm * (tp_allreduce(32 * 129280 * 2.0 / 8, 8, True)
                             - tp_allreduce(4 * 129280 * 2.0 / 8, 8, True)))
    assert abs(eight - one - head) < 1e-12
    # and more than a plain TP8 server decoding the same 4 rows (it moves 4 tokens, not 32, through the MoE)
    plain = lat.mlp.step_time(BatchShape((), (), 4, 4 * 300, (), 4)).gpu_s
    assert one > lat.mlp.mlp_side_s(4, 4) and plain > 0


def test_predict_accepts_dp_attention_flags(capsys) -> None:  # type: ignore[no-untyped-def]
    import json

    from shadowsim.cli import main

    args = ["predict", "--model", "Qwen/Qwen3-30B-A3B", "--gpu", "h100", "--tp", "4", "--concurrency", "8",
            "--num-requests", "16", "--input-len", "256", "--output-len", "16", "--json"]
    assert main([*args, "--enable-dp-attention", "--dp-size", "4"]) == 0
    dp = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)
    srv = dp["server"]
    pool = size_kv_pool(load_model("Qwen/Qwen3-30B-A3B"), load_gpu("h100_sxm"),
                        ServerSettings(tp_size=4, dp_size=4, enable_dp_attention=True))
    assert srv["dp_attention_ranks"] == 4 and plain["server"]["dp_attention_ranks"] == 1
    assert srv["max_total_num_tokens"] == pool.max_total_num_tokens  # per rank
    assert srv["latency_model"].endswith(":dp4")
    assert dp["num_requests"] == plain["num_requests"] == 16
    assert dp["tpot_ms"]["mean"] != plain["tpot_ms"]["mean"]


@pytest.mark.parametrize("overlap,method,mixed", [(True, "round_robin", False), (False, "total_tokens", True)])
def test_lockstep_ranks_keep_their_invariants_under_retraction(overlap: bool, method: str, mixed: bool) -> None:
    # small per-rank pools (1500 tokens) and long outputs force retractions on the ranks; every request finishes,
    # every rank's incremental state recounts exactly (Server.check_invariants), a seed gives one run
    from simcore.workload import Uniform

    s = resolve(ServerSettings(tp_size=4, dp_size=4, enable_dp_attention=True, disable_overlap_schedule=not overlap,
                               load_balance_method=method, chunked_prefill_size=256, enable_mixed_chunk=mixed,
                               cuda_graph_bs=(1, 2, 4, 8)), None)

    def run() -> DpAttentionServer:
        env = simpy.Environment()
        srv = DpAttentionServer(env, s, 1500, GatheredLinear())
        OpenLoop(60.0, 150, Uniform(50, 600), Uniform(5, 300), 11).start(env, srv)
        env.run()
        return srv

    srv = run()
    for rk in srv.ranks:
        rk.check_invariants()
        assert not rk.reqs and rk.kv.used == 0
    assert len(srv.records) == 150 and not any(r.aborted for r in srv.records)
    assert srv.num_retractions > 0
    assert sorted(set(srv.dispatched.values())) == [0, 1, 2, 3]
    again = run()
    assert [(r.rid, r.finish_s) for r in again.records] == [(r.rid, r.finish_s) for r in srv.records]


def test_a_request_id_is_refused_while_it_is_in_the_server() -> None:
    # as Server.submit: an id may come back once its request has left the server
    env = simpy.Environment()
    srv = DpAttentionServer(env, _dp2(), 1000, GatheredLinear())
    srv.submit(RequestSpec("x", 0.0, 10, 2))
    with pytest.raises(ValueError, match="duplicate"):
        srv.submit(RequestSpec("x", 0.0, 10, 2))
    env.run()
    srv.submit(RequestSpec("x", env.now, 10, 2))
    env.run()
    assert [r.rid for r in srv.records] == ["x", "x"]
