"""Invariants of the server model over random workloads (Hypothesis).

For any mix of requests, settings and pool size:

- the KV pool is never over-committed (free + private + tree = capacity, used ≤ capacity) after every step,
  and the server's incremental bookkeeping matches a recount (``Server.check_invariants``);
- nodes locked by running requests are never evicted (a request's locked node stays in the tree while it runs);
- every prompt and output token is accounted for: each request finishes with exactly its output length, cached
  tokens never exceed the prompt, and all KV is released at the end;
- two runs with the same seed are identical;
- or the run stops exactly where SGLang's own server would (``SimulatedServerFailure``, "Prefill out of memory"):
  only on the next chunk of a chunked prompt, which SGLang's ``add_chunked_req`` lets through when the memory
  budget is spent (0.5.9 ``schedule_policy.py`` lines 591-616; 0.4.10 lines 382-398), and the state stays
  consistent up to it.
"""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serverkit import run, req
from simcore.errors import SimulatedServerFailure
from simcore.server import Server

REQS = st.lists(
    st.tuples(
        st.floats(0.0, 2.0, allow_nan=False),       # arrival
        st.integers(1, 600),                        # input length
        st.integers(1, 150),                        # output length
        st.integers(0, 3),                          # prefix group
        st.booleans(),                              # finishes by EOS (max_new larger)
    ),
    min_size=1, max_size=25,
)
CONFIG = st.fixed_dictionaries({
    "cap": st.integers(700, 4000),
    "chunked_prefill_size": st.sampled_from([-1, 64, 256, 4096]),
    "page_size": st.sampled_from([1, 1, 4]),
    "schedule_policy": st.sampled_from(["fcfs", "lpm", "dfs-weight", "lof", "random"]),
    "disable_overlap_schedule": st.booleans(),
    "enable_mixed_chunk": st.booleans(),
    "sglang_version": st.sampled_from(["0.4.10", "0.5.9", "0.5.23"]),
    "init_new_token_ratio": st.sampled_from([0.05, 0.7]),
})


def _requests(raw: list[tuple[float, int, int, int, bool]]) -> list:
    out = []
    for i, (at, n, m, group, eos) in enumerate(raw):
        base = group * 100_000
        out.append(req(f"r{i}", at, n, m, max_new=m + 7 if eos else -1, key=list(range(base, base + n))))
    return out


def _run(reqs: list, cfg: dict, **kw):
    """``run``, or None when the simulated server stops as SGLang's would (checked: a chunked prompt's chunk)."""
    try:
        return run(reqs, **kw, **_config(cfg))
    except SimulatedServerFailure as failure:
        chunk = cfg["chunked_prefill_size"]
        failed = next(r for r in reqs if r.rid == failure.request_id)
        assert chunk != -1 and failed.input_len > chunk, "only a chunked prompt's continuation may outgrow the pool"
        assert failure.sglang_error.startswith("Prefill out of memory")
        return None


def _config(cfg: dict) -> dict:
    cfg = dict(cfg)
    if cfg["chunked_prefill_size"] == -1:
        cfg["enable_mixed_chunk"] = False
    return cfg


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(REQS, CONFIG)
def test_pool_never_overcommitted_and_tokens_accounted(raw: list, cfg: dict) -> None:
    reqs = _requests(raw)
    res = _run(reqs, cfg, check=True)  # check: invariants recounted after every step (also up to a failure)
    if res is None:
        return
    srv = res.server
    recs = res.records
    assert set(recs) == {r.rid for r in reqs}
    for r in reqs:
        rec = recs[r.rid]
        # max_new_tokens is clipped to the context: max_req_len − input − 1 with max_req_len = pool − 1
        max_new = min(r.max_new_tokens, max(1, cfg["cap"] - 1 - r.input_len - 1))
        if rec.aborted:
            # Two ways to be aborted. A request that cannot fit even alone — prompt + its own reservation
            # min(max_new, 4096) + the 0.5.23 per-request page reach the pool (§2.5 NO_TOKEN) — leaves the queue
            # without a token. Any other abort is "out of memory even after retracting" while decoding (§2.7),
            # after at least one token.
            overhead = cfg["page_size"] if cfg["sglang_version"] == "0.5.23" else 0
            fits_alone = r.input_len + min(max_new, 4096) + overhead < cfg["cap"]
            assert (rec.output_len == 0) == (not fits_alone)
            continue
        assert rec.output_len == min(r.output_len, max_new)
        assert 0 <= rec.cached_tokens <= r.input_len - 1
        assert rec.first_token_s >= r.arrival_s and rec.finish_s >= rec.first_token_s
    assert srv.kv.used == 0 and srv.kv.private == 0 and srv.kv.protected == 0
    done = [x for x in recs.values() if not x.aborted]
    if len(done) == len(recs):
        # one inter-token gap per token after the first, and a request's gaps add up to finish − first token
        assert sum(srv.itl_w) == sum(x.output_len - 1 for x in done)
        total = sum(v * w for v, w in zip(srv.itl_vals, srv.itl_w))
        assert abs(total - sum(x.finish_s - x.first_token_s for x in done)) < 1e-6 * max(1.0, total)
    if srv.num_retractions == 0 and not any(x.aborted for x in recs.values()):
        # every prompt token is either computed once in a prefill step or served from the cache
        computed = sum(sum(st.shape.extend_lens) for st in res.steps)
        assert computed == sum(x.input_len - x.cached_tokens for x in recs.values())
        if cfg["disable_overlap_schedule"]:
            # every output token after the first comes from exactly one decode row
            assert sum(st.shape.num_decode for st in res.steps) == sum(x.output_len - 1 for x in recs.values())
    assert not srv.decoding and not srv.awaiting_result and not srv.waiting and srv.chunked is None


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(REQS, CONFIG)
def test_locked_nodes_are_never_evicted(raw: list, cfg: dict) -> None:
    reqs = _requests(raw)

    def watch(step: object, srv: Server) -> None:
        tree = srv.kv.tree
        for r in srv.reqs.values():
            n = r.node
            while n is not None and n is not tree.root:  # the whole locked path is still in the tree
                assert n.lock_ref > 0, f"{r.rid} holds an unlocked node"
                assert tree.node_by_id(n.id) is n, f"locked node {n.id} of {r.rid} was evicted"
                n = n.parent

    res = _run(reqs, cfg, check=False, observe=watch)
    assert res is None or len(res.server.records) == len(reqs)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(REQS, CONFIG, st.integers(0, 2**31 - 1))
def test_same_seed_same_run(raw: list, cfg: dict, seed: int) -> None:
    reqs = _requests(raw)
    a = _run(reqs, cfg, check=False, seed=seed)
    b = _run(reqs, cfg, check=False, seed=seed)
    if a is None or b is None:
        assert a is None and b is None, "the same seed stops at the same point or not at all"
        return
    assert a.server.records == b.server.records
    assert [(s.start_s, s.end_s, s.shape) for s in a.steps] == [(s.start_s, s.end_s, s.shape) for s in b.steps]


def test_a_chunked_prompt_that_outgrows_the_pool_stops_the_server_as_sglang_does():
    """Found by the properties above: on a 700-token pool (page 4, chunk 64, SGLang 0.4.10 rules) a 341-token
    prompt is admitted chunk by chunk next to a request sharing a 356-token cached prefix. Admission checks only
    the first chunk (a truncated request reserves its chunk, no outputs); every later chunk takes
    ``rem_chunk_tokens`` whatever memory is left (0.4.10 ``schedule_policy.py::add_chunked_req`` lines 382-398;
    0.5.9 lines 591-616 fall back to ``rem_chunk_tokens`` once the budget is spent). The last page does not fit and
    SGLang raises "Prefill out of memory" (0.4.10 ``schedule_batch.py`` line 1005, 0.5.9 ``mem_cache/common.py``
    line 285): so does the simulation, with the request and what was free."""
    import pytest

    raw = [(0.0, 1, 1, 0, False)] * 5 + [(1.0, 356, 92, 0, False), (2.0, 357, 2, 0, False), (1.0, 341, 1, 1, False)]
    cfg = {"cap": 700, "chunked_prefill_size": 64, "page_size": 4, "schedule_policy": "fcfs",
           "disable_overlap_schedule": True, "enable_mixed_chunk": False, "sglang_version": "0.4.10",
           "init_new_token_ratio": 0.05}
    with pytest.raises(SimulatedServerFailure, match="next prefill chunk of r7 .4 token slots, 0 free") as info:
        run(_requests(raw), check=True, **_config(cfg))
    assert info.value.request_id == "r7" and info.value.field == "server"
    assert info.value.sglang_error == "Prefill out of memory. Try to lower your batch size."
    # a larger pool holds both prompts and the run completes
    done = run(_requests(raw), check=True, **_config({**cfg, "cap": 800}))
    assert len(done.records) == 8
