"""The SimPy model of one SGLang server: the scheduler loop of sglang-internals.md §2.1/§8.1.

One iteration at time ``t``: ingest arrivals (``arrival_s + tokenize_s <= t``), build a batch prefill-first
(§2.2–2.5; decode with retraction otherwise, §2.7), launch it, then advance the clock:

- overlap ON (default): the GPU starts at ``max(t + cpu, end of the previous GPU step)``; the next iteration
  starts at ``max(t + cpu, end of the previous GPU step)`` and first applies the *previous* batch's results
  (tokens, finishes), whose tokens reach the client at that batch's GPU end plus the CPU time of the pass that
  launched the next batch (§8.1) — a first token appears one CPU pass after its prefill's GPU work ends, or, when
  the next batch is an eager extend, after that batch's launch has returned (``simcore.perf.launch_queue``). Requests
  that finish by length are left out of the next batch; an EOS finish costs one extra decode row (§6.3, §8.3.8).
- overlap OFF: ``t + cpu + gpu``, results applied before the next iteration.

**Fast path.** Per-request progress is kept lazily: a running request's output count is
``out_len_base + (G - launches_base)`` where ``G`` counts decode launches, and the batch's ``Σ kv`` is maintained incrementally, so a
decode step costs O(1) plus the requests that join, leave or finish. The process does not yield to SimPy for an
iteration when nothing else can happen before it (``t < env.peek()``) and its results touch nobody outside
(no finish): that is exactly what yielding would do, only faster. ``fast=False`` yields at every iteration; a test
checks the two give identical records.

**Host stages** (settings ``output_path_s_per_*``, ``tokenizer_s_per_*``; 0 = off, docs/accuracy.md §3.6): serial
servers beside the loop. The output path delays when a step's tokens reach the client (``_apply``), never the
scheduler; the tokenizer delays when a request reaches the scheduler (``submit``).

Wake-ups use priority ``LATE`` (after SimPy's NORMAL), so requests submitted at the same simulated time as an
iteration are always ingested by it, whatever the event order.
"""
from __future__ import annotations

import bisect
import heapq
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Sequence

try:
    import cython  # compiled (setup.py NATIVE_MODULES): Cython's directives; interpreted: no-ops
except ImportError:  # no Cython installed
    from simcore import _pure_cython as cython
from simcore._simpy import simpy

from simcore import server_snapshot as _snap
from simcore.decode_run import DEFAULT_MAX_REL_SPACING, DecodeRuns, DecodeStepTimes
from simcore.errors import SimulatedServerFailure
from simcore.frozen_new import frozen_new
from simcore.kv_cache import KVCache
from simcore.memory import max_running_requests as _derive_max_running
from simcore.perf.base import BatchShape, LatencyModel, has_pure_step_time
from simcore.perf.launch_queue import launch_wait_fraction, step_model
from simcore.radix_cache import RadixCache, TreeNode
from simcore.request import RequestSpec
from simcore.results import RequestRecord, StepRecord
from simcore.rng import LazyGenerator
from simcore.scheduler import (AddResult, NewTokenRatio, PrefillAdder, order_waiting, preemption_victims,
                               retraction_order)
from simcore.scheduler import PrefillAdder as AdderType  # (the C type of the adders; PrefillAdder stays patchable)
from simcore.server_results import ResultProcessor
from simcore.server_core import ServerCore
from simcore.server_state import Batch, Req, ReservationSum
from simcore.settings import ServerSettings, resolve

if TYPE_CHECKING:  # start-up: a plain server never loads speculative decoding (simcore.speculative)
    from simcore.speculative import SpeculativeDecoding

WAITING_PREFIX_REFRESH_INTERVAL = 32   # §2.4: scheduling passes between two refreshes
WAITING_PREFIX_REFRESH_MAX_QUEUE = 128  # §2.4: waiting requests touched per refresh
RECV_SKIPPER_WEIGHT_OTHER = 1000  # SGLANG_SCHEDULER_RECV_SKIPPER_WEIGHT_DEFAULT (0.5.9 environ.py): non-decode passes
SHAPE_FIELDS: tuple[str, ...] = BatchShape.__match_args__  # (frozen_new)
LATE = 2  # SimPy priority: URGENT=0, NORMAL=1; our wake-ups run after every same-time event
INFINITY = float("inf")  # simpy.core.Infinity: Environment.peek() with nothing scheduled
# AddResult members as module constants: the same objects, read without the Enum class's attribute hook
ADD_CONTINUE = AddResult.CONTINUE
ADD_NO_TOKEN = AddResult.NO_TOKEN
ADD_OTHER = AddResult.OTHER


def late_event(env: simpy.Environment, delay: float) -> simpy.Event:
    """A Timeout of ``delay`` (at least 0) scheduled with our LATE priority."""
    ev = simpy.Event(env)
    ev._ok = True
    ev._value = None
    env.schedule(ev, LATE, max(0.0, delay))
    return ev


def next_graph_bs(graph_bs: Sequence[int], bs: int) -> int | None:
    """Decode CUDA-graph batch size (§6.1): the next captured size in sorted ``graph_bs``, None (eager) above
    the largest or without graphs."""
    if not graph_bs or bs > graph_bs[-1]:
        return None
    return graph_bs[bisect.bisect_left(graph_bs, bs)]


class Server(ServerCore, ResultProcessor, DecodeRuns):
    """One SGLang server (one TP group). ``submit(req)`` returns an event that succeeds with the
    :class:`RequestRecord` when the request finishes; ``on_finish`` (optional) is called with it as well."""

    def __init__(self, env: simpy.Environment, settings: ServerSettings, kv_capacity_tokens: int,
                 latency: LatencyModel, *, key_unit: int = 1, rng: Any = None,
                 observer: Callable[[StepRecord], None] | None = None,
                 on_finish: Callable[[RequestRecord], None] | None = None,
                 max_running_requests: int | None = None, context_len: int | None = None,
                 tokenize_s: float = 0.0, detokenize_s: float = 0.0, fast: bool = True,
                 decode_run_spacing: float = DEFAULT_MAX_REL_SPACING, signal_finishes: bool = True,
                 speculative: SpeculativeDecoding | None = None, _start: bool = True) -> None:
        if (settings.chunked_prefill_size is None or settings.cuda_graph_bs is None
                or settings.speculative_algorithm is not None):  # (resolve applies what speculation forces)
            settings = resolve(settings, None)
        if (settings.speculative_algorithm is None) != (speculative is None):
            raise ValueError("a speculative server needs both --speculative-algorithm in its settings and its "
                             "SpeculativeDecoding (simcore.speculative.build_speculative), a plain one neither")
        if speculative is not None and latency is not speculative and getattr(latency, "base", None) is not speculative:
            raise ValueError("a speculative server prices its steps with its SpeculativeDecoding (or a wrapper "
                             "of it, e.g. calibration factors): pass it as the latency model too")
        self.env = env
        self.settings = settings
        # speculative decoding (simcore.speculative): ``latency`` prices its iterations (draft + verify) and
        # prefills (target + draft extend); ``spec`` draws the accepted lengths; decode goes through _decode_spec
        self.spec = speculative
        self.latency = latency
        self.rng = rng if rng is not None else LazyGenerator(0)  # a numpy Generator (made on first draw)
        self.observer = observer
        self.on_finish = on_finish
        self.fast = fast
        # False: finish events and on_finish are never triggered, ``records`` is all: no SimPy event per finish,
        # so the loop need not yield for one (simulate, when nothing watches finishes: open-loop arrivals)
        self.signal_finishes = signal_finishes
        self.tokenize_s = tokenize_s      # HTTP-side tokenization before the scheduler sees the request
        self.detokenize_s = detokenize_s  # detokenizer + HTTP hop added to every emitted token's time
        # serial host-side stages (settings, docs/accuracy.md §3.5); *_free: when the stage is next idle
        self.out_step_s = settings.output_path_s_per_step
        self.out_tok_s = settings.output_path_s_per_token
        self.out_on = self.out_step_s > 0 or self.out_tok_s > 0
        self.out_free = env.now
        self.tok_req_s = settings.tokenizer_s_per_request
        self.tok_tok_s = settings.tokenizer_s_per_token
        self.tok_free = env.now
        self.page = settings.page_size
        self.overlap = not settings.disable_overlap_schedule
        # overlap: the previous batch's results are read once this pass's launch has returned, and an eager
        # forward's launch returns when the GPU has run the first launch_wait of it (the CUDA launch queue,
        # simcore.perf.launch_queue; 0: not modelled for this model, or the launch returns before the GPU starts)
        sm = step_model(latency)
        self.launch_wait = launch_wait_fraction(sm.model, sm.tp) if self.overlap and sm is not None else 0.0
        cap = kv_capacity_tokens
        self.kv = KVCache(cap, settings.page_size, key_unit, settings.disable_radix_cache)
        ctx = context_len or settings.context_length or cap
        self.max_req_len = max(2, min(ctx - 1, cap - 1))
        self.max_running = max_running_requests or _derive_max_running(cap, ctx, settings.max_running_requests,
                                                                       settings.dp_attention_ranks)
        self.graph_bs: tuple[int, ...] = () if settings.disable_cuda_graph else tuple(settings.cuda_graph_bs or ())
        self.ratio = NewTokenRatio(settings)
        self.family = settings.family
        self.res = ReservationSum(settings.clip_max_new_tokens_estimation)
        # queues and running state
        self.pending: list[tuple[float, int, Req]] = []  # submitted, not yet ingested: (ingest time, seq, req)
        self.ahead: deque[float] = deque()   # submission times of pending requests submitted ahead of time
        self.waiting: list[Req] = []
        self.decoding: dict[str, Req] = {}          # decoding requests (lazy counters)
        self.awaiting_result: dict[str, Req] = {}          # last token launched, result not yet applied
        self.zombies: list[Req] = []         # EOS finishers riding the next decode batch (overlap only)
        self.joined: list[Req] = []          # joined the decoding set since the last decode launch (their first ITL)
        self.chunked: Req | None = None
        self.launch_counter = [0]                       # G: decode launches so far (shared with Req.out_len)
        self.sum_kv = 0                      # Σ (input + out) over the decoding set
        self.fin_heap: list[tuple[int, int, str, int]] = []  # (G at last launch, seq, rid, version)
        self.batch_is_full = False
        self.preempt = settings.priority_preemption       # §2.9
        # §2.4 _touch_waiting_prefixes: on for LRU trees with the version's (or forced) setting
        self.refresh_on = settings.waiting_prefix_refresh and not settings.disable_radix_cache
        self.refresh_calls = 0               # passes seen by the refresh (it touches when this is ≡ 0 mod 32)
        self.reqs: dict[str, Req] = {}       # every unfinished request
        self.events: dict[str, simpy.Event] = {}
        # clock
        self.t = env.now                     # start of the next iteration
        self.gpu_free = env.now
        self.inflight: Batch | None = None   # overlap: launched, results not applied
        self.due: Batch | None = None        # results to apply at self.t
        self.idle = False
        self._wake: simpy.Event | None = None
        self.emit_floor = env.now           # emit time of the last applied batch (emits stay in order)
        self.last_decode_apply = 0.0        # emit time of the last applied decode step ...
        self.last_decode_apply_g = 0        # ... and its decode-launch counter (g_after)
        # counters and statistics
        self.seq = 0
        self.bid = 0
        self.steps = 0
        self.run_steps = 0                   # of those, steps done inside decode runs (not in snapshots)
        self.num_retractions = 0
        self.num_preemptions = 0
        self.kv_peak_used = 0
        self.itl_vals: list[float] = []
        self.itl_w: list[int] = []
        self.records: list[RequestRecord] = []
        self.deferred: list[tuple[float, RequestRecord]] = []  # finished, signalled at their emit time
        # decode runs (simcore.decode_run): jump over stretches of identical decode steps. Off with an observer
        # (it wants every step), host output stages or pages > 1 (their per-step work is not modelled in a run),
        # and for latency models that do not declare a pure step time (random per call, clock-dependent)
        # --scheduler-recv-interval (Scheduler.recv_requests + SchedulerRecvSkipper, sglang 0.5.9
        # managers/scheduler_recv_skipper.py): before each pass the counter grows by the weight of the batch the
        # previous pass launched (decode 1, none 1, any other mode 1000); new requests are polled only when it
        # reaches the interval (then it restarts at 0). 1 = poll every pass (no skipper).
        self.recv_interval = settings.scheduler_recv_interval
        self.recv_counter = self.recv_interval  # a new server has idled (warm-up, waiting): its first poll is due
        self.last_kind: str | None = None  # kind of the batch the previous pass launched (None: nothing)
        self.decode_runs = (fast and observer is None and not self.out_on and self.page == 1
                            and self.recv_interval == 1  # a run would ingest at passes that skip the poll
                            and speculative is None  # accepted lengths are drawn per step
                            and has_pure_step_time(self.latency))  # runs price steps ahead of their time
        self.run_times = DecodeStepTimes(self.latency, decode_run_spacing)
        self.proc = env.process(self._run()) if _start else None

    # ---- public -------------------------------------------------------------------------------------
    @cython.locals(self=ServerCore, req=Req)
    def submit(self, spec: RequestSpec, at_s: float | None = None) -> simpy.Event:
        """Queue ``spec``; it reaches the scheduler at ``arrival_s + tokenize_s`` (not before the submission time
        ``at_s``, default ``env.now``), later when the serial tokenizer stage (``tokenizer_s_per_*`` settings) is
        still busy with earlier requests. ``at_s`` later than ``env.now`` submits ahead of time (open-loop
        workloads whose arrivals are all known, ``simcore.engine.simulate``)."""
        if spec.rid in self.reqs:
            raise ValueError(f"duplicate request id {spec.rid!r}")
        req = Req.from_spec(spec, self.max_req_len, self.launch_counter)
        if spec.input_len >= self.max_req_len - 5:  # SGLang's max_req_input_len: aborted with its error
            req.abort_for_length(self.max_req_len - 5)
        ev = self.env.event()
        self.reqs[spec.rid] = req
        self.events[spec.rid] = ev
        ready = spec.arrival_s
        if self.tok_req_s > 0 or self.tok_tok_s > 0:
            # one tokenizer, requests in submission order: a burst reaches the scheduler spread out
            start = ready if ready > self.tok_free else self.tok_free
            ready = self.tok_free = start + self.tok_req_s + self.tok_tok_s * spec.input_len
        now = self.env.now
        if at_s is not None and at_s > now:
            ahead = self.ahead
            if ahead and at_s < ahead[-1]:
                raise ValueError("requests submitted ahead of time must come in submission-time order")
            ahead.append(at_s)
            now = at_s
        self._push_pending(req, max(ready + self.tokenize_s, now))
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()
        return ev

    @property
    def kv_peak_usage(self) -> float:
        return self.kv_peak_used / self.kv.capacity

    @property
    def num_running(self) -> int:
        return len(self.decoding) + len(self.awaiting_result) + (1 if self.chunked else 0)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    # ---- helpers ------------------------------------------------------------------------------------
    @cython.locals(self=ServerCore)
    def _push_pending(self, req: Req, at: float) -> None:
        self.seq += 1
        req.ingest_s = at
        heapq.heappush(self.pending, (at, self.seq, req))

    def _late(self, delay: float) -> simpy.Event:
        return late_event(self.env, delay)

    @cython.locals(self=ServerCore)
    def _ceil(self, n: int) -> int:
        p = self.page
        return -(-n // p) * p

    @cython.locals(self=ServerCore)
    def _pad(self, bs: int) -> int | None:
        """Decode CUDA-graph batch size (§6.1): next captured size, None (eager) above the largest."""
        return next_graph_bs(self.graph_bs, bs)

    # ---- the loop -----------------------------------------------------------------------------------
    @cython.locals(self=ServerCore, batch=Batch, prev=Batch, req=Req, kv=KVCache, due=Batch, times=DecodeStepTimes,
                   queue=list)
    def _run(self):  # noqa: C901 - the scheduler loop reads best in one place
        env = self.env
        # first iteration (or the one a restored server resumes with) runs after same-time submits
        yield self._late(self.t - env.now)
        now = env.now  # SimPy's clock, read again after every yield (it moves only while this process waits)
        times = self.run_times
        queue = env._queue  # (env.peek(), inlined: the time of SimPy's next event, INFINITY if none)
        while True:
            if self.due is not None:
                self._apply(self.due, self.t)
                self.due = None
            t = self.t
            # ingest: arrivals are picked up only at iteration starts (§6.3, §8.3.15), and with a recv interval
            # only at the passes whose poll is due
            pend = self.pending
            poll = self.recv_interval == 1 or self._recv_due()
            while poll and pend and pend[0][0] <= t:
                req = heapq.heappop(pend)[2]
                req.wait_entry_s = req.ingest_s
                self.waiting.append(req)
            # (the first test of _decode_run, before the call: most iterations cannot start a run)
            if self.decode_runs and not (self.chunked is not None or self.zombies or self.joined or self.awaiting_result
                                         or not self.decoding
                                         or (self.waiting and not (self.batch_is_full and not self.preempt))) \
                    and self._decode_run(t):
                batch = None  # a run of decode iterations was done; self.t is the iteration after it
            elif (batch := self._schedule(t)) is not None:
                self.last_kind = batch.kind
                if self.decode_runs and batch.kind == "decode":  # priced like a run's steps (same knots)
                    gpu, cpu = times.one(batch.dec_rows, batch.dec_graph, batch.dec_sum_kv)
                else:
                    st = self.latency.step_time(batch.shape)
                    gpu, cpu = st.gpu_s, st.cpu_s
                self.steps += 1
                if self.overlap:
                    launch = max(t + cpu, self.gpu_free)
                    batch.gpu_end = self.gpu_free = launch + gpu
                    prev = self.inflight
                    self.inflight = batch
                    if prev is not None:
                        ready = prev.gpu_end
                        if self.launch_wait > 0.0 and batch.kind == "prefill":
                            # SGLang reads prev's results after this eager launch returns (launch_done), when
                            # the GPU has run launch_wait of it (simcore.perf.launch_queue)
                            done = launch + self.launch_wait * gpu
                            if done > ready:
                                ready = done
                        nxt = max(t + cpu, ready)
                        # its results reach the client once this CPU pass is also done (§8.1)
                        prev.emit_s = ready + cpu
                    else:
                        nxt = t + cpu
                    self.due = prev
                else:
                    launch = t + cpu
                    batch.gpu_end = self.gpu_free = launch + gpu
                    nxt = batch.emit_s = batch.gpu_end
                    self.due = batch
                kv = self.kv
                used = kv.private + kv.tree.protected_size  # kv.used
                if used > self.kv_peak_used:
                    self.kv_peak_used = used
                if self.observer is not None:
                    self.observer(StepRecord(launch, batch.gpu_end, batch.shape, self.num_running,
                                             len(self.waiting), used, self.kv.capacity, self.ratio.current,
                                             batch.retracted))
                self.t = nxt
            elif self.inflight is not None:  # overlap: nothing new to launch; process the last result
                self.last_kind = None
                self.due = self.inflight
                self.inflight = None
                self.t = self.due.emit_s = max(t, self.due.gpu_end)
            else:
                self.ratio.reset()  # Scheduler.on_idle()
                # idle passes take microseconds and each adds 1 to the recv counter: by the time a request
                # arrives at an idle server, its poll is due
                self.last_kind = None
                self.recv_counter = self.recv_interval
                # requests submitted ahead of time count as pending only from their submission time on
                ahead = self.ahead
                while ahead and ahead[0] <= t:
                    ahead.popleft()
                submitted = len(pend) > len(ahead)
                if not pend and not self.waiting:
                    self.idle = True
                    self._wake = env.event()
                    yield self._wake
                    now = env.now
                    self._wake = None
                    self.idle = False
                    submitted = True
                if submitted or (pend and not self.waiting):  # (the next submission is what a wake-up brings)
                    self.t = max(t, pend[0][0], now)
                elif self.waiting:
                    # nothing runs, nothing in flight, yet requests wait: they can never fit
                    self._abort(self.waiting.pop(0), t)
                    continue
                else:
                    continue
            due = self.due
            if (not self.fast or self.t >= (queue[0][0] if queue else INFINITY)
                    or (due is not None and due.finishers and self.signal_finishes) or self.t < now):
                yield self._late(self.t - now)
                now = env.now

    @cython.locals(self=ServerCore)
    def _recv_due(self) -> bool:
        """``SchedulerRecvSkipper.handle(last_forward_mode)``, once per pass: add the weight of the batch the previous
        pass launched (decode or none: 1; prefill or mixed: 1000, ``SGLANG_SCHEDULER_RECV_SKIPPER_WEIGHT_*``) and
        poll (True, the counter back to 0) once it reaches the interval."""
        self.recv_counter += 1 if self.last_kind in (None, "decode") else RECV_SKIPPER_WEIGHT_OTHER
        if self.recv_counter < self.recv_interval:
            return False
        self.recv_counter = 0
        return True

    # ---- scheduling (get_next_batch_to_run, §2.2) ---------------------------------------------------
    @cython.locals(self=ServerCore, ch=Req, batch=Batch)
    def _schedule(self, t: float) -> Batch | None:
        ch = self.chunked
        if ch is not None:  # stash_chunked_request: the chunk just computed enters the tree, lock moves
            ch.node = self.kv.cache_unfinished(ch.key, ch.extend_end, ch.node, t)
        zombies: list[Req] | tuple[()] = self.zombies or ()
        if zombies:
            self.zombies = []
        # _prefill returns at once in these cases; skipping the call keeps a plain decode step cheap
        full = self.batch_is_full and not self.preempt  # priority preemption resets the latch every pass
        if ch is not None or not ((self.decoding or self.awaiting_result) and (full or not self.waiting)):
            batch = self._prefill(t, zombies)  # type: ignore[arg-type]
            if batch is not None:
                return batch
        if self.decoding or zombies:
            if self.spec is not None:
                return self._decode_spec(t)
            return self._decode(t, zombies)  # type: ignore[arg-type]
        return None

    @cython.locals(self=ServerCore, r=Req)
    def _group(self, r: Req) -> int:
        """``r``'s ReservationSum group (its class docstring; inlined where the loop adds a request)."""
        return 1 if (self.family == "0.5.23" and r.ignore_eos) else 0

    @cython.locals(self=ServerCore, r=Req, tree=RadixCache, node=TreeNode)
    def _match(self, r: Req, t: float, capped: bool = True) -> None:
        """Admission's match (capped at ``len − 1``) or, ``capped=False``, the scheduling pass's (whole fill)."""
        # kv.match (capped at fill − 1) / kv.match_full, without building a MatchResult
        key = r.key
        tree = self.kv.tree
        node = tree.root if key is None else tree.match_node(key, r.fill_len - 1 if capped else r.fill_len, t)
        r.prefix_len = node.end
        r.last_node = node

    @cython.locals(self=ServerCore, ch=Req, r=Req, adder=AdderType, tree=RadixCache,
                   node=TreeNode, kv=object)  # (kv untyped: its bound methods are passed on; typed, Cython would
    # pass a C-signature wrapper of kv.available without its skip-dispatch argument, gcc -Wincompatible-pointer-types)
    def _prefill(self, t: float, zombies: list[Req]) -> Batch | None:
        """``_get_new_batch_prefill_raw`` (§2.3) with the PrefillAdder (§2.5); None when nothing is admitted."""
        s = self.settings
        running_bs = len(self.decoding) + len(self.awaiting_result)
        if running_bs == 0 or self.preempt:
            self.batch_is_full = False
        if (self.batch_is_full or not self.waiting) and self.chunked is None:
            return None
        allocatable = self.max_running - running_bs
        if allocatable <= 0 and self.chunked is None and not self.preempt:
            self.batch_is_full = True
            return None
        kv = self.kv
        match = self._match  # (closures over bound methods and the dicts, not over self: Cython's typed self)
        pol = order_waiting(self.waiting, s, self.rng, lambda r: match(r, t, capped=False))
        if self.refresh_on and self.waiting and pol in ("fcfs", "lof", "random"):
            if self.refresh_calls % WAITING_PREFIX_REFRESH_INTERVAL == 0:
                self._touch_waiting(t)
            else:  # (_touch_waiting's counter, inlined for the 31 passes of 32 that touch nothing)
                self.refresh_calls += 1
        mixed = s.enable_mixed_chunk and s.chunking_enabled
        ratio = self.ratio.current
        decoding, awaiting = self.decoding, self.awaiting_result  # (mutated in place only)
        adder = PrefillAdder(s, None, None, None, self.res.value(ratio), ratio,  # the pool's own (pool=kv)
                             running_bs if mixed else 0, self.family,
                             running=lambda: (*decoding.values(), *awaiting.values()), pool=kv)
        ch = self.chunked
        if ch is not None:
            self.chunked = adder.add_chunked_req(ch, ch.fill_target - ch.extend_end)
        admitted = 0
        preempted: list[Req] = []
        for r in self.waiting:
            if adder.budget_state() == ADD_OTHER:
                break
            if preempted:  # the running batch shrank: get_num_allocatable_reqs is re-evaluated
                allocatable = self.max_running - len(self.decoding) - len(self.awaiting_result)
            if len(adder.can_run) >= allocatable:
                self.batch_is_full = True
            if self.batch_is_full:
                if not (self.preempt and self._preempt_for(r, adder, t, preempted)):
                    break
            # init_next_round_input: a fresh match (touches LRU); self._match(r, t), inlined
            key = r.key
            tree = self.kv.tree
            # (r.fill_len - 1, inlined: input_len + out_len)
            node = tree.root if key is None else tree.match_node(
                key, r.input_len + (r.out_len_base + (r.launch_counter[0] - r.launches_base) if r.in_decoding
                                    else r.out_len_base) - 1, t)
            r.prefix_len = node.end
            r.last_node = node
            res = adder.add_one_req(r)
            if adder.can_run and adder.can_run[-1] is r:
                admitted += 1
            if res != ADD_CONTINUE:
                if res == ADD_NO_TOKEN:
                    self.batch_is_full = bool(adder.can_run) or running_bs > 0
                break
        if not adder.can_run:
            self.waiting.extend(preempted)  # released already: requeued even though nobody was admitted
            return None
        if admitted:
            del self.waiting[:admitted]  # the admitted requests are a prefix of the sorted queue
        self.waiting.extend(preempted)   # _add_request_to_queue: at the tail, after the admitted left
        if adder.new_chunked is not None:
            self.chunked = adder.new_chunked
        return self._launch_prefill(t, adder, zombies, mixed)

    def _touch_waiting(self, t: float) -> None:
        """``_touch_waiting_prefixes`` (§2.4): every 32nd pass with a waiting queue (the first included), touch
        the cached prefixes of the first 128 waiting requests, the head last, so LRU evicts the requests
        furthest from admission first."""
        refresh = self.refresh_calls % WAITING_PREFIX_REFRESH_INTERVAL == 0
        self.refresh_calls += 1
        if not refresh:
            return
        kv = self.kv
        for r in reversed(self.waiting[:WAITING_PREFIX_REFRESH_MAX_QUEUE]):
            kv.touch(r.key, r.fill_len, t)

    def _preempt_for(self, req: Req, adder: PrefillAdder, t: float, preempted: list[Req]) -> bool:
        """``preempt_to_schedule`` (§2.9): release running requests for ``req``; True if it may be tried.

        The running batch is the decoding set (requests whose last token is in flight are about to finish
        and are left alone). Released requests free their KV without inserting it, like a retraction, and
        are requeued at the tail after this pass (collected in ``preempted``)."""
        ratio = adder.ratio
        def offset(r: Req) -> float:
            return min(r.max_new - r.out_len, self.settings.clip_max_new_tokens_estimation) * (
                1.0 if self._group(r) else ratio)
        need = (req.fill_len - req.prefix_len + min(req.max_new, self.settings.clip_max_new_tokens_estimation)
                - adder.rem_total)
        victims = preemption_victims(req, list(self.decoding.values()), need, self.settings, offset)
        if not victims:
            return False
        for v in victims:
            adder.total_offset -= offset(v)  # before _release freezes its counters
            self._release(v, t)
            self.num_preemptions += 1
            preempted.append(v)
        return True

    @cython.locals(self=ServerCore, kv=KVCache, b=Batch, r=Req, adder=AdderType)
    def _launch_prefill(self, t: float, adder: PrefillAdder, zombies: list[Req], mixed: bool) -> Batch:
        kv = self.kv
        self.bid += 1
        b = Batch(self.bid, "prefill")
        b.prefill_done = []
        page = self.page
        ext_lens: list[int] = []
        pre_lens: list[int] = []
        for r in adder.can_run:
            n = adder.extend[id(r)]
            continuation = r.state == "prefill"  # the next chunk of a chunked prompt (not checked by admission)
            if r.state == "wait":  # newly admitted: prepare_for_extend
                r.node = r.last_node  # locked by the adder at admission
                r.held = r.prefix_len
                r.extend_end = r.prefix_len
                r.fill_target = r.fill_len
                if not r.stain and not r.admitted_once:
                    r.cached_tokens = r.prefix_len
                r.admitted_once = True
                r.queue_time_s += t - r.wait_entry_s
                r.state = "prefill"
            start = r.extend_end
            end = start + n
            need = n if page == 1 else -(-end // page) * page - -(-start // page) * page  # whole pages
            if 0 < need <= kv.free:  # KVCache.alloc without eviction, inlined
                kv.free -= need
                kv.private += need
            elif not kv.alloc(need):
                if not continuation:
                    raise RuntimeError(f"KV pool exhausted admitting {r.rid}: admission budget and pool disagree")
                # a chunked continuation outgrew the pool: SGLang's add_chunked_req allowed it, its allocation fails
                raise SimulatedServerFailure(
                    f"at t = {t:.6g} s the KV pool cannot hold the next prefill chunk of {r.rid} ({need} token "
                    f"slots, {kv.available()} free or evictable)",
                    "Prefill out of memory. Try to lower your batch size.", r.rid,
                    "give the KV pool more memory (--mem-fraction-static), or lower --chunked-prefill-size "
                         "or --max-running-requests")
            r.held += need
            r.extend_end = end
            ext_lens.append(n)
            pre_lens.append(start)
        num_dec = 0
        sum_kv = 0
        if mixed and (self.decoding or zombies):
            # §2.8: decode rows ride along when their memory fits; a mixed step never retracts
            need = self._decode_need(zombies)
            if kv.available() >= need:
                num_dec, sum_kv = self._launch_decode_rows(b, zombies, need)
        for r in adder.can_run:
            if r is self.chunked:
                continue
            b.prefill_done.append(r)
            r.out_len_base += 1  # the forward of the last chunk samples the next token
            self._after_token(r, b)
        b.shape = frozen_new(BatchShape, SHAPE_FIELDS, (tuple(ext_lens), tuple(pre_lens), num_dec, sum_kv, (), None))
        return b

    @cython.locals(self=ServerCore, r=Req, b=Batch)
    def _after_token(self, r: Req, b: Batch) -> None:
        """``r`` just had a token launched in ``b`` (outside the lazy decode set): join the decoding set or start finishing."""
        r.last_bid = b.bid
        if r.out_len_base >= r.output_len:
            self._to_finishing(r, b)
            return
        r.state = "run"
        r.launches_base = self.launch_counter[0]
        r.in_decoding = True
        r.ver += 1
        self.decoding[r.rid] = r
        self.sum_kv += r.input_len + r.out_len_base
        self.joined.append(r)
        group = 1 if (self.family == "0.5.23" and r.ignore_eos) else 0  # (self._group(r), inlined)
        if self.spec is not None:  # its terms and finish are recomputed every iteration (_decode_spec)
            self.res.add(r, group, decoding=False)
            return
        self.res.add(r, group, decoding=True)
        self.seq += 1
        heapq.heappush(self.fin_heap, (r.launches_base + r.output_len - r.out_len_base, self.seq, r.rid, r.ver))

    @cython.locals(self=ServerCore, r=Req, b=Batch)
    def _to_finishing(self, r: Req, b: Batch) -> None:
        r.state = "finishing"
        p = self.page  # (self._ceil(n) and self._group(r), inlined)
        r.held = -(-(r.input_len + r.out_len_base - 1) // p) * p
        self.awaiting_result[r.rid] = r
        self.res.add(r, 1 if (self.family == "0.5.23" and r.ignore_eos) else 0, decoding=False)
        if b.finishers:
            b.finishers.append(r)
        else:
            b.finishers = [r]
        if self.overlap and r.eos:
            self.zombies.append(r)  # EOS is only seen after the next batch was built (§2.1)

    @cython.locals(self=ServerCore, r=Req)
    def _leave_r(self, r: Req) -> None:
        self.res.remove(r)
        out = r.out_len
        r.out_len_base = out
        r.in_decoding = False
        r.ver += 1
        del self.decoding[r.rid]
        self.sum_kv -= r.input_len + out

    @cython.locals(self=ServerCore)
    def _decode_need(self, zombies: list[Req]) -> int:
        """KV slots one decode step allocates: one per row (a new page for rows at a page boundary)."""
        if self.page == 1:
            return len(self.decoding) + len(zombies)
        p = self.page
        n = sum(1 for r in self.decoding.values() if (r.input_len + r.out_len - 1) % p == 0)
        n += sum(1 for z in zombies if (z.input_len + z.out_len_base - 1) % p == 0)
        return n * p

    @cython.locals(self=ServerCore, b=Batch, kv=KVCache, z=Req, heap=list)
    def _launch_decode_rows(self, b: Batch, zombies: list[Req], need: int) -> tuple[int, int]:
        """Allocate and launch one decode row per running request (+ EOS zombie rows). Returns (rows, Σkv)."""
        kv = self.kv
        if kv.free >= need:  # KVCache.alloc without eviction, inlined for the hot path
            kv.free -= need
            kv.private += need
        elif not kv.alloc(need):
            raise RuntimeError("decode allocation failed after the capacity check")
        nR = len(self.decoding)
        nrows = nR
        sum_kv = self.sum_kv
        if zombies:
            p = self.page  # (self._ceil, inlined)
            for z in zombies:
                z.held = -(-(z.input_len + z.out_len_base) // p) * p
                sum_kv += z.input_len + z.out_len_base
            nrows += len(zombies)
        b.n_emit = nR
        if self.joined:
            b.newcomers = [r for r in self.joined if r.in_decoding]
            self.joined = []
        self.sum_kv += nR
        G = self.launch_counter[0]
        self.res.advance(G, 1, self.reqs)  # (ReservationSum.before_decode, inlined)
        G += 1
        self.launch_counter[0] = G
        b.g_after = G
        heap = self.fin_heap
        if heap and heap[0][0] <= G:  # (the test _pop_finishers starts with)
            self._pop_finishers(b)
        return nrows, sum_kv

    @cython.locals(self=ServerCore, b=Batch, r=Req)
    def _pop_finishers(self, b: Batch) -> None:
        """Requests whose last token decode batch ``b`` (just launched, ``launch_counter`` already advanced) computes."""
        G = self.launch_counter[0]
        heap = self.fin_heap
        while heap and heap[0][0] <= G:
            _, _, rid, ver = heapq.heappop(heap)
            r = self.reqs.get(rid)
            if r is None or r.ver != ver or not r.in_decoding:
                continue
            self._leave_r(r)
            r.last_bid = b.bid
            self._to_finishing(r, b)

    @cython.locals(self=ServerCore, kv=KVCache, b=Batch, r=Req)
    def _decode(self, t: float, zombies: list[Req]) -> Batch | None:
        """``update_running_batch`` (§2.7): memory check, retraction, ratio update, one token per request."""
        kv = self.kv
        need = len(self.decoding) + len(zombies) if self.page == 1 else self._decode_need(zombies)
        if kv.free >= need:  # the common case, inlined: no retraction, ratio.decay_step, a new batch
            ratio = self.ratio
            current = ratio.current - ratio.decay
            floor = ratio.min
            ratio.current = current if current > floor else floor  # max(current − decay, min)
            self.bid += 1
            b = Batch(self.bid, "decode")
            nrows, sum_kv = self._launch_decode_rows(b, zombies, need)
            # (b.set_decode and _pad, inlined)
            g = self.graph_bs
            b._shape = None
            b.dec_rows = nrows
            b.dec_sum_kv = sum_kv
            b.dec_graph = None if not g or nrows > g[-1] else g[bisect.bisect_left(g, nrows)]
            return b
        retracted: list[str] = []
        if kv.free + kv.tree.evictable_size < need:
            if any(not f.eos for f in self.awaiting_result.values()) and self.overlap:
                self.batch_is_full = False  # their KV frees as soon as their result is processed
                return None
            order = retraction_order(list(self.decoding.values()))
            i = 0
            while kv.available() < need and len(self.decoding) > 1:
                r = order[i]
                i += 1
                self._retract(r, t)
                retracted.append(r.rid)
                need = self._decode_need(zombies)
            if kv.available() < need:  # even one request does not fit: SGLang aborts it
                self._abort_decoding(t)
                if kv.available() < self._decode_need(zombies):
                    zombies = []  # finished anyway: their wasted rows are skipped when nothing fits
                need = self._decode_need(zombies)
                if not zombies:
                    return None
            self._ratio_after_retraction()
        else:
            self.ratio.decay_step()
        b = self._new_decode_batch(retracted)
        nrows, sum_kv = self._launch_decode_rows(b, zombies, need)
        b.set_decode(nrows, sum_kv, self._pad(nrows))
        return b

    def _abort_decoding(self, t: float) -> None:
        """Not even one decoding request fits the pool: SGLang aborts them all (``retract_decode``)."""
        for r in list(self.decoding.values()):
            self._leave_r(r)
            r.held = self._ceil(r.input_len + r.out_len_base - 1)
            self._abort(r, t)

    def _ratio_after_retraction(self) -> None:
        """``new_token_ratio`` after a retraction, from the requests still decoding (none: unchanged)."""
        rem = list(self.decoding.values())
        if rem:
            self.ratio.current = NewTokenRatio.after_retract(
                [r.out_len for r in rem], [r.max_new for r in rem], self.settings.retract_decode_steps)

    @cython.locals(self=ServerCore)
    def _new_decode_batch(self, retracted: list[str]) -> Batch:
        self.bid += 1
        b = Batch(self.bid, "decode")
        if retracted:
            b.retracted = tuple(retracted)
        return b

    def _decode_spec(self, t: float) -> Batch | None:
        """A speculative decode iteration (simcore.speculative; 0.5.9 scheduler ``update_running_batch`` with
        ``spec_algorithm`` set): the memory check reserves the draft tokens of every request
        (``new_tokens_required_next_decode``), retraction takes requests from the back of the batch
        (``retract_decode``: "for spec decoding ... we can only retract from the back"), then each request
        accepts L tokens: KV grows by L (the rejected drafts' slots are freed after verify), L tokens reach the
        client together. No overlap (forced off), so no EOS zombies."""
        kv = self.kv
        spec = self.spec
        need = spec.config.decode_reservation(len(self.decoding), self.page)
        retracted: list[str] = []
        if kv.free + kv.tree.evictable_size < need:
            order = list(self.decoding.values())
            while kv.available() < need and len(self.decoding) > 1:
                r = order.pop()
                self._retract(r, t)
                retracted.append(r.rid)
                need = spec.config.decode_reservation(len(self.decoding), self.page)
            if kv.available() < need:  # even one request does not fit: SGLang aborts it
                self._abort_decoding(t)
                return None
            self._ratio_after_retraction()
        else:
            self.ratio.decay_step()
        b = self._new_decode_batch(retracted)
        if not kv.alloc(need):  # the verify pass's draft slots (check_decode_mem evicted for them)
            raise RuntimeError("speculative decode allocation failed after the capacity check")
        rows = list(self.decoding.values())
        sum_kv_before = self.sum_kv
        G = self.launch_counter[0]
        lens = spec.accept([r.output_len - (r.out_len_base + G - r.launches_base) for r in rows])
        b.n_emit = len(rows)
        if self.joined:
            b.newcomers = [r for r in self.joined if r.in_decoding]
            self.joined = []
        self.launch_counter[0] = G + 1
        b.g_after = G + 1
        # per request: out grows by n (the launch counter adds one, out_len_base the other n − 1), its reservation
        # term min(max(max_new − out, 0), CLIP) is updated in place (decoding requests are held in the
        # ReservationSum as fixed terms under speculation), its KV by the pages n more positions need
        sums = self.res.sums
        clip = self.res.clip
        page1 = self.page == 1
        ceil = self._ceil
        kept = 0
        added = 0
        finished: list[Req] = []
        for r, n in zip(rows, lens):
            pre = r.out_len_base + G - r.launches_base  # outputs before this step
            left = r.max_new - pre
            old = left if left < clip else clip
            left -= n
            new = left if left < clip else clip
            sums[r.res_group] += (new if new > 0 else 0) - (old if old > 0 else 0)
            r.out_len_base += n - 1
            if page1:
                kept += n
            else:
                start = r.input_len + pre - 1  # KV positions before this step: prompt + outputs − 1
                kept += ceil(start + n) - ceil(start)
            added += n
            if pre + n >= r.output_len:
                finished.append(r)
        self.sum_kv += added
        for r in finished:
            self._leave_r(r)
            r.last_bid = b.bid
            self._to_finishing(r, b)
        kv.free_tokens(need - kept)  # the rejected drafts
        b.shape = BatchShape((), (), len(rows), sum_kv_before, (), self._pad(len(rows)))
        return b

    @cython.locals(self=ServerCore)
    def _retract(self, r: Req, t: float) -> None:
        """Retraction (§2.7): ``release_req``, then back to the tail of the waiting queue."""
        self._release(r, t)
        self.num_retractions += 1
        self.batch_is_full = False
        self.waiting.append(r)

    @cython.locals(self=ServerCore)
    def _release(self, r: Req, t: float) -> None:
        """``release_req``: free private KV (no insert), unlock, evict ``remaining × 20``, reset for retract."""
        if r.launches_base < self.last_decode_apply_g:  # its last token came with the last applied decode step
            r.last_emit_s = self.last_decode_apply
        self._leave_r(r)
        held = self._ceil(r.input_len + r.out_len_base - 1)
        inf = self.inflight
        if self.overlap and inf is not None and r.last_bid_in(inf):
            r.out_len_base -= 1  # its in-flight token is dropped when that result is processed (is_retracted)
            inf.drop(r)
        self.kv.release(r.node, held)
        self.seq += 1
        r.key_outputs(-(self.seq << 32))  # its outputs are real tokens of its next fill
        want = len(self.decoding) * self.settings.retract_decode_steps
        if self.kv.free < want:
            self.kv.evict(want - self.kv.free)
        r.node = None
        r.held = 0
        r.state = "wait"
        r.stain = True
        r.num_retractions += 1
        r.wait_entry_s = t

    # ---- checks, snapshot / restore (simcore.server_snapshot) ---------------------------------------
    def check_invariants(self) -> None:
        """Recount the incremental state from scratch (AssertionError on a mismatch). O(requests); for tests."""
        _snap.check_invariants(self)

    def snapshot(self) -> dict[str, Any]:
        """Pure, JSON-able domain state; :meth:`restore` continues exactly like an uninterrupted run."""
        return _snap.snapshot(self)

    @classmethod
    def restore(cls, env: simpy.Environment, snap: dict[str, Any], settings: ServerSettings,
                latency: LatencyModel, **kw: Any) -> "Server":
        """Rebuild a server (and its SimPy process) from :meth:`snapshot` in ``env`` (``env.now`` should equal
        the snapshot's ``now``). Finish events are new: find them in ``server.events`` by rid."""
        return _snap.restore(cls, env, snap, settings, latency, **kw)

    def _resume(self, idle: bool):
        if idle:
            self.idle = True
            if not self.pending:
                self._wake = self.env.event()
                yield self._wake
                self._wake = None
            self.idle = False
            self.t = max(self.t, self.pending[0][0], self.env.now)
        yield from self._run()
