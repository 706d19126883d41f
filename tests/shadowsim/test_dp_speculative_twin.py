"""The twin of one attention-DP rank of a speculative server (shadowsim/shadow/engine.py ``dp_rank_speculative``,
simcore/dp_attention.py ``BalancedSpeculative``): DeepSeek-V3 TP8 DP8 with EAGLE (NextN). SGLang 0.5.9 logs
``server_args`` after ``_handle_data_parallelism`` and ``_handle_speculative_decoding``: ``speculative_algorithm``
``EAGLE`` (NEXTN renamed), the per-rank ``chunked_prefill_size``. Each rank runs 48 // 8 = 6 requests
(``model_runner.py``: ``max_running_requests // dp_size``) and each of its iterations is the EAGLE worker's DP
forwards (``eagle_worker.py::forward_batch_generation``), priced as if every rank ran a batch like this one."""
from __future__ import annotations

from shadowsim.shadow.config import InstanceConfig
from shadowsim.shadow.engine import SimEngine
from simcore.dp_attention import BalancedSpeculative
from simcore.perf.base import BatchShape


def _engine(seed: int = 0) -> SimEngine:
    server_config = {"model": "deepseek-ai/DeepSeek-V3", "tp_size": 8, "dp_size": 8, "enable_dp_attention": True,
                     "chunked_prefill_size": 1024, "speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
                     "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
    return SimEngine(InstanceConfig(model="deepseek-ai/DeepSeek-V3", gpu="h200_sxm", precision="fp8", seed=seed),
                     server_config, epoch_ts=1.8e9)


def test_a_speculative_dp_rank_twin_prices_its_iterations_as_dp_forwards() -> None:
    eng = _engine()
    spec = eng.speculative
    assert isinstance(spec, BalancedSpeculative) and eng.dp_ranks == 8
    assert eng.settings.max_running_requests == 6 and eng.settings.disable_overlap_schedule
    lat = spec.dp_latency
    assert lat.verify.attention.tp == 1 and lat.verify.mlp.tp == 8 and lat.draft.mlp.shapes.num_layers == 1
    # a decode iteration of 4 requests on this rank = the DP iteration with 4 requests on each of the 8 ranks
    shape = BatchShape((), (), 4, 4 * 1000, (), 4)
    assert spec.step_time(shape) == lat.step_time_ranks([shape] * 8)
    c = spec.config
    v = lat.verify.step_time_ranks([BatchShape((), (), 16, 4000)] * 8).gpu_s
    e = lat.draft_extend.step_time_ranks([BatchShape((), (), 16, 4000)] * 8).gpu_s
    d = lat.draft_step.step_time_ranks([BatchShape((), (), 4, 4000)] * 8).gpu_s
    assert (c.num_steps, c.num_draft_tokens) == (3, 4)
    assert abs(spec.step_time(shape).gpu_s - (v + e + 2 * d)) < 1e-15
    # the twin runs: a request completes with speculative iterations (accepted lengths drawn, seeded)
    eng.submit("q", 1.8e9 + 0.5, 200, 40, key=None, key_unit=1, max_new_tokens=40, ignore_eos=True, priority=None,
               order=0)
    done = eng.advance_to(1.8e9 + 60)
    assert [c.rid for c in done] == ["q"]
    assert spec.verify_passes > 0 and 1.0 < spec.mean_accept_length <= 4.0
    assert spec.verify_passes < 39  # fewer iterations than tokens after the first: more than one accepted each


def test_the_rank_twin_draws_are_seeded() -> None:
    def run(seed: int) -> tuple[int, int]:
        eng = _engine(seed)
        for i in range(3):
            eng.submit(f"q{i}", 1.8e9 + 0.1 * i, 300, 60, key=None, key_unit=1, max_new_tokens=60, ignore_eos=True,
                       priority=None, order=i)
        eng.advance_to(1.8e9 + 60)
        return eng.speculative.accepted_tokens, eng.speculative.verify_passes

    assert run(3) == run(3) == (177, 71)
    assert run(4) == (177, 79)  # another seed, other accepted lengths
    assert run(3)[0] == 3 * 59  # every output token after the first comes from a verify pass
