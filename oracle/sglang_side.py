"""SGLang's side of the oracle: runs inside the oracle environment (``python -m oracle.env``), never imports shadowsim.

    ORACLE_PYTHON -m oracle.sglang_side OUT_DIR JOBS SCENARIO.json ...

Scheduler scenarios build SGLang 0.5.23's real ``Scheduler`` in-process on CPU (a 2-layer dummy-weight Llama,
``torch_native`` attention, CUDA graphs off) and drive the loop body of ``event_loop_normal`` or
``event_loop_overlap`` by hand: the requests of the scenario go in through ``process_input_requests`` (no tokenizer
process, no ZMQ), and a virtual clock advances by :func:`oracle.scenarios.step_time_s`, with the same overlap
timing the simulator models (GPU of step N+1 queued behind step N; results of step N processed after N+1 launched).

Cache scenarios replay the Mooncake trace through SGLang's Python ``RadixCache`` (``create_simulated``, its clock
patched to the replay's) or its default ``UnifiedRadixCache`` (the Scheduler's own tree, Rust core, real KV
indices from its allocator).

The output is the trace format of :mod:`oracle.trace`.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time as _time
import types
from array import array
from collections import deque
from pathlib import Path

os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
os.environ.pop("CUDA_VISIBLE_DEVICES", None)

from oracle.scenarios import Scenario, mooncake_requests, output_ids, step_time_s  # noqa: E402

HERE = Path(__file__).resolve().parent


def _stub_kernels() -> None:
    from sglang.test.test_utils import maybe_stub_sgl_kernel

    maybe_stub_sgl_kernel()


def _tiny_model_dir(config_name: str = "tiny-llama-config.json") -> str:
    d = tempfile.mkdtemp(prefix="oracle-tiny-")
    Path(d, "config.json").write_text((HERE / config_name).read_text())
    return d


def build_scheduler(flags: dict, max_total_tokens: int, model_config: str = "tiny-llama-config.json"):
    """SGLang's real Scheduler, set up as ``run_scheduler_process`` does, minus the process and the sockets."""
    from sglang.srt.managers import scheduler as sm
    from sglang.srt.server_args import PortArgs, ServerArgs

    kw = dict(flags)
    kw["max_total_tokens"] = max_total_tokens
    sa = ServerArgs(model_path=_tiny_model_dir(model_config), device="cpu", load_format="dummy",
                    skip_tokenizer_init=True, disable_cuda_graph=True, mem_fraction_static=0.5,
                    attention_backend="torch_native", dtype="bfloat16", log_level="warning", **kw)
    pa = PortArgs.init_new(sa)
    sm.publish(sa, role="scheduler", ranks=sm.SpawnRanks(world_rank=sm.spawn_world_rank(sa, tp_rank=0, pp_rank=0),
                                                         dp_rank=None, gpu_id=0))
    sm.configure_scheduler_process(sa, 0, display_tp_rank=None, display_dp_rank=None, display_moe_ep_rank=None)
    return sm.Scheduler(sa, pa)


def stub_model_forward(s) -> None:
    """Replace the tiny model's eager forward by zero logits (every greedy sample is token 0, never EOS).

    Everything the scheduler does stays SGLang's: batch building, the forward batch, sampling, result processing,
    KV allocation and the radix cache. Only the matrix products of a dummy-weight model are skipped; their
    values never reach a scheduling decision (outputs run to max_new_tokens either way). ``ORACLE_REAL_FORWARD=1``
    keeps the real forward (same traces, several times slower).
    """
    if os.environ.get("ORACLE_REAL_FORWARD") == "1":
        return
    import torch
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    runner = s.tp_worker.model_runner
    vocab = runner.model_config.vocab_size

    def execute(forward_batch, pp_proxy_tensors=None, **kwargs):
        if forward_batch.forward_mode.is_mixed():  # as EagerRunner.execute: a mixed batch runs as EXTEND
            forward_batch.forward_mode = ForwardMode.EXTEND
        return LogitsProcessorOutput(next_token_logits=torch.zeros((forward_batch.batch_size, vocab)))

    runner.eager_runner.execute = execute


# ---- scheduler scenarios -----------------------------------------------------------------------------------------
class _Batch:
    """What the driver remembers of one launched batch until its result is processed."""

    __slots__ = ("batch", "result", "gpu_end", "is_prefill", "chunked")

    def __init__(self, batch, result, gpu_end: float, is_prefill: bool, chunked) -> None:
        self.batch, self.result, self.gpu_end = batch, result, gpu_end
        self.is_prefill, self.chunked = is_prefill, chunked


def run_scheduler(sc: Scenario) -> dict:
    _stub_kernels()
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
    from sglang.srt.sampling.sampling_params import SamplingParams

    fl = dict(vars(sc.flags)) if not isinstance(sc.flags, dict) else dict(sc.flags)
    cap = fl.pop("max_total_tokens")
    overlap = not fl["disable_overlap_schedule"]
    s = build_scheduler(fl, cap)
    stub_model_forward(s)
    info = {"max_total_num_tokens": int(s.max_total_num_tokens), "max_running_requests": int(s.max_running_requests),
            "tree": type(s.tree_cache).__name__, "overlap": overlap}
    specs = sc.requests

    def make(i: int):
        r = specs[i]
        sp = SamplingParams(max_new_tokens=r.max_new_tokens, ignore_eos=r.ignore_eos, temperature=0)
        sp.normalize(None)
        return TokenizedGenerateReqInput(rid=r.rid, input_text=None, input_ids=array("q", r.input_ids),
                                         input_embeds=None, mm_inputs=None, token_type_ids=None, sampling_params=sp,
                                         return_logprob=False, logprob_start_len=-1, top_logprobs_num=0,
                                         token_ids_logprob=None, stream=False, priority=r.priority)

    if sc.concurrency:
        pending = [(0.0, i) for i in range(min(sc.concurrency, len(specs)))]
        nxt = len(pending)
    else:
        pending = sorted((r.arrival_s, i) for i, r in enumerate(specs))
        nxt = len(specs)
    reqs: dict[str, dict] = {}
    steps: list[dict] = []
    t = 0.0
    gpu_free = 0.0
    done = 0

    def ingest(now: float) -> None:
        nonlocal pending
        ready = [p for p in pending if p[0] <= now + 1e-12]
        if not ready:
            return
        pending = [p for p in pending if p[0] > now + 1e-12]
        s.process_input_requests([make(i) for _, i in sorted(ready)])
        for a, i in ready:
            reqs[specs[i].rid] = {"arrival": round(a, 6)}

    def process(b: _Batch) -> None:
        """process_batch_result, then the finish / first-token times it produced (at the batch's GPU end)."""
        nonlocal nxt, done
        s.process_batch_result(b.batch, b.result)
        for r in b.batch.reqs:
            rec = reqs.get(r.rid)
            if rec is None:
                continue
            if b.is_prefill and r is not b.chunked and "first" not in rec and len(r.output_ids) >= 1:
                rec["first"] = round(b.gpu_end, 6)
            if r.finished() and "finish" not in rec:
                rec["finish"] = round(b.gpu_end, 6)
                rec["cached"] = int(r.cached_tokens)
                rec["output_len"] = len(r.output_ids)
                done += 1
                if sc.concurrency and nxt < len(specs):
                    pending.append((b.gpu_end, nxt))
                    nxt += 1

    inflight: deque[_Batch] = deque()
    # Scheduler.run_event_loop's set-up on CPU (scheduler.py lines 1975-2010) and _dispatch_event_loop_once's
    # (lines 6218-6222); event_loop_overlap then turns skip-finishing-decode on (line 2063)
    s.schedule_stream.synchronize = lambda: None
    s._war_barrier_enabled = False
    s.enable_continuous_input_polling = False
    s.enable_skip_finishing_decode = False
    if overlap:
        s.enable_skip_finishing_decode = True
        s.result_queue = deque()
    guard = 0
    while True:
        guard += 1
        if guard > 200000:
            raise RuntimeError("sglang side: loop did not terminate")
        ingest(t)
        wait_before = {r.rid for r in s.waiting_queue}
        plan = s.get_next_batch_to_run(running_batch=s.running_batch, last_batch=s.last_batch)
        s.running_batch = plan.running_batch
        b = plan.batch_to_run
        requeued = sorted(r.rid for r in s.waiting_queue if r.rid not in wait_before)
        rec = None
        if b is not None:
            if b.forward_mode.is_extend() or b.forward_mode.is_mixed():
                rids = [r.rid for r in b.reqs]
                ext = [int(x) for x in b.extend_lens]
                pre = [int(x) for x in b.prefix_lens]
                n_dec = 0
                if b.forward_mode.is_mixed():
                    # mix_with_running (schedule_batch.py line 3267) appends the running batch's decode rows after
                    # the prefill rows and keeps their pool indices in mix_running_indices
                    n_dec = len(b.mix_running_indices)
                    n_pre = len(rids) - n_dec
                    rids, ext, pre = rids[:n_pre], ext[:n_pre], pre[:n_pre]
                rec = {"mode": "prefill", "rids": rids, "extend": ext, "prefix": pre, "n_dec": n_dec}
                dt = step_time_s(sum(ext), n_dec)
            else:
                rec = {"mode": "decode", "n_dec": len(b.reqs)}
                dt = step_time_s(0, len(b.reqs))
            rec["retracted"] = requeued
        if overlap:
            disable = s.is_disable_overlap_for_batch(b, last_batch=s.last_batch)
            prev = None
            if disable and inflight:
                prev = inflight.popleft()
                s.result_queue.popleft()
                process(prev)
            result = None
            if b is not None:
                launch = max(t, gpu_free)
                chunked = s.chunked_req
                result = s.run_batch(b)
                s._apply_war_barrier()
                s.result_queue.append((b.copy(), result))
                gpu_free = launch + dt
                rec["t"] = round(launch, 6)
                steps.append(rec)
                inflight.append(_Batch(s.result_queue[-1][0], result, gpu_free,
                                       rec["mode"] == "prefill", chunked))
            if s.last_batch is not None:
                if not disable:
                    prev = inflight.popleft()
                    s.result_queue.popleft()
                    process(prev)
            elif b is None:
                s._sched_idled = True
                s.on_idle()
            if s.is_generation:
                s.launch_batch_sample_if_needed(result, b)
            s.last_batch = b
            if prev is not None:
                t = max(t, prev.gpu_end)
            elif b is None:
                if not pending and done >= len(specs):
                    break
                if pending:
                    t = max(t, min(p[0] for p in pending))
                elif not s.waiting_queue and not inflight:
                    break
        else:
            if b is None:
                s.on_idle()
                s.last_batch = None
                if not pending:
                    break
                t = max(t, min(p[0] for p in pending))
                continue
            chunked = s.chunked_req
            rec["t"] = round(t, 6)
            result = s.run_batch(b)
            t += dt
            steps.append(rec)
            process(_Batch(b, result, t, rec["mode"] == "prefill", chunked))
            s.last_batch = b
        if done >= len(specs):
            break
    return {"info": info, "steps": steps, "reqs": reqs}


# ---- cache scenarios ---------------------------------------------------------------------------------------------
class _ReplayClock:
    """SGLang's radix_cache reads ``time.monotonic()`` for LRU stamps; the replay gives it the trace's time plus a
    per-call counter (distinct, increasing stamps; the simulator's tree does the same with a tick)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.calls = 0

    def monotonic(self) -> float:
        self.calls += 1
        return self.now + self.calls * 1e-9


def run_cache(sc: Scenario, trace: Path, unified_scheduler=None) -> dict:
    """One replay. Per request: hit = match(prompt[:len−1]); lock; evict what the pool lacks for
    ``prompt + output − 1``; insert those tokens; unlock (SGLang's cache_finished_req inserts len(fill) − 1)."""
    import torch
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams

    cfg = sc.cache
    reqs = mooncake_requests(trace, cfg.num_requests)
    hits: list[int] = []
    started = _time.time()
    if cfg.tree == "radix":
        import unittest.mock

        import sglang.srt.mem_cache.radix_cache as sgrc

        clock = _ReplayClock()
        sgrc.time = types.SimpleNamespace(monotonic=clock.monotonic, perf_counter=_time.perf_counter,
                                          time=_time.time)
        alloc = unittest.mock.Mock()
        alloc.device = torch.device("cpu")
        tree = sgrc.RadixCache.create_simulated(mock_allocator=alloc, page_size=cfg.page_size)
        for r in reqs:
            clock.now = r["t"]
            prompt = r["prompt"]
            m = tree.match_prefix(MatchPrefixParams(key=sgrc.RadixKey(prompt[: len(prompt) - 1])))
            hit, node = m.device_prefix_len, m.last_device_node
            tree.inc_lock_ref(node)
            full = prompt + output_ids(r["index"], r["output_len"] - 1)
            over = tree.total_size() + len(full) - hit - cfg.capacity_tokens
            if over > 0:
                tree.evict(EvictParams(num_tokens=over))
            tree.insert(InsertParams(key=sgrc.RadixKey(full), value=torch.arange(len(full), dtype=torch.int64)))
            tree.dec_lock_ref(node)
            hits.append(int(hit))
        size = int(tree.total_size())
        tree_name = type(tree).__name__
    else:
        from sglang.srt.mem_cache.radix_cache import RadixKey

        s = unified_scheduler
        tree, alloc = s.tree_cache, s.token_to_kv_pool_allocator
        tree.reset()
        tree_name = f"{type(tree).__name__}({type(tree.tree_core).__name__})"

        def key(toks):
            return RadixKey(array("q", toks))

        def fresh(n: int):
            if n <= 0:
                return torch.empty((0,), dtype=torch.int64)
            if alloc.available_size() < n:
                tree.evict(EvictParams(num_tokens=n - alloc.available_size()))
            v = alloc.alloc(n)
            if v is None:
                raise RuntimeError(f"unified replay: allocator short of {n} tokens")
            return v.to(torch.int64)

        for r in reqs:
            prompt = r["prompt"]
            full = prompt + output_ids(r["index"], r["output_len"] - 1)
            m = tree.match_prefix(MatchPrefixParams(key=key(prompt[: len(prompt) - 1])))
            hit, node = m.device_prefix_len, m.last_device_node
            lock = tree.lock(node)
            room = cfg.capacity_tokens - tree.evictable_size() - tree.protected_size()
            need = len(full) - hit
            if need > room:
                tree.evict(EvictParams(num_tokens=need - room))
            m2 = tree.match_prefix(MatchPrefixParams(key=key(full)))
            vals = torch.cat([tree.path_device_indices(m2.last_device_node).to(torch.int64),
                              fresh(len(full) - m2.device_prefix_len)])
            tree.insert(InsertParams(key=key(full), value=vals))
            tree.unlock(lock)
            hits.append(int(hit))
        size = int(tree.evictable_size() + tree.protected_size())
    return {"info": {"tree": tree_name, "secs": round(_time.time() - started, 1)}, "hits": hits, "tree_size": size}


def run_one(sc: Scenario) -> dict:
    started = _time.time()
    if sc.kind == "scheduler":
        out = run_scheduler(sc)
    else:
        trace = Path(os.environ["ORACLE_MOONCAKE_TRACE"])
        sched = None
        if sc.cache.tree == "unified":
            from oracle.scenarios import ServerFlags

            fl = {k: v for k, v in vars(ServerFlags()).items() if k != "max_total_tokens"}
            sched = build_scheduler(fl, sc.cache.capacity_tokens + 100_000, "tiny-cache-config.json")
        out = run_cache(sc, trace, sched)
    out["secs"] = round(_time.time() - started, 1)
    return out


def _child(sc: Scenario, out_dir: Path) -> None:
    """Run one scenario in a forked child; the trace appears atomically as NAME.json, a failure as NAME.error."""
    try:
        data = run_one(sc)
        part = out_dir / f"{sc.name}.json.part"
        part.write_text(json.dumps(data))
        part.rename(out_dir / f"{sc.name}.json")
        code = 0
    except BaseException:  # noqa: BLE001 - reported to the parent, whatever it was
        import traceback

        (out_dir / f"{sc.name}.error").write_text(traceback.format_exc())
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str]) -> int:
    """``sglang_side OUT_DIR JOBS SCENARIO.json ...``: import SGLang once (tens of seconds), then fork one child per
    scenario, at most JOBS at a time; each child builds its own Scheduler, so scenarios share no state."""
    if len(argv) < 4:
        print(main.__doc__, file=sys.stderr)
        return 2
    out_dir, jobs = Path(argv[1]), max(1, int(argv[2]))
    scenarios = [Scenario.from_json(Path(p).read_text()) for p in argv[3:]]
    _stub_kernels()
    import sglang.srt.managers.io_struct  # noqa: F401 - imported once, before the forks
    import sglang.srt.managers.scheduler  # noqa: F401
    import sglang.srt.mem_cache.radix_cache  # noqa: F401
    import sglang.srt.sampling.sampling_params  # noqa: F401

    running: dict[int, str] = {}
    failed: list[str] = []

    def reap() -> None:
        pid, status = os.wait()
        name = running.pop(pid)
        if status != 0:
            failed.append(name)

    for sc in scenarios:
        while len(running) >= jobs:
            reap()
        pid = os.fork()
        if pid == 0:
            _child(sc, out_dir)
        running[pid] = sc.name
    while running:
        reap()
    for name in failed:
        if not (out_dir / f"{name}.error").exists():
            (out_dir / f"{name}.error").write_text("the child process died without a traceback\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
