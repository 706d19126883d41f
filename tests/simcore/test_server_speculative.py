"""Speculative decoding inside the simulated scheduler loop (simcore/server.py ``_decode_spec``, simcore/speculative.py).

Sources (SGLang 0.5.9, /tmp/sg059/x/sglang/srt):
- ``server_args.py::_handle_speculative_decoding``: NEXTN is EAGLE; max_running_requests 48 unless given; overlap
  scheduler off unless SGLANG_ENABLE_SPEC_V2 (off by default, ``environ.py``); mixed chunked prefill off.
- ``server_args.py::_generate_cuda_graph_batch_sizes`` (spec branch) and ``cuda_graph_runner.py::
  get_batch_sizes_to_capture`` (sizes above the request pool dropped, the pool size added).
- ``managers/schedule_batch.py::new_tokens_required_next_decode`` (spec branch: max(num_steps × topk,
  num_draft_tokens) per request, page-aligned) and ``retract_decode`` ("for spec decoding ... we can only retract
  from the back").
- ``speculative/eagle_worker.py::forward_batch_generation``: prefill = target extend + ``forward_draft_extend``;
  decode = ``draft`` (``draft_forward``: num_steps − 1 draft forwards) + ``verify`` (TARGET_VERIFY over
  num_draft_tokens per request) + ``forward_draft_extend_after_decode`` (num_steps + 1 tokens per request).
- ``speculative/eagle_info.py::EagleVerifyInput.verify``: the rejected draft slots are freed; a request that
  finishes stops accepting.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import simpy

from simcore.engine import simulate
from simcore.perf.base import LinearLatencyModel
from simcore.request import RequestSpec
from simcore.server import Server
from simcore.settings import ServerSettings, resolve
from simcore.speculative import (AcceptanceModel, SpeculativeConfig, SpeculativeDecoding, acceptance_for,
                                 build_speculative)

GiB = 1024**3
TARGET = LinearLatencyModel()  # 5 ms + 0.1 ms per extend token + 10 µs per decode row + 10 ns per KV token
DRAFT = LinearLatencyModel(base_s=0.001)


def _spec(accept_prob: float, seed: int = 0, steps: int = 3) -> SpeculativeDecoding:
    return SpeculativeDecoding(SpeculativeConfig("EAGLE", steps, 1, steps + 1), TARGET, DRAFT,
                               AcceptanceModel(steps + 1, accept_prob), seed)


def _settings(**kw) -> ServerSettings:
    return resolve(ServerSettings(speculative_algorithm="EAGLE", speculative_num_steps=3, **kw), 80 * GiB)


def test_settings_force_what_sglang_forces() -> None:
    s = resolve(ServerSettings(speculative_algorithm="NEXTN", enable_mixed_chunk=True), 80 * GiB)
    assert s.disable_overlap_schedule and not s.enable_mixed_chunk and s.max_running_requests == 48
    # the spec capture list up to the 48-request pool: 1..8, 10..32 step 2, 40..48 step 4
    assert s.cuda_graph_bs == (*range(1, 9), *range(10, 33, 2), 40, 44, 48)
    assert s.cuda_graph_max_bs == 256  # the GPU default (80 GB, TP1): graph memory is sized before the 48
    given = resolve(ServerSettings(speculative_algorithm="EAGLE", max_running_requests=100), 80 * GiB)
    assert given.max_running_requests == 100 and given.cuda_graph_bs[-3:] == (88, 96, 100)
    assert resolve(s, 80 * GiB) == s  # idempotent
    plain = resolve(ServerSettings(), 80 * GiB)
    assert not plain.disable_overlap_schedule and plain.max_running_requests is None


def test_decode_reservation_of_draft_tokens() -> None:
    assert SpeculativeConfig("EAGLE", 3, 1, 4).decode_reservation(10) == 40
    assert SpeculativeConfig("EAGLE", 5, 4, 8).decode_reservation(10) == 200  # max(5 × 4, 8) per request
    # pages of 16: topk 1 aligns each term, topk > 1 adds the last partial page: max(32 × 4, 16)
    assert SpeculativeConfig("EAGLE", 3, 1, 4).decode_reservation(2, page_size=16) == 32
    assert SpeculativeConfig("EAGLE", 5, 4, 8).decode_reservation(2, page_size=16) == 256


def test_one_request_every_draft_accepted_by_hand() -> None:
    """100-token prompt, 10 output tokens, every draft accepted (L = 4 = num_steps + 1, the last step capped)."""
    spec = _spec(1.0)
    res = simulate(_settings(), spec, [RequestSpec("a", 0.0, 100, 10, 10)], kv_capacity_tokens=10_000,
                   speculative=spec)
    prefill = (0.005 + 100e-4) + (0.001 + 100e-4)  # target extend + draft extend of the prompt

    def iteration(kv: int) -> float:  # 2 draft decodes of 1 row + verify of 4 rows + draft extend of 4 rows,
        # each over the request's KV, read once (CUDA graph of bs 1 × 4 tokens)
        return 2 * (0.001 + 1e-5 + kv * 1e-8) + (0.005 + 4e-5 + kv * 1e-8) + (0.001 + 4e-5 + kv * 1e-8)

    # outputs 1 → 5 → 9 → 10: three iterations over 101, 105, 109 KV tokens
    rec = res.records[0]
    assert rec.ttft_s == pytest.approx(prefill)
    finish = prefill + iteration(101) + iteration(105) + iteration(109)
    assert rec.finish_s == pytest.approx(finish) and rec.output_len == 10
    assert rec.tpot_s == pytest.approx((finish - prefill) / 9)
    assert res.steps == 4
    # one inter-token gap per iteration (its tokens arrive together), not one per token
    assert res.itl_weights == [1, 1, 1]
    assert res.itl_values_s == pytest.approx([iteration(101), iteration(105), iteration(109)])
    assert (spec.accepted_tokens, spec.verify_passes) == (9, 3)


def test_nothing_accepted_is_one_token_per_iteration() -> None:
    spec = _spec(0.0)
    res = simulate(_settings(), spec, [RequestSpec("a", 0.0, 100, 10, 10)], kv_capacity_tokens=10_000,
                   speculative=spec)
    assert res.steps == 10 and spec.mean_accept_length == 1.0


def _busy(n: int = 80) -> list[RequestSpec]:
    rnd = np.random.default_rng(3)
    return [RequestSpec(f"r{i}", i * 0.02, int(rnd.integers(50, 600)), int(rnd.integers(5, 300)), 400)
            for i in range(n)]


def _run(spec: SpeculativeDecoding, cap: int, **kw) -> Server:
    env = simpy.Environment()
    srv = Server(env, _settings(**kw), cap, spec, speculative=spec,
                 observer=lambda st: srv.check_invariants())
    for r in _busy():
        srv.submit(r, at_s=r.arrival_s)
    env.run()
    srv.check_invariants()
    assert srv.kv.used == 0
    return srv


def test_seeded_draws_are_deterministic_and_follow_the_distribution() -> None:
    a, b = _run(_spec(0.6, seed=5), 200_000), _run(_spec(0.6, seed=5), 200_000)
    assert [(r.rid, r.finish_s, r.output_len) for r in a.records] == [(r.rid, r.finish_s, r.output_len)
                                                                       for r in b.records]
    c = _run(_spec(0.6, seed=6), 200_000)
    assert [r.finish_s for r in c.records] != [r.finish_s for r in a.records]
    # every request still gets exactly its output length; the accept length is the chain's mean
    # (1 + .6 + .36 + .216 = 2.176) less the caps at the requests' last tokens
    assert sorted((r.rid, r.output_len) for r in a.records) == sorted((q.rid, q.output_len) for q in _busy())
    assert 2.0 < a.spec.mean_accept_length < 2.176


def test_tight_kv_retracts_and_keeps_the_books() -> None:
    """40 requests of 200 + 1000 tokens in a 6000-token pool: the draft reservation (4 per request) runs the pool
    out, requests are retracted and re-admitted, the KV books balance after every step, and all finish."""
    env = simpy.Environment()
    spec = _spec(0.6, seed=1)
    srv = Server(env, _settings(), 6_000, spec, speculative=spec,
                 observer=lambda st: srv.check_invariants())
    for i in range(40):
        srv.submit(RequestSpec(f"r{i}", i * 0.01, 200, 1000, 1000), at_s=i * 0.01)
    env.run()
    srv.check_invariants()
    assert srv.num_retractions > 0 and srv.kv.used == 0
    assert len(srv.records) == 40 and all(r.output_len == 1000 and not r.aborted for r in srv.records)


def test_retraction_takes_the_last_request_of_the_batch() -> None:
    """retract_decode keeps the batch order under speculation and pops from its back: each retracted request is
    the last of the decoding set (join order) when it is taken."""
    env = simpy.Environment()
    spec = _spec(0.6, seed=1)
    srv = Server(env, _settings(), 6_000, spec, speculative=spec)
    for i in range(40):
        srv.submit(RequestSpec(f"r{i}", i * 0.01, 200, 1000, 1000), at_s=i * 0.01)
    taken: list[tuple[str, str]] = []
    orig = srv._retract

    def retract(r, t):  # noqa: ANN001
        taken.append((r.rid, list(srv.decoding)[-1]))
        orig(r, t)

    srv._retract = retract
    env.run()
    assert taken and all(rid == last for rid, last in taken)


def test_snapshot_mid_run_resumes_identically() -> None:
    reqs = _busy(40)
    whole_env = simpy.Environment()
    spec = _spec(0.7, seed=2)
    whole = Server(whole_env, _settings(), 50_000, spec, speculative=spec)
    for r in reqs:
        whole.submit(r, at_s=r.arrival_s)
    whole_env.run()
    env = simpy.Environment()
    spec = _spec(0.7, seed=2)
    first = Server(env, _settings(), 50_000, spec, speculative=spec)
    for r in reqs:
        first.submit(r, at_s=r.arrival_s)
    env.run(until=0.5)
    snap = json.loads(json.dumps(first.snapshot()))
    env2 = simpy.Environment(initial_time=env.now)
    spec = _spec(0.7, seed=99)  # its draws continue from the snapshot's generator state
    second = Server.restore(env2, snap, _settings(), spec, speculative=spec)
    env2.run()
    done = {r.rid: r.finish_s for r in first.records + second.records}
    assert done == {r.rid: r.finish_s for r in whole.records}


def test_a_plain_server_refuses_a_speculative_latency_and_vice_versa() -> None:
    env = simpy.Environment()
    with pytest.raises(ValueError, match="speculative server needs both"):
        Server(env, _settings(), 1000, TARGET)
    with pytest.raises(ValueError, match="speculative server needs both"):
        Server(env, resolve(ServerSettings(), None), 1000, TARGET, speculative=_spec(0.5))
    with pytest.raises(ValueError, match="pass it as the latency model too"):
        Server(env, _settings(), 1000, TARGET, speculative=_spec(0.5))


def test_build_from_flags_uses_the_assumed_accept_length() -> None:
    from simcore.models import load_model

    model = load_model("deepseek-ai/DeepSeek-V3")
    s = resolve(ServerSettings(speculative_algorithm="NEXTN", speculative_accept_length=2.5), 80 * GiB)
    spec = build_speculative(s, model, TARGET, lambda m: DRAFT, seed=0)
    assert (spec.config.num_steps, spec.config.num_draft_tokens) == (3, 4)  # DeepSeek's auto choice
    assert spec.acceptance.mean() == pytest.approx(2.5)
    assert acceptance_for(spec.config, None).accept_prob == 0.7
    assert build_speculative(resolve(ServerSettings(), None), model, TARGET, lambda m: DRAFT) is None
