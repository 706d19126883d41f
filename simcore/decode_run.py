"""Decode runs: a stretch of decode steps in which nothing can change the batch, computed in one pass.

Between two events that change the batch (an admissible arrival, a finish, a retraction, a chunk boundary, a
CUDA-graph size change) the scheduler builds the same decode batch every iteration: the same ``n`` rows, Σkv one
row per request larger each step, no allocation beyond the free pool. :class:`simcore.server.Server` recognises
such a stretch and jumps to its end (docs/architecture.md, "Decode runs"). Here:

- :class:`DecodeRuns`: the server mixin that recognises a run and leaves the state exactly as the step-by-step
  loop would after the same iterations;
- :func:`plan_run` / :func:`decode_gaps`: the loop's float recurrences for the run's launch, GPU-end and emit
  times and ITL gaps (numpy for long stretches: sequential accumulations, the same floats);

- :class:`DecodeStepTimes`: the step times of the run, ``step_time(BatchShape(num_decode=n,
  decode_sum_kv=S0 + j·n, cuda_graph_bs=pad))`` for ``j = 0 … steps−1``, through the model's own
  ``LatencyModel.step_time`` (the only interface it relies on, so any pricing works). With ``knot_spacing = 0``
  every step is priced by the model (bit-identical to step-by-step simulation). With ``knot_spacing > 0`` the
  model is priced at *knots* ``k·Q`` of Σkv only, with ``Q`` a power of two no larger than
  ``Σkv · knot_spacing`` (so knot spacing is at most that fraction of Σkv), and interpolated linearly between
  them; knots are memoized and shared by every run of the same batch size. Linear interpolation of a function
  that is locally a power law ``c·S^a`` (every table curve and roofline term) errs by at most
  ``|a(a−1)|/8 · (Q/S)²`` relative, and by ``|Δa|/4 · Q/S`` across a kink of a piecewise curve: with the
  default 1/128 spacing, under 10⁻² relative for a slope change of 1 at a kink, and much less in practice. ``tests/simcore/test_decode_run.py``
  measures the error against the model itself (H100/H200/A100/L40S tables, roofline, MoE and MLA models) and
  checks a 10⁻⁴ bound (measured ≤ 3·10⁻⁶; 6·10⁻⁸ at 1/1024).

The model must declare ``pure_step_time`` (``simcore.perf.base.has_pure_step_time``): steps are priced ahead of
their simulated time, and knots are shared between runs.
"""
from __future__ import annotations

import bisect
import heapq
import operator
from typing import TYPE_CHECKING, Any

try:
    import cython  # compiled (setup.py NATIVE_MODULES): Cython's directives; interpreted: no-ops
except ImportError:  # no Cython installed
    from simcore import _pure_cython as cython
from simcore.frozen_new import frozen_new
from simcore.kv_cache import KVCache
from simcore.perf.base import BatchShape, LatencyModel
from simcore.server_core import ServerCore
from simcore.server_state import Batch, Req

if TYPE_CHECKING:
    import numpy as np

# Default knot spacing of the interpolated step times: at most this fraction of Σkv (docs/architecture.md).
SHAPE_FIELDS: tuple[str, ...] = BatchShape.__match_args__  # (frozen_new)
DEFAULT_MAX_REL_SPACING = 1.0 / 128
_KNOT_MEMO_LIMIT = 500_000
FIRST_BLOCK = 8    # steps priced first; each further block doubles (a run rarely needs all it may take)
NUMPY_FROM = 512   # blocks at least this long are computed with numpy (same float operations, in order) ...
# (numpy costs ~40 µs per block whatever its length, the fused Python loop ~0.35 µs per step: it pays from ~300)
PURE_PYTHON_STEPS = 30_000  # ... once this many steps of such blocks were done in pure Python (start-up: a
# short simulation never pays numpy's ~0.1 s import; the floats are the same either way)
_np: Any = None
_INFINITY = float("inf")  # simpy.core.Infinity: Environment.peek() with nothing scheduled


def _numpy() -> Any:
    global _np
    if _np is None:
        import numpy
        _np = numpy
    return _np


class DecodeStepTimes:
    """GPU and CPU seconds of the steps of a decode run, priced by ``latency.step_time``.

    ``knot_spacing`` = 0: every step priced exactly. > 0: knots at most ``knot_spacing × Σkv`` apart, linear
    interpolation in between (error bound in the module docstring; exact whenever the spacing rounds to the
    batch's own Σkv step)."""

    __slots__ = ("latency", "knot_spacing", "_knots", "long_steps", "_last")

    def __init__(self, latency: LatencyModel, knot_spacing: float = DEFAULT_MAX_REL_SPACING) -> None:
        if not 0.0 <= knot_spacing < 1.0:
            raise ValueError(f"knot_spacing must be in [0, 1), got {knot_spacing}")
        self.latency = latency
        self.knot_spacing = knot_spacing
        self._knots: dict[tuple[int, int | None, int], tuple[float, float]] = {}
        self.long_steps = 0  # steps of blocks >= NUMPY_FROM done in pure Python (numpy takes over past a bound)
        # the knot pair `one` used last: (rows, graph_bs, x0, q, g0, c0, g1, c1); consecutive plain decode steps
        # of one batch mostly fall between the same two knots
        self._last: tuple[Any, ...] = (None,) * 8

    def vectorize(self, m: int) -> bool:
        """Whether a block of ``m`` steps goes through numpy: long blocks, once ``PURE_PYTHON_STEPS`` steps of
        long blocks were done without it (the results are the same floats either way)."""
        if m < NUMPY_FROM:
            return False
        if self.long_steps >= PURE_PYTHON_STEPS:
            return True
        self.long_steps += m
        return False

    def price(self, rows: int, graph_bs: int | None, sum_kv: int) -> tuple[float, float]:
        """(gpu_s, cpu_s) of one decode step, from the model."""
        st = self.latency.step_time(frozen_new(BatchShape, SHAPE_FIELDS, ((), (), rows, sum_kv, (), graph_bs)))
        return st.gpu_s, st.cpu_s

    def _knot(self, rows: int, graph_bs: int | None, x: int) -> tuple[float, float]:
        key = (rows, graph_bs, x)
        v = self._knots.get(key)
        if v is None:
            if len(self._knots) >= _KNOT_MEMO_LIMIT:
                self._knots.clear()
            v = self._knots[key] = self.price(rows, graph_bs, x)
        return v

    def one(self, rows: int, graph_bs: int | None, sum_kv: int) -> tuple[float, float]:
        """(gpu_s, cpu_s) of one decode step, interpolated between the knots around ``sum_kv`` like a run's."""
        q = self.spacing(sum_kv)
        if q <= rows:
            return self.price(rows, graph_bs, sum_kv)
        x0 = sum_kv // q * q
        last = self._last
        if last[0] == rows and last[2] == x0 and last[3] == q and last[1] == graph_bs:
            _, _, _, _, g0, c0, g1, c1 = last
        else:
            g0, c0 = self._knot(rows, graph_bs, x0)
            if x0 == sum_kv:
                return g0, c0
            g1, c1 = self._knot(rows, graph_bs, x0 + q)
            self._last = (rows, graph_bs, x0, q, g0, c0, g1, c1)
        if x0 == sum_kv:
            return g0, c0
        w = (sum_kv - x0) / q
        return g0 + (g1 - g0) * w, c0 + (c1 - c0) * w

    def times(self, rows: int, graph_bs: int | None, sum_kv0: int, steps: int) -> tuple[list[float], list[float]]:
        """(gpu_s, cpu_s) lists for ``steps`` decode steps of ``rows`` rows, step j at Σkv = sum_kv0 + j·rows."""
        q = self.spacing(sum_kv0)
        if q <= rows:  # knots no sparser than the steps: price each step
            pairs = [self.price(rows, graph_bs, sum_kv0 + j * rows) for j in range(steps)]
            return [p[0] for p in pairs], [p[1] for p in pairs]
        gpu: list[float] = []
        cpu: list[float] = []
        s = sum_kv0
        k = s // q
        x0 = k * q
        launches_base, c0 = self._knot(rows, graph_bs, x0)
        g1, c1 = self._knot(rows, graph_bs, x0 + q)
        for _ in range(steps):
            while s >= x0 + q:
                x0 += q
                launches_base, c0 = g1, c1
                g1, c1 = self._knot(rows, graph_bs, x0 + q)
            w = (s - x0) / q
            gpu.append(launches_base + (g1 - launches_base) * w)
            cpu.append(c0 + (c1 - c0) * w)
            s += rows
        return gpu, cpu

    def times_array(self, rows: int, graph_bs: int | None, sum_kv0: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`times` as arrays, vectorized (the same formula, so the same floats as :meth:`times`)."""
        np = _numpy()
        q = self.spacing(sum_kv0)
        if q <= rows:
            g, c = self.times(rows, graph_bs, sum_kv0, steps)
            return np.array(g), np.array(c)
        s = sum_kv0 + rows * np.arange(steps, dtype=np.int64)
        k0 = sum_kv0 // q
        k = s // q
        nk = int(k[-1]) - k0 + 2
        knots = np.array([self._knot(rows, graph_bs, (k0 + i) * q) for i in range(nk)], dtype=float)
        i = k - k0
        w = (s - k * q) / q
        launches_base, c0 = knots[i, 0], knots[i, 1]
        return launches_base + (knots[i + 1, 0] - launches_base) * w, c0 + (knots[i + 1, 1] - c0) * w

    def spacing(self, sum_kv: int) -> int:
        """Knot spacing for runs starting at ``sum_kv``: the largest power of two ≤ spacing × Σkv (≥ 1)."""
        if self.knot_spacing <= 0.0:
            return 1
        want = int(sum_kv * self.knot_spacing)
        if want < 1:
            return 1
        # 1 << (want.bit_length() - 1), without a method call on a boxed int: smear the top bit down, keep it
        want |= want >> 1
        want |= want >> 2
        want |= want >> 4
        want |= want >> 8
        want |= want >> 16
        want |= want >> 32
        return want - (want >> 1)


def plan_run(times: DecodeStepTimes, rows: int, graph_bs: int | None, sum_kv0: int, limit: int, t: float,
             gpu_free: float, bound: float, overlap: bool) -> tuple[list[float], list[float], list[float]]:
    """Launch times, GPU-end times and CPU seconds of the iterations of a decode run starting at ``t``: at most
    ``limit``, and no iteration after the first may start at or after ``bound``.

    The loop's own float recurrences. Overlap: ``launch_j = max(t_j + cpu_j, end_{j−1})`` and the next
    iteration starts there too, so ``launch_j = launch_{j−1} + max(cpu_j, gpu_{j−1})`` exactly (rounding is
    monotonic); iteration j + 1 starts at ``launch_j``. Overlap off: ``launch_j = t_j + cpu_j``,
    ``end_j = launch_j + gpu_j`` = the next start. Steps are priced block by block (16, then doubling) as far as
    the run gets; long blocks go through numpy (sequential accumulations: the same sums)."""
    starts: list[float] = []
    ends: list[float] = []
    cpus: list[float] = []
    done = 0
    block = FIRST_BLOCK
    last_start = t        # overlap: the last launch; off: the last end (= the next iteration's start)
    last_gpu = 0.0
    while done < limit:
        m = min(block, limit - done)
        block *= 2
        s0 = sum_kv0 + done * rows
        if times.vectorize(m):
            np = _numpy()
            gpu_a, cpu_a = times.times_array(rows, graph_bs, s0, m)
            if overlap:
                seq = np.empty(m)
                if done == 0:
                    t0 = t + float(cpu_a[0])
                    seq[0] = t0 if t0 > gpu_free else gpu_free
                else:
                    c0 = float(cpu_a[0])
                    seq[0] = last_start + (c0 if c0 > last_gpu else last_gpu)
                np.maximum(cpu_a[1:], gpu_a[:-1], out=seq[1:])
                launch = np.add.accumulate(seq)
                end = launch + gpu_a
                nxt = launch
            else:
                seq = np.empty(2 * m + 1)
                seq[0] = last_start
                seq[1::2] = cpu_a
                seq[2::2] = gpu_a
                acc = np.add.accumulate(seq)
                launch, end = acc[1::2], acc[2::2]
                nxt = end
            # iteration done + i (i ≥ 1) starts at nxt[i − 1]; the block's first one was checked before the block
            take = 1 + int(np.searchsorted(nxt[:m - 1], bound, side="left"))
            starts += launch[:take].tolist()
            ends += end[:take].tolist()
            cpus += cpu_a[:take].tolist()
            done += take
            last_start, last_gpu = float(nxt[take - 1]), float(gpu_a[take - 1])
            if take < m or last_start >= bound:
                break
            continue
        # pure Python: each step priced as `DecodeStepTimes.times` prices it (the same formula), just before it is
        # taken, so nothing past the bound is priced. (Tight loop: the knot pair and its differences are kept in
        # locals; g0 + dg·w with dg = g1 − g0 is the same float as g0 + (g1 − g0)·w.)
        q = times.spacing(s0)
        exact = q <= rows
        knot = times._knot
        price = times.price
        x0 = s0 // q * q
        x1 = x0 + q
        g0 = c0 = g1 = c1 = 0.0
        if not exact:
            g0, c0 = knot(rows, graph_bs, x0)
            g1, c1 = knot(rows, graph_bs, x1)
        dg = g1 - g0
        dc = c1 - c0
        app_s, app_e, app_c = starts.append, ends.append, cpus.append
        s = s0
        stopped = False
        first = done == 0
        for _ in range(m):
            if first:
                first = False
            elif last_start >= bound:
                stopped = True
                break
            if exact:
                g, c = price(rows, graph_bs, s)
            else:
                while s >= x1:
                    x0 = x1
                    x1 = x0 + q
                    g0, c0 = g1, c1
                    g1, c1 = knot(rows, graph_bs, x1)
                    dg = g1 - g0
                    dc = c1 - c0
                w = (s - x0) / q
                g = g0 + dg * w
                c = c0 + dc * w
            s += rows
            if overlap:
                if done == 0:
                    t0 = t + c
                    launch_f = t0 if t0 > gpu_free else gpu_free
                    done = 1
                else:
                    launch_f = last_start + (c if c > last_gpu else last_gpu)
                app_s(launch_f)
                app_e(launch_f + g)
                last_start = launch_f
            else:
                launch_f = last_start + c
                last_start = launch_f + g
                app_s(launch_f)
                app_e(last_start)
            last_gpu = g
            app_c(c)
        done = len(cpus)
        if stopped or (done and last_start >= bound):
            break
    return starts, ends, cpus


def decode_gaps(ends: list[float], cpu: list[float], overlap: bool, floor: float, last: float,
                detokenize_s: float, vectorize: bool = True) -> tuple[list[float], float, float]:
    """The ITL gaps of the results a run of ``n = len(ends)`` steps applies inside itself, as ``_apply`` computes
    them: overlap, iteration j + 2 applies step j (j < n − 2), whose tokens leave with the next step's CPU pass
    (``ends[j] + cpu[j + 1]``); overlap off, iteration j + 1 applies step j (j < n − 1) at its GPU end. Each emit
    is held back to the previous one's (``floor``) and shifted by the detokenizer; each gives one gap after the
    previous client time (``last``). Returns (gaps, new floor, new last client time). ``vectorize=False``: pure
    Python whatever the length (the same floats)."""
    n = len(ends)
    m = n - 2 if overlap else n - 1
    if m <= 0:
        return [], floor, last
    if vectorize and m >= NUMPY_FROM:
        np = _numpy()
        seq = np.empty(m + 1)
        seq[0] = floor
        if overlap:
            np.add(ends[:m], cpu[1:m + 1], out=seq[1:])
        else:
            seq[1:] = ends[:m]
        base = np.maximum.accumulate(seq)
        client = base + detokenize_s
        client[0] = last
        return np.diff(client).tolist(), float(base[-1]), float(client[-1])
    gaps: list[float] = []
    app = gaps.append
    for e in (map(operator.add, ends[:m], cpu[1:m + 1]) if overlap else ends[:m]):
        if e > floor:
            floor = e
        c = floor + detokenize_s
        app(c - last)
        last = c
    return gaps, floor, last


class DecodeRuns:
    """``_decode_run(t)``: a mixin of :class:`simcore.server.Server` (it uses the server's queues, KV cache, clock
    and counters), kept apart so the scheduling loop reads on its own. Called at the start of an iteration, after
    ingest; True when it did one or more iterations (``self.t`` is then the iteration after them)."""

    MIN_DECODE_RUN = 3    # iterations below which the plain loop is as cheap
    MAX_DECODE_RUN = 4096  # iterations priced per run at most (a longer stretch is several runs)

    @cython.locals(self=ServerCore, prev=Batch, last_b=Batch, due=Batch, kv=KVCache, req=Req, queue=list, heap=list)
    def _decode_run(self, t: float) -> bool:
        """Do the iterations from ``t`` on at once while each would build the same plain decode batch; False
        (nothing done) when fewer than ``MIN_DECODE_RUN`` qualify.

        An iteration qualifies when nothing can change the batch: no chunked request, zombie or fresh joiner,
        the prefill pass is skipped (``batch_is_full`` latched or nobody waits), no finisher before the run's last
        launch (the finish heap's top), every step's KV fits the free pool without eviction or retraction, the batch
        applied in the run carries no finish or first token, and the next iteration starts before the next
        arrival or SimPy event (so neither ingest nor a yield is skipped). The state afterwards is exactly
        the step-by-step loop's after the same iterations."""
        decoding = self.decoding
        latched = self.batch_is_full and not self.preempt  # the prefill pass is skipped, arrivals or not
        if (self.chunked is not None or self.zombies or self.joined or self.awaiting_result or not decoding
                or (self.waiting and not latched)):
            return False
        prev = self.inflight
        if self.overlap:
            if prev is None or prev.finishers or prev.prefill_done or prev.gpu_end != self.gpu_free:
                return False
        elif prev is not None:
            return False
        rows = len(decoding)
        launches_base = self.launch_counter[0]
        heap = self.fin_heap
        limit = min(self.MAX_DECODE_RUN, self.kv.free // rows)
        if heap:  # the run may end with the launch that computes the next finisher's last token
            limit = min(limit, heap[0][0] - launches_base)
        if limit < self.MIN_DECODE_RUN:
            return False
        pend = self.pending
        queue = self.env._queue  # (env.peek(), inlined)
        bound = queue[0][0] if queue else _INFINITY
        if pend and pend[0][0] < bound and not latched:  # an arrival would be admitted: it ends the run
            bound = pend[0][0]
        if bound <= t or t < self.env.now or (self.overlap and self.gpu_free >= bound):
            return False  # (overlap: the second iteration starts at the first launch, not before gpu_free)
        g = self.graph_bs  # (self._pad(rows), inlined: the next captured CUDA-graph size, None above the largest)
        graph_bs = None if not g or rows > g[-1] else g[bisect.bisect_left(g, rows)]
        sum_kv0 = self.sum_kv
        overlap = self.overlap
        starts, ends, cpu = plan_run(self.run_times, rows, graph_bs, sum_kv0, limit, t, self.gpu_free, bound,
                                     overlap)
        n = len(ends)
        if n < self.MIN_DECODE_RUN:
            return False
        if latched and pend:  # arrivals in the run join the queue at the iteration that ingests them
            last_start = starts[n - 2]
            waiting = self.waiting
            while pend and pend[0][0] <= last_start:
                req = heapq.heappop(pend)[2]
                req.wait_entry_s = req.ingest_s
                waiting.append(req)
        # -- results applied inside the run: the batch in flight before it (overlap), then the run's own
        if overlap:
            prev.emit_s = self.gpu_free + cpu[0]
            self._apply(prev, starts[0])
        gaps, floor, last = decode_gaps(ends, cpu, overlap, self.emit_floor, self.last_decode_apply,
                                        self.detokenize_s, self.run_times.long_steps >= PURE_PYTHON_STEPS)
        self.emit_floor = floor
        self.last_decode_apply = last
        self.last_decode_apply_g = launches_base + len(gaps)
        self.itl_vals.extend(gaps)
        self.itl_w.extend([rows] * len(gaps))
        # -- the launches: n decode steps of `rows` rows
        self.ratio.decay_steps(n)  # NewTokenRatio.decay_step, n times
        self.res.advance(launches_base, n, self.reqs)
        self.launch_counter[0] = launches_base + n
        self.sum_kv = sum_kv0 + n * rows
        kv = self.kv
        kv.free -= n * rows
        kv.private += n * rows
        self.steps += n
        self.run_steps += n
        bid0 = self.bid
        self.bid = bid0 + n
        used = kv.private + kv.tree.protected_size  # (kv.used)
        if used > self.kv_peak_used:
            self.kv_peak_used = used
        last_b = _run_batch(bid0 + n, rows, sum_kv0 + (n - 1) * rows, graph_bs, launches_base + n, ends[n - 1])
        self.gpu_free = last_b.gpu_end
        heap = self.fin_heap
        if heap and heap[0][0] <= launches_base + n:  # (the test _pop_finishers starts with)
            self._pop_finishers(last_b)  # as _launch_decode_rows after its launch (the run's last one)
        if overlap:
            due = _run_batch(bid0 + n - 1, rows, sum_kv0 + (n - 2) * rows, graph_bs, launches_base + n - 1, ends[n - 2])
            due.emit_s = ends[n - 2] + cpu[n - 1]
            self.inflight, self.due = last_b, due
            self.t = starts[n - 1]
        else:
            last_b.emit_s = last_b.gpu_end
            self.due = last_b
            self.t = last_b.gpu_end
        return True

    @staticmethod
    def _run_batch(bid: int, rows: int, sum_kv: int, graph_bs: int | None, g_after: int, gpu_end: float) -> Batch:
        return _run_batch(bid, rows, sum_kv, graph_bs, g_after, gpu_end)


@cython.locals(b=Batch)
def _run_batch(bid: int, rows: int, sum_kv: int, graph_bs: int | None, g_after: int, gpu_end: float) -> Batch:
    """A decode batch of a run (its numbers only: ``Batch.set_decode``, emitting ``rows`` tokens)."""
    b = Batch(bid, "decode")
    b._shape = None  # (b.set_decode(rows, sum_kv, graph_bs), inlined)
    b.dec_rows = rows
    b.dec_sum_kv = sum_kv
    b.dec_graph = graph_bs
    b.n_emit = rows
    b.g_after = g_after
    b.gpu_end = gpu_end
    return b
