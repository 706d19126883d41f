"""Speculative decoding (EAGLE / EAGLE3 / NEXTN) with DP attention (simcore/dp_attention.py: DpSpeculativeLatency,
DpAttentionServer._schedule_speculative).

Sources (SGLang 0.5.9, /tmp/sg059/x/sglang/srt):
- ``managers/scheduler.py::get_next_batch_to_run``: with a spec algorithm and ``require_mlp_sync`` the ranks sync
  right after ``get_new_batch_prefill`` ("This branch makes sure prefill and decode batches will not be mixed
  when spec and dp-attn is enabled"): when any rank prefills the others run ``get_idle_batch``, not a decode.
- ``speculative/eagle_worker.py::forward_batch_generation``: decode = ``draft`` (``draft_forward``: num_steps − 1
  forwards; ``_draft_preprocess_idle`` for an idle rank) + ``verify`` (TARGET_VERIFY, or IDLE) +
  ``forward_draft_extend_after_decode`` (always called under ``enable_dp_attention``, an idle batch for a rank
  with nothing); prefill = ``forward_target_extend`` + ``forward_draft_extend``.
- ``speculative/spec_info.py::get_spec_adjusted_global_num_tokens`` with ``eagle_info.py``'s coefficients: the
  gathered tokens of a verify are ``bs × num_draft_tokens`` per rank, of a draft step ``bs × topk``, of the draft
  extend ``bs × (num_steps + 1)``; ``cuda_graph_runner.py::can_run``: the graph of ``max(global_num_tokens) //
  num_tokens_per_bs`` requests.
- ``server_args.py``: ``_handle_data_parallelism`` runs before ``_handle_speculative_decoding`` (max running 48),
  ``model_executor/model_runner.py`` gives each rank ``max_running_requests // dp_size``.
- ``speculative/eagle_worker.py::EAGLEWorker.__init__``: the EAGLE3 draft is built in ``draft_tp_context(
  get_attention_tp_group())`` (no cross-rank MLP).
"""
from __future__ import annotations

import json

import simpy

from simcore.dp_attention import (DpAttentionServer, DpSpeculativeLatency, PerRankLatency, RankLocalLatency,
                                  build_dp_speculative_latency, rank_settings)
from simcore.engine import simulate
from simcore.gpus import load_gpu
from simcore.models import load_model
from simcore.perf.base import BatchShape, LinearLatencyModel, StepTime
from simcore.request import RequestSpec
from simcore.settings import ServerSettings, resolve
from simcore.speculative import AcceptanceModel, SpeculativeConfig, SpeculativeDecoding, build_speculative
from simcore.workload import OpenLoop

GiB = 1024**3


class GatheredLinear:
    """A transparent lockstep price: ``base`` + ``per`` × tokens gathered from every rank (the MLP/MoE) +
    2 × ``per`` × the busiest rank's tokens (its attention). ``k``: tokens per request of its CUDA graphs (a
    label here: the calls record it)."""

    pure_step_time = True
    profile_hash = "none"
    frontend_s = 0.0

    def __init__(self, name: str, base: float, per: float, log: list, k: int = 1) -> None:
        self.name, self.base, self.per, self.log, self.k = name, base, per, log, k

    def per_request_tokens(self, k: int, captured_bs=None) -> "GatheredLinear":  # type: ignore[no-untyped-def]
        return GatheredLinear(self.name, self.base, self.per, self.log, k)

    def step_time_ranks(self, shapes):  # type: ignore[no-untyped-def]
        toks = tuple(0 if s is None else s.num_extend_tokens + s.num_decode for s in shapes)
        self.log.append((self.name, self.k, toks))
        return StepTime(self.base + self.per * sum(toks) + 2 * self.per * max(toks), 0.0)


def _dp2_eagle(**kw) -> ServerSettings:  # type: ignore[no-untyped-def]
    return resolve(ServerSettings(tp_size=2, dp_size=2, enable_dp_attention=True, speculative_algorithm="EAGLE",
                                  speculative_num_steps=2, speculative_eagle_topk=1, speculative_num_draft_tokens=3,
                                  **kw), 80 * GiB)


def _transparent(accept_prob: float = 1.0, seed: int = 0):  # type: ignore[no-untyped-def]
    log: list = []
    config = SpeculativeConfig("EAGLE", 2, 1, 3)
    target = GatheredLinear("target", 0.010, 0.001, log)  # 10 ms + 1 ms / gathered token + 2 ms / busiest token
    draft = GatheredLinear("draft", 0.001, 0.0001, log)   # 1 ms + 0.1 ms / gathered token + 0.2 ms / busiest
    spec = SpeculativeDecoding(config, LinearLatencyModel(), LinearLatencyModel(), AcceptanceModel(3, accept_prob),
                               seed)
    return DpSpeculativeLatency(config, target, draft), spec, log


def test_two_rank_eagle_steps_by_hand() -> None:
    """dp 2, EAGLE 2 steps, topk 1, 3 draft tokens, every draft accepted (L = 3). a → rank 0, b → rank 1 at 0 s,
    c → rank 0 at 60 ms; 10-token prompts, 7 output tokens each (max_new 7)."""
    lat, spec, log = _transparent()
    env = simpy.Environment()
    srv = DpAttentionServer(env, _dp2_eagle(), 1000, lat, speculative=spec)
    srv.submit(RequestSpec("a", 0.0, 10, 7, 7))
    srv.submit(RequestSpec("b", 0.0, 10, 7, 7))
    srv.submit(RequestSpec("c", 0.060, 10, 7, 7))
    env.run()
    rec = {r.rid: r for r in srv.records}
    assert srv.dispatched == {"a": 0, "b": 1, "c": 0}
    prefill_ab = (0.010 + 0.020 + 0.020) + (0.001 + 0.002 + 0.002)  # target extend + draft extend of (10, 10)

    def decode(b0: int, b1: int) -> float:  # per-rank batches b0, b1 (0: idle)
        verify = 0.010 + 0.001 * 3 * (b0 + b1) + 0.002 * 3 * max(b0, b1)      # 3 draft tokens per request
        extend = 0.001 + 0.0001 * 3 * (b0 + b1) + 0.0002 * 3 * max(b0, b1)    # num_steps + 1 = 3 per request
        step = 0.001 + 0.0001 * (b0 + b1) + 0.0002 * max(b0, b1)              # topk 1; num_steps − 1 = 1 of them
        return verify + extend + step

    t1 = prefill_ab                   # a, b: first token (prefill)
    t2 = t1 + decode(1, 1)            # a, b: + 3 tokens (4)
    # c reached the controller at 60 ms: at the pass at t2 rank 0 prefills c, so rank 1 idles (b gets nothing)
    t3 = t2 + (0.010 + 0.010 + 0.020) + (0.001 + 0.001 + 0.002)
    t4 = t3 + decode(2, 1)            # a, c on rank 0, b on rank 1: a, b reach 7 tokens
    t5 = t4 + decode(1, 0)            # c alone: 4 → 7
    assert abs(decode(1, 1) - 0.0256) < 1e-15 and abs(t3 - t2 - 0.044) < 1e-15
    assert abs(rec["a"].ttft_s - t1) < 1e-12 and abs(rec["b"].ttft_s - t1) < 1e-12
    assert abs(rec["a"].finish_s - t4) < 1e-12 and abs(rec["b"].finish_s - t4) < 1e-12
    assert abs(rec["c"].first_token_s - t3) < 1e-12 and abs(rec["c"].finish_s - t5) < 1e-12
    assert abs(t5 - 0.1826) < 1e-12
    # every forward, in order: prefill (target, draft extend), decode (verify, draft extend, draft step) …
    assert log == [("target", 1, (10, 10)), ("draft", 1, (10, 10)),
                   ("target", 3, (3, 3)), ("draft", 3, (3, 3)), ("draft", 1, (1, 1)),
                   ("target", 1, (10, 0)), ("draft", 1, (10, 0)),
                   ("target", 3, (6, 3)), ("draft", 3, (6, 3)), ("draft", 1, (2, 1)),
                   ("target", 3, (3, 0)), ("draft", 3, (3, 0)), ("draft", 1, (1, 0))]
    assert spec.accepted_tokens == 18 and spec.verify_passes == 6  # 3 + 3 tokens each, over 2 verify passes each


def test_no_rank_decodes_while_another_prefills() -> None:
    # the rule of scheduler.py: b (rank 1) is decoding when c's prefill starts on rank 0: b's pass is idle, so it
    # finishes one lockstep prefill later than a server where the ranks mix prefill and decode would let it
    lat, spec, log = _transparent()
    env = simpy.Environment()
    srv = DpAttentionServer(env, _dp2_eagle(), 1000, lat, speculative=spec)
    for rid, at in (("a", 0.0), ("b", 0.0), ("c", 0.060)):
        srv.submit(RequestSpec(rid, at, 10, 7, 7))
    steps: list = []
    srv.observer = steps.append
    env.run()
    kinds = [(round(s.start_s, 6), s.shape.mode) for s in steps]
    # per pass, only prefill or only decode shapes (the idle rank records no step)
    by_pass: dict = {}
    for start, mode in kinds:
        by_pass.setdefault(start, set()).add(mode)
    assert all(len(m) == 1 for m in by_pass.values())
    assert [sorted(m)[0] for _, m in sorted(by_pass.items())] == ["prefill", "decode", "prefill", "decode", "decode"]


def test_one_rank_dp_server_is_the_single_eagle_server() -> None:
    # a one-rank lockstep server with the plain SpeculativeDecoding as its step price: the same records, steps and
    # accepted-length draws as simcore.server.Server (the draws come from the same seeded generator in the same order)
    s = resolve(ServerSettings(speculative_algorithm="EAGLE", speculative_num_steps=3, chunked_prefill_size=64),
                80 * GiB)

    def spec() -> SpeculativeDecoding:
        return SpeculativeDecoding(SpeculativeConfig("EAGLE", 3, 1, 4), LinearLatencyModel(),
                                   LinearLatencyModel(base_s=0.001), AcceptanceModel(4, 0.6), 11)

    a = spec()
    plain = simulate(s, a, OpenLoop(30.0, 60, 100, 40, 3), kv_capacity_tokens=3000, speculative=a)
    b = spec()
    env = simpy.Environment()
    srv = DpAttentionServer(env, s, 3000, PerRankLatency(b), speculative=b)
    OpenLoop(30.0, 60, 100, 40, 3).start(env, srv)
    env.run()
    key = lambda recs: sorted((r.rid, r.first_token_s, r.finish_s, r.output_len) for r in recs)  # noqa: E731
    assert len(plain.records) == 60 and key(plain.records) == key(srv.records)
    assert plain.steps == srv.steps
    assert (a.accepted_tokens, a.verify_passes) == (b.accepted_tokens, b.verify_passes)
    assert 1.0 < a.mean_accept_length < 4.0


def test_fixed_seed_is_deterministic_and_the_seed_matters() -> None:
    def run(seed: int):  # type: ignore[no-untyped-def]
        lat, spec, _ = _transparent(0.6, seed)
        res = simulate(_dp2_eagle(), lat, OpenLoop(40.0, 50, 64, 32, 7), kv_capacity_tokens=2000, seed=seed,
                       speculative=spec)
        return [(r.rid, r.finish_s) for r in res.records], spec.accepted_tokens

    first, again, other = run(5), run(5), run(6)
    assert first == again and len(first[0]) == 50
    assert first[0] != other[0]


def test_dp_ranks_get_48_over_dp_running_requests() -> None:
    s = resolve(ServerSettings(tp_size=8, dp_size=8, enable_dp_attention=True, speculative_algorithm="EAGLE",
                               chunked_prefill_size=8192), 141 * GiB)
    assert s.max_running_requests == 48 and s.disable_overlap_schedule
    r = rank_settings(s)
    assert r.max_running_requests == 6 and r.chunked_prefill_size == 1024 and r.speculative_algorithm == "EAGLE"


def _deepseek_dp8_eagle(alg: str = "EAGLE"):  # type: ignore[no-untyped-def]
    model, gpu = load_model("deepseek-ai/DeepSeek-V3"), load_gpu("h200_sxm")
    s = resolve(ServerSettings(tp_size=8, dp_size=8, enable_dp_attention=True, speculative_algorithm=alg),
                gpu.memory_bytes)
    spec = build_speculative(s, model, LinearLatencyModel(), lambda m: LinearLatencyModel())
    return build_dp_speculative_latency(spec, model, gpu, s, "fp8"), s


def test_deepseek_verify_is_the_slowest_rank_attention_plus_moe_on_every_ranks_draft_tokens() -> None:
    lat, s = _deepseek_dp8_eagle()
    c = lat.config
    assert (c.num_steps, c.eagle_topk, c.num_draft_tokens) == (3, 1, 4)  # DeepSeek's default
    v = lat.verify
    assert v.attention.tp == 1 and v.mlp.tp == 8 and v.graph_bs == tuple(4 * b for b in lat.target.graph_bs)
    # rank 0 decodes 3 requests (KV 3 × 500), rank 1 one (KV 800), 6 ranks idle: the verify graph of 3 requests
    # (12 rows) on every rank, MAX_LEN padding: the MoE and the all-gather/reduce-scatter over 12 × 8 = 96 tokens
    r0, r1 = BatchShape((), (), 3, 1500), BatchShape((), (), 1, 800)
    shapes = [r0, r1] + [None] * 6
    L = v.mlp.shapes.num_layers
    attn = max(v.attention.attention_side_s(BatchShape((), (), 12, 1500), 12, True),
               v.attention.attention_side_s(BatchShape((), (), 4, 800), 12, True))
    tp_allreduce = v.mlp.costs.tp_allreduce_s  # over the whole TP group of 8 (ParallelCosts)
    comm = L * tp_allreduce(96 * 7168 * 2.0, 8, True) + tp_allreduce(24 * 129280 * 2.0 / 8, 8, True)
    prof = v.profile
    verify = (attn + v.mlp.mlp_side_s(96, 24, True) + v._k_comm * comm
              + prof.step_overhead_s + prof.gpu_per_req_s * 12)
    assert abs(v.step_time_ranks([BatchShape((), (), 12, 1500), BatchShape((), (), 4, 800)] + [None] * 6).gpu_s
               - verify) < 1e-15
    # the iteration: 2 draft steps (3 rows, 1 row) + the verify + the draft extend (4 rows per request)
    d, e = lat.draft_step, lat.draft_extend
    draft = d.step_time_ranks([BatchShape((), (), 3, 1500), BatchShape((), (), 1, 800)] + [None] * 6).gpu_s
    extend = e.step_time_ranks([BatchShape((), (), 12, 1500), BatchShape((), (), 4, 800)] + [None] * 6).gpu_s
    got = lat.step_time_ranks(shapes)
    assert abs(got.gpu_s - (2 * draft + verify + extend)) < 1e-15
    assert d.mlp.shapes.num_layers == 1 and d.mlp.tp == 8  # the NextN/MTP layer: one MoE layer, DP attention too
    # idle ranks pay the MoE: the same verify with only rank 0 busy still moves 96 gathered tokens
    alone = v.step_time_ranks([BatchShape((), (), 12, 1500)] + [None] * 7).gpu_s
    assert alone > v.mlp.mlp_side_s(96, 12) > v.mlp.mlp_side_s(12, 12)
    # a prefill pass: the target's DP extend + the draft's DP extend over the same prompt
    pre = [BatchShape((1000,), (0,), 0, 0)] + [None] * 7
    want = lat.target.step_time_ranks(pre).gpu_s + lat.draft.step_time_ranks(pre).gpu_s
    assert abs(lat.step_time_ranks(pre).gpu_s - want) < 1e-15


def test_eagle3_draft_runs_inside_each_rank_attention_group() -> None:
    lat, s = _deepseek_dp8_eagle("EAGLE3")
    assert isinstance(lat.draft, RankLocalLatency) and lat.draft.latency.tp == 1
    a, b = BatchShape((), (), 3, 1500), BatchShape((), (), 1, 800)
    one = lat.draft.latency
    got = lat.draft.step_time_ranks([a, b, None]).gpu_s
    assert got == max(one.step_time(BatchShape((), (), 3, 1500, (), 3)).gpu_s,
                      one.step_time(BatchShape((), (), 1, 800, (), 1)).gpu_s)


def test_predict_dp8_with_eagle(capsys) -> None:  # type: ignore[no-untyped-def]
    from shadowsim.cli import main

    args = ["predict", "--model", "deepseek-ai/DeepSeek-V3", "--gpu", "h200", "--tp", "8", "--enable-dp-attention",
            "--dp-size", "8", "--concurrency", "32", "--num-requests", "48", "--input-len", "1000",
            "--output-len", "100", "--json"]
    assert main([*args, "--speculative-algorithm", "EAGLE"]) == 0
    spec = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)
    srv = spec["server"]
    assert srv["dp_attention_ranks"] == 8 and srv["max_running_requests"] == 6 and not srv["overlap_schedule"]
    assert srv["speculative"]["algorithm"] == "EAGLE" and 2.0 < srv["speculative"]["simulated_accept_length"] < 3.0
    assert srv["latency_model"].endswith(":dp8+eagle")
    assert plain["server"]["max_running_requests"] != 6


def test_graph_sizes_per_forward_follow_the_attention_tp_multiple() -> None:
    # tp 4, dp 2: attention TP 2. cuda_graph_runner.py::get_batch_sizes_to_capture keeps the sizes whose
    # bs × num_tokens_per_bs is a multiple of 2: every size for the verify (4 draft tokens per request) and the
    # draft extend (num_steps + 1 = 4), only the even ones for a draft step (topk 1)
    model, gpu = load_model("Qwen/Qwen3-30B-A3B"), load_gpu("h100_sxm")
    s = resolve(ServerSettings(tp_size=4, dp_size=2, enable_dp_attention=True, speculative_algorithm="EAGLE"),
                gpu.memory_bytes)
    spec = build_speculative(s, model, LinearLatencyModel(), lambda m: LinearLatencyModel())
    lat = build_dp_speculative_latency(spec, model, gpu, s, "bf16")
    captured = s.cuda_graph_bs
    assert 1 in captured and 3 in captured and lat.verify.attn_tp == 2
    assert lat.verify.graph_bs == tuple(4 * b for b in captured)
    assert lat.draft_extend.graph_bs == tuple(4 * b for b in captured)
    assert lat.draft_step.graph_bs == tuple(b for b in captured if b % 2 == 0)
    # a rank decoding 3 requests alone: the draft step has no graph of 3 rows, so it pads to 4 (the next even size)
    d = lat.draft_step
    assert d._pad(3) == 4 and lat.verify._pad(12) == 12
