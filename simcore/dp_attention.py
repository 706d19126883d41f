"""DP attention inside one SGLang server (``--enable-dp-attention --dp-size D``): D attention-DP ranks, one step.

With DP attention SGLang runs D schedulers in one server, one per attention-DP rank (sglang 0.5.9
``managers/data_parallel_controller.py``: ``launch_dp_attention_schedulers``; ``compute_dp_attention_world_info``
gives each TP rank its ``dp_rank``). Each is a full ``Scheduler`` with its own waiting queue, radix cache and KV
pool; attention runs data-parallel (each rank attends over its own requests with an attention TP group of
``tp / D`` GPUs), the MLP/MoE layers run over the whole TP group on the tokens of every rank. What this module
models:

- **Dispatch** (`DataParallelDispatcher`): the ``DataParallelController`` sends each request to one rank by
  ``--load-balance-method``: ``round_robin`` (the default: 0.5.9's ``auto`` resolves to it outside PD prefill,
  ``server_args.py::_handle_load_balance_method``; 0.5.3/0.5.6 default to it), ``total_requests`` (the rank with
  the fewest requests in its last reported load, then +1 as a heuristic: ``DPBudget.dispatch``),
  ``total_tokens`` (fewest tokens, ties by requests). Loads are reported with every output batch a rank streams
  (``scheduler_output_processor_mixin.py`` puts ``get_load()`` in each ``BatchStrOutput``, the tokenizer manager
  forwards it as ``WatchLoadUpdateReq``): running + waiting requests, used KV tokens + waiting tokens.
- **Per-rank schedulers** (`rank_settings`): each rank is a `simcore.server.Server` with the per-rank pool
  (`simcore.memory.size_kv_pool` sizes it for an attention TP group of tp/D), ``chunked_prefill_size // D`` and
  ``schedule_conservativeness × 0.3`` (``server_args.py::_handle_data_parallelism``), the CUDA-graph sizes that are
  multiples of the attention TP size (``cuda_graph_runner.py::get_batch_sizes_to_capture``).
- **Lockstep** (`DpAttentionServer`): every scheduling pass all-gathers each rank's token count
  (``scheduler_dp_attn_mixin.py::prepare_mlp_sync_batch_raw``); if any rank has work, the ranks without a batch
  run an idle batch (``get_idle_batch``) so every MLP/MoE collective has all ranks. So the ranks launch one
  forward together, and it ends for all at once.
- **Step price** (`DpAttentionLatency`): attention is priced per rank on its own batch at the attention TP size
  (the slowest rank sets the time), the MLP/MoE on the tokens gathered from every rank at the full TP size, plus
  the DP gather/scatter: in ``MAX_LEN`` padding (CUDA-graph decode, or decode whose sum is over half of max × D)
  an all-gather and a reduce-scatter of max × D tokens per layer (one all-reduce of that buffer), in ``SUM_LEN``
  (any extend in the batch) an all-reduce to gather and one after the MLP of the summed tokens
  (``layers/dp_attention.py::DpPaddingMode``, ``layers/communicator.py``). A decode step runs as a CUDA graph only
  when every rank is decode or idle (``MLPSyncBatchInfo.all_gather``: ``can_cuda_graph`` is the min over ranks),
  padded to the captured size of the largest rank's batch (``cuda_graph_runner.py::can_run`` / ``replay_prepare``
  with ``require_mlp_tp_gather``).
- **Speculative decoding** (`DpSpeculativeLatency`, `DpAttentionServer._schedule_speculative`): with EAGLE /
  EAGLE3 / NEXTN no pass mixes prefill and decode across ranks (``scheduler.py::get_next_batch_to_run`` syncs
  right after ``get_new_batch_prefill``); a decode pass is every rank's EAGLE iteration, each of its forwards (draft
  steps, verify, draft extend) a DP-attention forward over ``bs × tokens-per-request`` rows per rank, idle ranks in
  ``ForwardMode.IDLE`` (``eagle_worker.py::forward_batch_generation``).
"""
from __future__ import annotations

import heapq
from collections import deque
from typing import Any, Callable, Protocol, Sequence

from simcore._simpy import simpy

from simcore.errors import UserError
from simcore.perf.base import BatchShape, StepTime, has_pure_step_time
from simcore.perf.step import MEMO_LIMIT
from simcore.request import RequestSpec
from simcore.results import RequestRecord, StepRecord
from simcore.rng import LazyGenerator
from simcore.server import Server, late_event, next_graph_bs
from simcore.server_state import Req
from simcore.settings import ServerSettings, resolve
from simcore.speculative import SpeculativeDecoding

LOAD_BALANCE_METHODS = ("round_robin", "total_requests", "total_tokens")
# server_args.py::_handle_data_parallelism: "self.schedule_conservativeness = self.schedule_conservativeness * 0.3"
DP_ATTENTION_CONSERVATIVENESS = 0.3


def attn_tp_size(settings: ServerSettings) -> int:
    """The attention TP group of each rank: ``tp / dp`` with DP attention (``compute_dp_attention_world_info``)."""
    return settings.tp_size // settings.dp_attention_ranks


def rank_settings(settings: ServerSettings) -> ServerSettings:
    """The scheduler settings of one attention-DP rank (``server_args.py::_handle_data_parallelism``, after the
    GPU memory settings were derived from the undivided values): chunked prefill ``// dp``, conservativeness
    ``× 0.3``, CUDA graphs at the captured sizes that are multiples of the attention TP size. The rank itself is a
    plain scheduler (``dp_size`` 1) with ``--max-running-requests // dp`` request slots when given
    (``model_runner.py``: ``server_args.max_running_requests // self.dp_size``), else the pool's own bound."""
    dp = settings.dp_attention_ranks
    if dp == 1:
        return settings
    # speculation's overrides first (resolve is idempotent): ``_handle_speculative_decoding`` runs after
    # ``_handle_data_parallelism`` and sets max running 48, which model_runner.py then divides by dp
    s = (resolve(settings, None) if settings.chunked_prefill_size is None or settings.speculative_algorithm
         is not None else settings)
    given = s.max_running_requests
    upd: dict[str, Any] = {"enable_dp_attention": False, "dp_size": 1,
                           "max_running_requests": None if given is None else max(1, given // dp),
                           "schedule_conservativeness": s.schedule_conservativeness * DP_ATTENTION_CONSERVATIVENESS}
    if s.chunking_enabled:
        upd["chunked_prefill_size"] = max(s.page_size, s.chunked_prefill_size // dp)  # type: ignore[operator]
    atp = s.tp_size // dp
    if s.cuda_graph_bs and atp > 1:
        kept = tuple(b for b in s.cuda_graph_bs if b % atp == 0)
        upd["cuda_graph_bs"] = kept or (max(s.cuda_graph_bs) // atp * atp or atp,)
    return s.model_copy(update=upd)


class DataParallelDispatcher:
    """``DataParallelController``'s choice of rank per request (module docstring). ``update_load`` is a rank's
    reported load; ``dispatch()`` picks the rank for the next request."""

    def __init__(self, method: str, dp_size: int) -> None:
        if method not in LOAD_BALANCE_METHODS:
            raise UserError("--load-balance-method", f"unknown method {method!r}",
                            f"use one of {', '.join(LOAD_BALANCE_METHODS)}")
        self.method = method
        self.dp_size = dp_size
        self.round_robin_counter = 0
        self.total_requests = [0] * dp_size
        self.total_tokens = [0] * dp_size

    def update_load(self, rank: int, num_reqs: int, num_tokens: int) -> None:
        """``DPBudget.update_budget``: the rank's running + waiting requests and tokens."""
        self.total_requests[rank] = num_reqs
        self.total_tokens[rank] = num_tokens

    def dispatch(self) -> int:
        if self.method == "round_robin":
            r = self.round_robin_counter
            self.round_robin_counter = (r + 1) % self.dp_size
            return r
        if self.method == "total_requests":
            r = self.total_requests.index(min(self.total_requests))
        else:
            r = min(range(self.dp_size), key=lambda i: (self.total_tokens[i], self.total_requests[i]))
        self.total_requests[r] += 1  # "Increment the load of that worker by one as a heuristic"
        return r


class RankStepModel(Protocol):
    """Prices one lockstep forward from every rank's batch (None: the rank runs an idle batch)."""

    name: str
    profile_hash: str

    def step_time_ranks(self, shapes: Sequence[BatchShape | None]) -> StepTime: ...


def _ceil_align(n: int, a: int) -> int:
    return -(-n // a) * a


class DpAttentionLatency:
    """The step price of a DP-attention server (module docstring): ``attention`` is a
    `simcore.perf.step.StepLatencyModel` at the attention TP size, ``mlp`` one at the whole TP size (with the
    layout's EP / DeepEP costs); ``graph_bs`` the captured decode sizes (empty: no CUDA graphs)."""

    pure_step_time = True

    def __init__(self, attention: Any, mlp: Any, dp_size: int, graph_bs: Sequence[int]) -> None:
        self.attention = attention
        self.mlp = mlp
        self.dp = dp_size
        self.attn_tp = attention.tp
        self.tp = mlp.tp
        self.graph_bs = tuple(graph_bs)
        self.profile = mlp.profile
        self.frontend_s = mlp.frontend_s
        self.name = f"{mlp.name}:dp{dp_size}"
        self.profile_hash = mlp.profile_hash
        # the DP gather/scatter runs over the whole TP group: ParallelCosts.tp_allreduce_s (its allreduce_s narrows
        # an all-reduce to the attention group under DP attention, which is the attention-side one)
        costs = mlp.costs
        self._tp_allreduce_s = getattr(costs, "tp_allreduce_s", costs.allreduce_s)
        self._k_comm = self.profile.op_scale.get("communication", 1.0)
        # Memoization, as StepLatencyModel's: whole steps by every rank's shape (a repeated lockstep costs one
        # look-up), and for a new one the parts that depend on token counts alone (the DP collectives here by
        # gathered tokens, logit rows, CUDA graph and padding mode; the MLP half and each rank's attention
        # projections in `StepLatencyModel`), so only the attention kernels (per-step KV sums) are priced afresh
        self._memo: dict[tuple[BatchShape | None, ...], StepTime] = {}
        self._comm_memo: dict[tuple[int, int, bool, bool], float] = {}

    def per_request_tokens(self, k: int, captured_bs: Sequence[int] | None = None) -> "DpAttentionLatency":
        """The same model with its CUDA graphs captured for ``k`` tokens per request (``num_tokens_per_bs``: a
        speculative verify or draft forward; cuda_graph_runner.py captures ``bs × k`` tokens per size). Given the
        server's ``captured_bs`` (``--cuda-graph-bs``, before any filter), the sizes are those whose ``bs × k``
        tokens are a multiple of the attention TP size (``get_batch_sizes_to_capture``: "Model input token count =
        bs * num_tokens_per_bs; must be a multiple of attn_tp_size"); else this model's sizes."""
        if captured_bs is None:
            if k == 1:
                return self
            return DpAttentionLatency(self.attention, self.mlp, self.dp, tuple(b * k for b in self.graph_bs))
        kept = tuple(sorted({b * k for b in captured_bs if b * k % self.attn_tp == 0}))
        return DpAttentionLatency(self.attention, self.mlp, self.dp, kept)

    def _pad(self, bs: int) -> int | None:
        return next_graph_bs(self.graph_bs, bs)

    def _comm_s(self, gathered: int, logits: int, graph: bool, max_len: bool) -> float:
        """The DP gather/scatter of every layer and the logits gather over the TP group, uncalibrated."""
        key = (gathered, logits, graph, max_len)
        hit = self._comm_memo.get(key)
        if hit is not None:
            return hit
        mlp = self.mlp
        hidden_bytes = gathered * mlp.shapes.hidden * 2.0
        comm = mlp.shapes.num_layers * (1 if max_len else 2) * self._tp_allreduce_s(hidden_bytes, self.tp, graph)
        if self.tp > 1 and logits:  # the vocab-parallel logits gathered over the TP group
            comm += self._tp_allreduce_s(logits * mlp.model.vocab_size * 2.0 / self.tp, self.tp, graph)
        if len(self._comm_memo) >= MEMO_LIMIT:  # bounded in a long live run, as the whole-step memo
            self._comm_memo.clear()
        self._comm_memo[key] = comm
        return comm

    def step_time_ranks(self, shapes: Sequence[BatchShape | None]) -> StepTime:
        key = tuple(shapes)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        out = self._compute(shapes)
        if len(self._memo) >= MEMO_LIMIT:
            self._memo.clear()
        self._memo[key] = out
        return out

    def _compute(self, shapes: Sequence[BatchShape | None]) -> StepTime:
        mlp = self.mlp
        real = [s for s in shapes if s is not None and s.mode != "idle"]
        cpu = (max(mlp.host_s(len(s.extend_lens) + s.num_decode, s.num_extend_tokens) for s in real) if real
               else self.profile.cpu_base_s)
        if not real:
            return StepTime(0.0, cpu)
        extend_in_batch = any(s.extend_lens for s in real)
        graph_bs = None if extend_in_batch else self._pad(max(s.num_decode for s in real))
        graph = graph_bs is not None
        atp = self.attn_tp
        tokens = []  # per rank, aligned to the attention TP size (ForwardBatch.prepare_mlp_sync_batch)
        attn = 0.0
        for s in shapes:
            if s is None or s.mode == "idle":
                # an idle rank: nothing to attend; under a CUDA graph it replays the padded graph on dummy rows
                n = graph_bs or 0
                tokens.append(_ceil_align(n, atp))
                continue
            bs = graph_bs if graph else s.num_decode
            tokens.append(_ceil_align(s.num_extend_tokens + bs, atp))
            a = self.attention.attention_side_s(s, bs, graph)
            if a > attn:
                attn = a
        mx, total = max(tokens), sum(tokens)
        max_len = graph or (not extend_in_batch and total * 2 > mx * self.dp)  # DpPaddingMode
        gathered = mx * self.dp if max_len else total
        logits = sum(len(s.extend_lens) + (graph_bs if graph else s.num_decode) for s in real)
        gpu = attn + mlp.mlp_side_s(gathered, logits, graph) + self._k_comm * self._comm_s(gathered, logits, graph, max_len)
        n_req = max(len(s.extend_lens) + s.num_decode for s in real)
        return mlp.finish_step(gpu, cpu, graph, extend_in_batch, n_req)


class RankLocalLatency:
    """A model every rank runs on its own inside its attention TP group, with no collective across the ranks (the
    EAGLE3 draft under DP attention: 0.5.9 ``eagle_worker.py::EAGLEWorker.__init__`` builds it inside
    ``draft_tp_context(get_attention_tp_group())``): the lockstep waits for the slowest rank. ``graph_bs`` are the
    captured sizes in rows (decode rows padded to the smallest one at or above them, per rank)."""

    pure_step_time = True

    def __init__(self, latency: Any, graph_bs: Sequence[int] = ()) -> None:
        self.latency = latency
        self.graph_bs = tuple(graph_bs)
        self.name = f"{latency.name}:rank-local"
        self.profile_hash = latency.profile_hash

    def per_request_tokens(self, k: int, captured_bs: Sequence[int] | None = None) -> "RankLocalLatency":
        """The same model with CUDA graphs captured for ``k`` tokens per request (``num_tokens_per_bs``), from
        ``captured_bs`` when given (as `DpAttentionLatency.per_request_tokens`), else from this model's sizes."""
        if captured_bs is None:
            return RankLocalLatency(self.latency, tuple(b * k for b in self.graph_bs))
        tp = self.latency.tp
        return RankLocalLatency(self.latency, tuple(sorted({b * k for b in captured_bs if b * k % tp == 0})))

    def step_time_ranks(self, shapes: Sequence[BatchShape | None]) -> StepTime:
        gpu = cpu = 0.0
        g = self.graph_bs
        for s in shapes:
            if s is None or s.mode == "idle":
                continue
            if not s.extend_lens and g and s.num_decode <= g[-1]:
                s = BatchShape((), (), s.num_decode, s.decode_sum_kv, (), next_graph_bs(g, s.num_decode))
            st = self.latency.step_time(s)
            gpu, cpu = max(gpu, st.gpu_s), max(cpu, st.cpu_s)
        return StepTime(gpu, cpu)


class DpSpeculativeLatency:
    """The lockstep price of a speculative DP-attention server (EAGLE / EAGLE3 / NEXTN), from every rank's batch.

    Every forward of SGLang's EAGLE worker (0.5.9 ``speculative/eagle_worker.py::forward_batch_generation``) is a
    DP-attention forward of its own: each rank attends over its own rows, the MLP/MoE runs on the rows gathered
    from every rank (`DpAttentionLatency`, the token counts scaled per forward by
    ``spec_info.get_spec_adjusted_global_num_tokens``: ``num_draft_tokens`` per request for the verify
    (``EagleVerifyInput``), ``topk`` for a draft step and ``num_steps + 1`` for the draft extend
    (``EagleDraftInput.num_tokens_per_req``)). A rank with no batch runs each of them as ``ForwardMode.IDLE``
    (``draft`` → ``_draft_preprocess_idle``, ``verify`` with IDLE, ``forward_draft_extend_after_decode``, always
    called under DP attention), so it pays its share of every MoE pass. One lockstep iteration:

    - **decode** (no rank prefills): ``(num_steps − 1)`` draft forwards over ``bs_i × topk`` rows per rank, one
      target verify over ``bs_i × num_draft_tokens`` rows, one draft extend over ``bs_i × (num_steps + 1)`` rows,
      each rank's rows attending over its own KV as in `SpeculativeConfig.iteration_time`; CUDA graphs captured
      per forward with that many tokens per request and replayed at the largest rank's batch
      (``cuda_graph_runner.py::can_run``: ``max(global_num_tokens) // num_tokens_per_bs`` for EAGLE);
    - **prefill** (some rank prefills; the others idle, `DpAttentionServer._schedule_speculative`): the target's
      extend then the draft's extend over the same tokens (``forward_target_extend``, ``forward_draft_extend``).

    ``target`` is the target's `DpAttentionLatency`; ``draft`` the draft's (EAGLE / NEXTN: its layer runs DP
    attention with the MoE over the gathered tokens like the target) or a `RankLocalLatency` (EAGLE3). The host
    pass is the verify's (extend: the target's), as for one server."""

    pure_step_time = False  # the server draws accepted lengths per step (no decode runs)

    def __init__(self, config: Any, target: Any, draft: Any, captured_bs: Sequence[int] | None = None) -> None:
        self.config = config
        self.target = target
        self.draft = draft
        self.verify = target.per_request_tokens(config.num_draft_tokens, captured_bs)
        self.draft_step = draft.per_request_tokens(config.eagle_topk, captured_bs)
        self.draft_extend = draft.per_request_tokens(config.num_steps + 1, captured_bs)
        self.name = f"{target.name}+{config.algorithm.lower()}"
        self.profile_hash = target.profile_hash
        self.frontend_s = float(getattr(target, "frontend_s", 0.0))

    def step_time_ranks(self, shapes: Sequence[BatchShape | None]) -> StepTime:
        if any(s is not None and s.extend_lens for s in shapes):
            base = self.target.step_time_ranks(shapes)
            ext = self.draft.step_time_ranks([None if s is None else BatchShape(extend_lens=s.extend_lens,
                                                                                prefix_lens=s.prefix_lens)
                                              for s in shapes])
            return StepTime(base.gpu_s + ext.gpu_s, base.cpu_s)
        c = self.config
        draft_rows: list[BatchShape | None] = []
        verify_rows: list[BatchShape | None] = []
        extend_rows: list[BatchShape | None] = []
        for s in shapes:
            if s is None or not s.num_decode:
                draft_rows.append(None)
                verify_rows.append(None)
                extend_rows.append(None)
                continue
            bs, sum_kv = s.num_decode, s.decode_sum_kv
            rows = bs * c.eagle_topk
            draft_rows.append(BatchShape(num_decode=rows, decode_sum_kv=rows * max(1, sum_kv // bs)))
            verify_rows.append(BatchShape(num_decode=bs * c.num_draft_tokens, decode_sum_kv=sum_kv))
            extend_rows.append(BatchShape(num_decode=bs * (c.num_steps + 1), decode_sum_kv=sum_kv))
        verify = self.verify.step_time_ranks(verify_rows)
        gpu = verify.gpu_s + self.draft_extend.step_time_ranks(extend_rows).gpu_s
        if c.num_steps > 1:
            gpu += (c.num_steps - 1) * self.draft_step.step_time_ranks(draft_rows).gpu_s
        return StepTime(gpu, verify.cpu_s)


class PerRankLatency:
    """A one-server `LatencyModel` (or `SpeculativeDecoding`) for one rank, as a `RankStepModel` for a one-rank
    `DpAttentionServer`: the step is that rank's own (tests: a one-rank lockstep server, speculative or not, must
    be the plain server). Pure exactly when the wrapped model is."""

    def __init__(self, latency: Any) -> None:
        self.latency = latency
        self.pure_step_time = has_pure_step_time(latency)
        self.name = latency.name
        self.profile_hash = latency.profile_hash
        self.frontend_s = float(getattr(latency, "frontend_s", 0.0))

    def step_time_ranks(self, shapes: Sequence[BatchShape | None]) -> StepTime:
        (s,) = shapes
        return self.latency.step_time(s if s is not None else BatchShape())


class BalancedRanks:
    """A `LatencyModel` for one rank seen alone (the live shadow keeps one twin per DP rank and a twin cannot see
    the other ranks' batches): every forward priced as if each of the D ranks ran a batch like this one."""

    pure_step_time = True

    def __init__(self, latency: DpAttentionLatency) -> None:
        self.latency = latency
        self.name = latency.name
        self.profile_hash = latency.profile_hash
        self.frontend_s = latency.frontend_s

    def step_time(self, shape: BatchShape) -> StepTime:
        return self.latency.step_time_ranks((shape,) * self.latency.dp)


class BalancedSpeculative(SpeculativeDecoding):
    """A speculative rank seen alone (a live shadow's twin of one DP rank, cf. `BalancedRanks`): the rank's
    `SpeculativeDecoding` (config, acceptance, seeded generator: shared, so the draws continue) with every forward
    priced by a `DpSpeculativeLatency` as if each of the D ranks ran a batch like this one (draft steps, verify
    and draft extend as DP-attention forwards). Build with `balanced_speculative`."""

    dp_latency: "DpSpeculativeLatency"

    def step_time(self, shape: BatchShape) -> StepTime:
        lat = self.dp_latency
        return lat.step_time_ranks((shape,) * lat.target.dp)


def balanced_speculative(speculative: SpeculativeDecoding, latency: "DpSpeculativeLatency") -> BalancedSpeculative:
    """`BalancedSpeculative` of a rank's ``speculative`` priced by ``latency``."""
    out = BalancedSpeculative(speculative.config, latency, latency.draft, speculative.acceptance)
    out.rng = speculative.rng
    out.dp_latency = latency
    out.name = f"{latency.name}:balanced"
    out.profile_hash = latency.profile_hash
    out.frontend_s = latency.frontend_s
    return out


class DpAttentionServer:
    """One SGLang server with D attention-DP ranks stepping in lockstep (module docstring).

    The same surface as `simcore.server.Server` for workloads and `simcore.engine.simulate`: ``submit(spec,
    at_s=None) -> simpy.Event``, ``records`` (every rank's, in finish order), ``steps``, ``kv_peak_usage``,
    ``num_retractions``, ``itl_vals``/``itl_w``, ``reqs``, ``idle``, ``pending``. ``kv_capacity_tokens`` and
    ``max_running_requests`` are per rank (what `simcore.memory.size_kv_pool` returns for a DP-attention server).
    ``ranks[i]`` is rank i's `Server` (no SimPy process of its own: this server's loop drives them);
    ``dispatched[rid]`` the rank a request went to.
    """

    def __init__(self, env: simpy.Environment, settings: ServerSettings, kv_capacity_tokens: int,
                 latency: RankStepModel, *, key_unit: int = 1, rng: Any = None,
                 observer: Callable[[StepRecord], None] | None = None,
                 on_finish: Callable[[RequestRecord], None] | None = None,
                 max_running_requests: int | None = None, context_len: int | None = None,
                 tokenize_s: float = 0.0, detokenize_s: float = 0.0, fast: bool = True,
                 signal_finishes: bool = True, speculative: Any = None, **_ignored: Any) -> None:
        if (settings.speculative_algorithm is None) != (speculative is None):
            raise ValueError("a speculative DP-attention server needs both --speculative-algorithm in its settings "
                             "and its SpeculativeDecoding (simcore.speculative.build_speculative), a plain one neither")
        if not hasattr(latency, "step_time_ranks"):
            raise ValueError("a DP-attention server prices its steps with a RankStepModel (step_time_ranks), e.g. "
                             "simcore.dp_attention.DpAttentionLatency")
        if settings.chunked_prefill_size is None or settings.speculative_algorithm is not None:
            settings = resolve(settings, None)  # (idempotent; applies what speculation forces: no overlap)
        self.env = env
        # speculative decoding (simcore.speculative): one SpeculativeDecoding for every rank (its seeded draws,
        # rank after rank, and the run's accept-length counters); ``latency`` prices the lockstep iterations
        # (e.g. `DpSpeculativeLatency`)
        self.spec = speculative
        self.settings = settings
        self.latency = latency
        self.observer = observer
        self.fast = fast
        self.signal_finishes = signal_finishes
        self.tokenize_s = tokenize_s
        self.tok_req_s = settings.tokenizer_s_per_request
        self.tok_tok_s = settings.tokenizer_s_per_token
        self.tok_free = env.now
        dp = settings.dp_attention_ranks
        self.dispatcher = DataParallelDispatcher(settings.load_balance_method, dp)
        per_rank = rank_settings(settings).model_copy(update={"tokenizer_s_per_request": 0.0,
                                                              "tokenizer_s_per_token": 0.0})
        rng = rng if rng is not None else LazyGenerator(0)
        self.records: list[RequestRecord] = []
        self.itl_vals: list[float] = []
        self.itl_w: list[int] = []
        self.ranks: list[Server] = []
        for _ in range(dp):
            rk = Server(env, per_rank, kv_capacity_tokens, _NoPricing(speculative), key_unit=key_unit, rng=rng,
                        on_finish=on_finish, max_running_requests=max_running_requests, context_len=context_len,
                        detokenize_s=detokenize_s, fast=fast, signal_finishes=signal_finishes,
                        speculative=speculative, _start=False)
            rk.decode_runs = False  # a run prices one rank's steps alone; lockstep prices all ranks together
            rk.records, rk.itl_vals, rk.itl_w = self.records, self.itl_vals, self.itl_w
            self.ranks.append(rk)
        self.overlap = not settings.disable_overlap_schedule
        self.pending: list[tuple[float, int, RequestSpec, simpy.Event]] = []  # not yet at the controller
        self.ahead: deque[float] = deque()
        self.dispatched: dict[str, int] = {}
        self.pending_rids: set[str] = set()
        self.seq = 0
        self.steps = 0
        self.t = env.now
        self.gpu_free = env.now
        self.inflight_end: float | None = None  # overlap: GPU end of the forward in flight
        self.idle = False
        self._wake: simpy.Event | None = None
        self.proc = env.process(self._run())

    # ---- the Server surface ---------------------------------------------------------------------------------
    @property
    def reqs(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for rk in self.ranks:
            out.update(rk.reqs)
        for _, _, spec, _ in self.pending:
            out[spec.rid] = spec
        return out

    @property
    def kv_peak_usage(self) -> float:
        return max(rk.kv_peak_usage for rk in self.ranks)

    @property
    def num_retractions(self) -> int:
        return sum(rk.num_retractions for rk in self.ranks)

    @property
    def num_running(self) -> int:
        return sum(rk.num_running for rk in self.ranks)

    @property
    def num_waiting(self) -> int:
        return sum(rk.num_waiting for rk in self.ranks)

    def submit(self, spec: RequestSpec, at_s: float | None = None) -> simpy.Event:
        """As `Server.submit`: the request reaches the data-parallel controller at ``arrival_s + tokenize_s``
        (after the serial tokenizer stage), which hands it to a rank at the first pass at or after that time."""
        if spec.rid in self.pending_rids or any(spec.rid in rk.reqs for rk in self.ranks):
            raise ValueError(f"duplicate request id {spec.rid!r}")
        self.pending_rids.add(spec.rid)
        ev = self.env.event()
        ready = spec.arrival_s
        if self.tok_req_s > 0 or self.tok_tok_s > 0:
            start = ready if ready > self.tok_free else self.tok_free
            ready = self.tok_free = start + self.tok_req_s + self.tok_tok_s * spec.input_len
        now = self.env.now
        if at_s is not None and at_s > now:
            if self.ahead and at_s < self.ahead[-1]:
                raise ValueError("requests submitted ahead of time must come in submission-time order")
            self.ahead.append(at_s)
            now = at_s
        self.seq += 1
        heapq.heappush(self.pending, (max(ready + self.tokenize_s, now), self.seq, spec, ev))
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()
        return ev

    # ---- the loop -------------------------------------------------------------------------------------------
    def _late(self, delay: float) -> simpy.Event:
        return late_event(self.env, delay)

    def _dispatch(self, t: float) -> None:
        """The controller: every request that reached it by ``t``, in arrival order, to the rank it picks."""
        pend = self.pending
        while pend and pend[0][0] <= t:
            at, _, spec, ev = heapq.heappop(pend)
            self.pending_rids.discard(spec.rid)
            i = self.dispatcher.dispatch()
            rk = self.ranks[i]
            self.dispatched[spec.rid] = i
            req = Req.from_spec(spec, rk.max_req_len, rk.launch_counter)
            if spec.input_len >= rk.max_req_len - 5:  # Server.submit: SGLang's max_req_input_len
                req.abort_for_length(rk.max_req_len - 5)
            rk.reqs[spec.rid] = req
            rk.events[spec.rid] = ev
            rk._push_pending(req, at)

    def _report_load(self, i: int, finished: int) -> None:
        """A rank streamed outputs: its ``get_load()`` (``scheduler_metrics_mixin.py``) reaches the controller's
        budget: ``len(running_batch.reqs)`` + waiting requests, where the requests this batch finished still count
        (the batch is filtered at the next pass), and used KV tokens (theirs released) + the waiting prompts."""
        rk = self.ranks[i]
        waiting = sum(r.input_len + r.out_len_base for r in rk.waiting)
        self.dispatcher.update_load(i, rk.num_running + finished + len(rk.waiting), rk.kv.used + waiting)

    def _schedule_speculative(self, t: float) -> list[Any]:
        """One pass of every rank's ``get_next_batch_to_run`` with speculation and DP attention (0.5.9
        ``scheduler.py``: "This branch makes sure prefill and decode batches will not be mixed when spec and
        dp-attn is enabled"): the ranks sync right after ``get_new_batch_prefill`` (``maybe_prepare_mlp_sync_batch``)
        and, when any rank has a prefill batch, the others run an idle batch (``get_idle_batch``) instead of
        decoding; only when no rank prefills does every rank with running requests run its speculative decode
        iteration (`Server._decode_spec`). The prefill half is `Server._schedule`'s (no overlap under
        speculation, so no EOS zombies)."""
        ranks = self.ranks
        prefills: list[Any] = []
        for rk in ranks:
            ch = rk.chunked
            if ch is not None:  # stash_chunked_request
                ch.node = rk.kv.cache_unfinished(ch.key, ch.extend_end, ch.node, t)
            full = rk.batch_is_full and not rk.preempt
            busy = rk.decoding or rk.awaiting_result
            prefills.append(rk._prefill(t, []) if ch is not None or not (busy and (full or not rk.waiting))
                            else None)
        if any(b is not None for b in prefills):
            return prefills
        return [rk._decode_spec(t) if rk.decoding else None for rk in ranks]

    def _run(self):  # noqa: C901 - Server._run's loop for D ranks at once
        env = self.env
        ranks = self.ranks
        balance = self.dispatcher.method != "round_robin"
        yield self._late(self.t - env.now)
        while True:
            t = self.t
            for i, rk in enumerate(ranks):
                due = rk.due
                if due is not None:
                    rk._apply(due, t)
                    rk.due = None
                    if balance and (due.n_emit or due.prefill_done):
                        self._report_load(i, len(due.finishers))
            self._dispatch(t)
            for rk in ranks:
                pend = rk.pending
                poll = rk.recv_interval == 1 or rk._recv_due()
                while poll and pend and pend[0][0] <= t:
                    req = heapq.heappop(pend)[2]
                    req.wait_entry_s = req.ingest_s
                    rk.waiting.append(req)
            batches = [rk._schedule(t) for rk in ranks] if self.spec is None else self._schedule_speculative(t)
            if any(b is not None for b in batches):
                st = self.latency.step_time_ranks([b.shape if b is not None else None for b in batches])
                gpu, cpu = st.gpu_s, st.cpu_s
                self.steps += 1
                if self.overlap:
                    launch = max(t + cpu, self.gpu_free)
                    end = self.gpu_free = launch + gpu
                    prev_end = self.inflight_end
                    for rk, b in zip(ranks, batches):
                        rk.last_kind = b.kind if b is not None else None
                        prev = rk.inflight
                        rk.inflight = b
                        if b is not None:
                            b.gpu_end = end
                        if prev is not None:
                            prev.emit_s = prev.gpu_end + cpu  # results reach the client after this CPU pass
                        rk.due = prev
                        rk.gpu_free = end
                    self.inflight_end = end
                    nxt = max(t + cpu, prev_end) if prev_end is not None else t + cpu
                else:
                    launch = t + cpu
                    end = self.gpu_free = launch + gpu
                    for rk, b in zip(ranks, batches):
                        rk.last_kind = b.kind if b is not None else None
                        if b is not None:
                            b.gpu_end = b.emit_s = end
                        rk.due = b
                        rk.gpu_free = end
                    nxt = end
                for rk in ranks:
                    used = rk.kv.used
                    if used > rk.kv_peak_used:
                        rk.kv_peak_used = used
                if self.observer is not None:
                    for rk, b in zip(ranks, batches):
                        if b is not None:
                            self.observer(StepRecord(launch, end, b.shape, rk.num_running, len(rk.waiting),
                                                     rk.kv.used, rk.kv.capacity, rk.ratio.current, b.retracted))
                self.t = nxt
            elif self.inflight_end is not None:  # overlap: nothing new anywhere; process the last results
                for rk in ranks:
                    rk.last_kind = None
                    if rk.inflight is not None:
                        rk.due = rk.inflight
                        rk.inflight = None
                        rk.due.emit_s = max(t, rk.due.gpu_end)
                self.t = max(t, self.inflight_end)
                self.inflight_end = None
            else:
                for rk in ranks:
                    rk.ratio.reset()  # Scheduler.on_idle()
                    rk.last_kind = None
                    rk.recv_counter = rk.recv_interval
                pend = self.pending
                ahead = self.ahead
                while ahead and ahead[0] <= t:
                    ahead.popleft()
                submitted = len(pend) > len(ahead)
                waiting = next((rk for rk in ranks if rk.waiting), None)
                rank_pending = any(rk.pending for rk in ranks)
                if not pend and waiting is None and not rank_pending:
                    self.idle = True
                    self._wake = env.event()
                    yield self._wake
                    self._wake = None
                    self.idle = False
                    submitted = True
                if submitted or (pend and waiting is None):
                    self.t = max(t, pend[0][0], env.now)
                elif waiting is not None:
                    # nothing runs anywhere, nothing in flight, yet requests wait: they can never fit
                    waiting._abort(waiting.waiting.pop(0), t)
                    continue
                else:
                    self.t = max(t, min(rk.pending[0][0] for rk in ranks if rk.pending))
                    continue
            signal = self.signal_finishes and any(rk.due is not None and rk.due.finishers for rk in ranks)
            if not self.fast or self.t >= env.peek() or signal or self.t < env.now:
                yield self._late(self.t - env.now)


class _NoPricing:
    """The latency slot of a rank `Server`: its steps are priced by the `DpAttentionServer` (never called).
    ``base`` is the server's `SpeculativeDecoding` when speculative (the rank draws its accepted lengths from it;
    `Server` wants its latency to be that object or a wrapper of it)."""

    name = "dp-rank"
    profile_hash = "none"
    pure_step_time = False

    def __init__(self, base: Any = None) -> None:
        self.base = base

    def step_time(self, shape: BatchShape) -> StepTime:
        raise RuntimeError("a DP-attention rank's steps are priced by its DpAttentionServer")


def build_dp_attention_latency(model: Any, gpu: Any, settings: ServerSettings, precision: str, *,
                               backend: str = "auto", profile: Any = None) -> DpAttentionLatency:
    """`DpAttentionLatency` for ``model`` on ``gpu`` with ``settings`` (DP attention on): the attention half at
    ``tp / dp`` (plain TP inside the attention group), the MLP half at ``tp`` with the server's EP / DeepEP layout."""
    from simcore.perf import ParallelLayout, build_latency_model

    s = resolve(settings, gpu.memory_bytes)
    atp = attn_tp_size(s)
    attention = build_latency_model(model, gpu, atp, precision, backend=backend, profile=profile,
                                    kv_cache_dtype=s.kv_cache_dtype,
                                    parallel=ParallelLayout(tp_size=atp, gpus_per_node=gpu.gpus_per_node))
    mlp = build_latency_model(model, gpu, s.tp_size, precision, backend=backend, profile=profile,
                              kv_cache_dtype=s.kv_cache_dtype, parallel=ParallelLayout.from_settings(s, gpu))
    graphs = () if s.disable_cuda_graph else rank_settings(s).cuda_graph_bs or ()
    return DpAttentionLatency(attention, mlp, s.dp_attention_ranks, graphs)


def build_dp_speculative_latency(speculative: Any, model: Any, gpu: Any, settings: ServerSettings, precision: str,
                                 *, backend: str = "auto", profile: Any = None) -> DpSpeculativeLatency:
    """`DpSpeculativeLatency` of a speculative DP-attention server: the target's `DpAttentionLatency`, the
    draft model (`simcore.speculative.draft_model_spec`) as a DP-attention model too (EAGLE / NEXTN), or at the
    attention TP size on each rank alone (EAGLE3, `RankLocalLatency`). The draft's MoE has the target's layout
    (EP, DeepEP): ``--speculative-moe-a2a-backend`` defaults to the target's (0.5.9 ``layers/moe/utils.py``:
    ``SPECULATIVE_MOE_A2A_BACKEND`` falls back to ``MOE_A2A_BACKEND``). ``speculative`` gives the config."""
    from simcore.perf import ParallelLayout, build_latency_model
    from simcore.speculative import draft_model_spec

    s = resolve(settings, gpu.memory_bytes)
    config = speculative.config
    target = build_dp_attention_latency(model, gpu, s, precision, backend=backend, profile=profile)
    draft_spec = draft_model_spec(model, config.algorithm)
    if config.algorithm == "EAGLE3":
        atp = attn_tp_size(s)
        draft: Any = RankLocalLatency(build_latency_model(
            draft_spec, gpu, atp, precision, backend=backend, profile=profile, kv_cache_dtype=s.kv_cache_dtype,
            parallel=ParallelLayout(tp_size=atp, gpus_per_node=gpu.gpus_per_node)), target.graph_bs)
    else:
        draft = build_dp_attention_latency(draft_spec, gpu, s, precision, backend=backend, profile=profile)
    captured = () if s.disable_cuda_graph else tuple(s.cuda_graph_bs or ())
    return DpSpeculativeLatency(config, target, draft, captured)
