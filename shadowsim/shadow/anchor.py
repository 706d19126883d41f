"""Anchored mode: predict a request's latencies from the batches the server *actually* ran.

The free-running twin simulates the scheduler too, so a queueing mistake early on shifts every later prediction.
The anchored view removes that: it takes the observed sequence of forward passes (``forward_pass`` events, or
failing those the ``Prefill batch`` / ``Decode batch`` log lines, each decode line standing for
``decode_log_interval`` steps) and asks the latency model only for each step's duration. ``S(t)`` is the summed
*predicted* duration of the observed steps that ended by event time ``t``; a request that arrived at ``a``, got its
first token at ``f`` and finished at ``e`` is predicted as

    TTFT = S(f) − S(a),   e2e = S(e) − S(a),   TPOT = (S(e) − S(f)) / (output_tokens − 1).

So anchored errors measure the latency model alone (plus CPU gaps the events do not show), and do not accumulate.
The same observed/predicted step pairs feed the online calibrator (performance drift).
"""
from __future__ import annotations

import bisect
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from simcore.events import DecodeBatch, ForwardPass, PrefillBatch
from simcore.perf.base import BatchShape, LatencyModel, LinearLatencyModel
from shadowsim.shadow.drift import OnlineCalibrator

#: SGLang prints one ``Decode batch`` line every 40 decode steps (``--decode-log-interval``).
DECODE_LOG_INTERVAL = 40


def padded_bs(bs: int, graph_sizes: tuple[int, ...]) -> int | None:
    """The captured CUDA-graph batch size a decode batch of ``bs`` pads to; None = runs eagerly."""
    i = bisect.bisect_left(graph_sizes, bs)
    return graph_sizes[i] if i < len(graph_sizes) else None


def step_time_s(latency: LatencyModel, shape: BatchShape, overlap: bool = True) -> float:
    """Wall time one step adds: with overlap scheduling the CPU work hides under the previous GPU step."""
    st = latency.step_time(shape)
    return max(st.gpu_s, st.cpu_s) if overlap else st.gpu_s + st.cpu_s


@dataclass
class StepTimeline:
    """Cumulative predicted step time of the observed steps, as a step function of event time."""

    ts: list[float] = field(default_factory=list)
    cum_s: list[float] = field(default_factory=list)
    saw_forward_passes: bool = False

    def total(self) -> float:
        return self.cum_s[-1] if self.cum_s else 0.0

    def add(self, ts: float, predicted_s: float) -> None:
        # Events of one instance arrive nearly in time order; an out-of-order step is placed at the newest time so
        # that S stays monotone (its duration is counted slightly late rather than lost).
        tss, cum = self.ts, self.cum_s
        if tss:
            last = tss[-1]
            tss.append(last if last > ts else ts)  # max(ts, last)
            cum.append(cum[-1] + predicted_s)
        else:
            tss.append(ts)
            cum.append(0.0 + predicted_s)

    def at(self, ts: float) -> float:
        """S(ts): summed predicted time of the steps that ended at or before ``ts``."""
        i = bisect.bisect_right(self.ts, ts)
        return self.cum_s[i - 1] if i else 0.0

    def prune(self, before_ts: float) -> None:
        """Forget steps older than ``before_ts``; keep one so that S() stays right for later times."""
        i = bisect.bisect_left(self.ts, before_ts)
        # Deleting from the front of a list costs its length: do it once enough has piled up (a quarter of the
        # list, at least 64 steps), so the work per event stays O(1) amortized however long requests live.
        if i > 1 and i - 1 >= max(64, len(self.ts) >> 2):
            del self.ts[: i - 1]
            del self.cum_s[: i - 1]

    def snapshot(self) -> dict[str, Any]:
        return {"ts": list(self.ts), "cum_s": list(self.cum_s), "fp": self.saw_forward_passes}

    @classmethod
    def restore(cls, data: dict[str, Any]) -> StepTimeline:
        return cls(ts=[float(x) for x in data["ts"]], cum_s=[float(x) for x in data["cum_s"]],
                   saw_forward_passes=bool(data["fp"]))


def shape_of_forward_pass(ev: ForwardPass, graph_sizes: tuple[int, ...]) -> tuple[str, BatchShape]:
    """(op class, batch shape) of a reported forward pass. Per-request splits are unknown, so a prefill is one
    aggregated extend (exact for models linear in tokens, the usual case for GEMM-dominated prefill)."""
    mode = ev.forward_mode.lower()
    is_decode = mode in ("decode", "target_verify", "draft_extend") or (mode != "mixed" and ev.num_extend_tokens == 0)
    if is_decode:
        bs = ev.num_decode_reqs if ev.num_decode_reqs is not None else ev.batch_size
        return "decode", BatchShape(num_decode=bs, decode_sum_kv=ev.sum_kv_tokens or 0,
                                    cuda_graph_bs=padded_bs(bs, graph_sizes))
    n_dec = ev.num_decode_reqs or 0
    # Per-request lengths are not reported: spread the totals evenly over the prefill requests (attention cost
    # is per request, so one aggregated request would overstate it).
    n = max(1, ev.num_prefill_reqs or (ev.batch_size - n_dec) or 1)
    ext, pre = _spread(ev.num_extend_tokens, n), _spread(ev.num_cached_tokens or 0, n)
    return "prefill", BatchShape(extend_lens=ext, prefix_lens=pre, num_decode=n_dec,
                                 decode_sum_kv=(ev.sum_kv_tokens or 0) if n_dec else 0)


def _spread(total: int, n: int) -> tuple[int, ...]:
    if n == 1:
        return (total,)
    q, r = divmod(total, n)
    return tuple(q + (1 if i < r else 0) for i in range(n))


@dataclass
class Anchor:
    """Feeds a ``StepTimeline`` and an ``OnlineCalibrator`` from observed batch events of one instance."""

    latency: LatencyModel
    graph_sizes: tuple[int, ...]
    calibrator: OnlineCalibrator
    timeline: StepTimeline = field(default_factory=StepTimeline)
    overlap: bool = True

    def on_forward_pass(self, ev: ForwardPass) -> None:
        op, shape = shape_of_forward_pass(ev, self.graph_sizes)
        st = self.latency.step_time(shape)
        self.timeline.saw_forward_passes = True
        self.timeline.add(ev.ts, max(st.gpu_s, st.cpu_s) if self.overlap else st.gpu_s + st.cpu_s)
        # duration_s is the GPU forward alone: compare it with the model's GPU time
        self.calibrator.observe(op, ev.duration_s, st.gpu_s)

    def on_prefill_batch(self, ev: PrefillBatch) -> None:
        if self.timeline.saw_forward_passes:
            return  # the exact per-step feed is there; log lines would count the same steps twice
        f = ev.__dict__  # the event's fields: pydantic keeps them in the instance dict, and reading them there skips
        # BaseModel.__getattr__'s hook on every attribute (tests/shadowsim/test_anchor.py checks they are the same)
        n = max(1, f["new_seqs"])  # at most MAX_BATCH_REQS (simcore.events)
        lat = self.latency
        if lat.__class__ is LinearLatencyModel:
            # LinearLatencyModel.step_time of this shape, written out: the same terms in the same order, without
            # the frozen BatchShape and StepTime (~1.7 µs of the ~3.7 µs this line cost). The extend and prefix sums
            # of the spread are its totals (integers: _spread adds up exactly); the shape is never idle (one extend)
            # and has no decode (cuda_graph_bs None, num_decode 0, decode_sum_kv 0).
            new_tokens = f["new_tokens"]
            extend = (new_tokens if new_tokens > 1 else 1) if n == 1 else sum(_spread(max(new_tokens, n), n))
            prefix = f["cached_tokens"] if n == 1 else sum(_spread(f["cached_tokens"], n))
            gpu = (lat.base_s + lat.per_extend_token_s * extend + lat.per_prefix_token_s * prefix
                   + lat.per_decode_req_s * 0 + lat.per_kv_token_s * 0)
            cpu = lat.cpu_s
        else:
            if n == 1:  # _spread of one request, without the calls
                new_tokens = ev.new_tokens
                shape = BatchShape(extend_lens=(new_tokens if new_tokens > 1 else 1,), prefix_lens=(ev.cached_tokens,))
            else:
                shape = BatchShape(extend_lens=_spread(max(ev.new_tokens, n), n),
                                   prefix_lens=_spread(ev.cached_tokens, n))
            st = lat.step_time(shape)  # step_time_s, written out (once per batch line)
            gpu, cpu = st.gpu_s, st.cpu_s
        self.timeline.add(f["ts"], (cpu if cpu > gpu else gpu) if self.overlap else gpu + cpu)  # max(gpu, cpu)

    def on_decode_batch(self, ev: DecodeBatch) -> None:
        f = ev.__dict__  # the event's fields (see on_prefill_batch)
        bs = f["running_reqs"]
        if bs == 0:
            return
        sizes = self.graph_sizes
        i = bisect_left(sizes, bs)  # padded_bs(bs, sizes), written out (once per batch line)
        lat = self.latency
        if lat.__class__ is LinearLatencyModel:
            # LinearLatencyModel.step_time of this shape, written out (as in on_prefill_batch): no extend, so the
            # token sums are 0; the batch is the padded size, else the running requests (never 0 here: not idle)
            gpu = (lat.base_s + lat.per_extend_token_s * 0 + lat.per_prefix_token_s * 0
                   + lat.per_decode_req_s * (sizes[i] if i < len(sizes) else bs)
                   + lat.per_kv_token_s * (f["kv_tokens"] or 0))
            cpu = lat.cpu_s
        else:
            shape = BatchShape(num_decode=bs, decode_sum_kv=ev.kv_tokens or 0,
                               cuda_graph_bs=sizes[i] if i < len(sizes) else None)
            st = lat.step_time(shape)  # step_time_s, written out (once per batch line)
            gpu, cpu = st.gpu_s, st.cpu_s
        pred = (cpu if cpu > gpu else gpu) if self.overlap else gpu + cpu  # max(gpu, cpu)
        throughput = f["gen_throughput_tok_s"]
        if throughput:
            # bs tokens per decode step (bs × accept len for a speculative server, whose step is one iteration):
            # observed step time = tokens / throughput (includes interleaved prefills, so it is only used when no
            # forward-pass feed exists).
            accept = f["accept_len"]
            tokens = bs * (accept if accept else 1.0)
            if not self.timeline.saw_forward_passes:
                self.calibrator.observe("decode", tokens / throughput, pred)
        if not self.timeline.saw_forward_passes:
            self.timeline.add(f["ts"], DECODE_LOG_INTERVAL * pred)

    def predict(self, arrival_ts: float, first_token_ts: float | None, finish_ts: float,
                output_tokens: int) -> dict[str, float] | None:
        """Anchored TTFT/TPOT/e2e of one finished request, or None when no steps were observed in its lifetime."""
        s_a, s_e = self.timeline.at(arrival_ts), self.timeline.at(finish_ts)
        if s_e <= s_a:
            return None
        out: dict[str, float] = {"e2e": s_e - s_a}
        if first_token_ts is not None:
            s_f = self.timeline.at(first_token_ts)
            out["ttft"] = s_f - s_a
            if output_tokens > 1:
                out["tpot"] = (s_e - s_f) / (output_tokens - 1)
        return out
