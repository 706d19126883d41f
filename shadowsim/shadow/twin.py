"""One shadowed SGLang instance: a free-running simulator, the anchored view, the predicted/actual join, the
error windows and the counters — all driven by that instance's events, in event time.

``InstanceTwin.apply(event)`` is the only entry point; it is deterministic in the sequence of events it is given
(nothing here reads a clock except ``last_event_wall_ts``, which is injected and only exported). Replaying the same
events — from the start, or from a snapshot plus the events after it — yields the same predictions.

Event time (see docs/shadow.md):

* ``watermark = newest event time − allowed_lateness_s``.
* A request is simulated once its output length is known (``request_finished``, or ``output_tokens_hint`` from a
  trace). The simulator's clock advances to ``min(watermark, earliest arrival still waiting for its length)``, so
  it never runs past a request it has not been given. After ``max_wait_s`` of event time a waiting request is
  simulated with an estimated length (its ``max_new_tokens``, else the mean output of finished requests).
"""
from __future__ import annotations

import heapq
import logging
import math
from collections import deque
from collections.abc import Callable
from typing import Any

from simcore.events import (DecodeBatch, ForwardPass, MetricsSnapshot, PrefillBatch, RequestArrived,
                            RequestFinished, RequestFirstToken, ServerConfig)
from simcore.speculative import OnlineAcceptance
from shadowsim.shadow.anchor import Anchor, StepTimeline
from shadowsim.shadow.config import METRICS, DriftConfig, InstanceConfig, TimeConfig
from shadowsim.shadow.drift import DriftVerdict, ErrorWindow, OnlineCalibrator, ape, decide
from shadowsim.shadow.protocols import Completion, Engine, EngineFactory, Pending
from shadowsim.shadow.speculative import DEFAULT_DECODE_LOG_INTERVAL
from shadowsim.shadow.stats import InstanceStats

_log = logging.getLogger("shadowsim.shadow")
MAX_ESTIMATE_TOKENS = 4096  # SGLang clips unknown max_new_tokens to 4096 for its own estimate (§2.5)


class RecordRejected(ValueError):
    """An event the twin refuses before changing any state (e.g. server settings no engine can be built from).
    ``reason`` is a short label for the dead-letter counter."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def _observe_line(observed: dict[str, float], fields: dict) -> None:
    """A batch line's running / queue / token usage into ``observed`` (its fields read from the event's
    ``__dict__``: no pydantic attribute hook per field, once per line)."""
    v = fields["running_reqs"]
    if v is not None:
        observed["running"] = float(v)
    v = fields["queue_reqs"]
    if v is not None:
        observed["queue"] = float(v)
    v = fields["token_usage"]
    if v is not None:
        observed["kv_usage"] = float(v)


class InstanceTwin:
    """State and behaviour of one shadowed instance."""

    def __init__(self, instance_id: str, cfg: InstanceConfig, time_cfg: TimeConfig, drift_cfg: DriftConfig,
                 engine_factory: EngineFactory, clock: Callable[[], float], *,
                 max_simulated_queue: int | None = None) -> None:
        self.instance_id = instance_id
        #: the simulator's queue bound (limits.max_simulated_queue; None: the engine's default)
        self.max_simulated_queue = max_simulated_queue
        self.cfg, self.time_cfg, self.drift_cfg = cfg, time_cfg, drift_cfg
        # read once per event; the configs are frozen (a pydantic model's attribute costs its __getattr__ hook)
        self._lateness_s, self._recalibrate = time_cfg.allowed_lateness_s, drift_cfg.recalibrate
        self._factory, self._clock = engine_factory, clock
        self.server_config: dict[str, Any] = {}
        self.engine: Engine | None = None
        # the server_config the engine was built from: later server_config events change what is exported (model)
        # but not the simulator already built, and a restore must rebuild that same simulator (page size, KV pool,
        # latency model), not one from the newest config
        self.engine_config: dict[str, Any] | None = None
        self.epoch_ts: float | None = None
        self.max_ts = -math.inf
        self.pending: dict[str, Pending] = {}
        self._waiting: list[tuple[float, str]] = []  # heap of (arrival_ts, rid) not yet submitted; lazy deletion
        # heap of (arrival_ts, rid) of every pending request (lazy deletion): the oldest one in O(1), expiry in
        # O(log n) per request, so the work per event does not grow with the requests in flight
        self._by_arrival: list[tuple[float, str]] = []
        self.predicted: dict[str, dict[str, Any]] = {}  # rid -> predicted values, waiting for the actual
        self.actual: dict[str, dict[str, Any]] = {}  # rid -> actual values, waiting for the prediction
        self.observed: dict[str, float] = {}  # queue / running / kv_usage reported by the server
        self.output_sum, self.output_count = 0, 0
        self.arrival_seq = 0
        self.stats = InstanceStats()
        self.windows = {(m, mode): ErrorWindow(drift_cfg.window_s) for m in METRICS for mode in ("free", "anchored")}
        self.calibrator = OnlineCalibrator(drift_cfg.calibration_halflife_steps, drift_cfg.factor_bounds)
        self.timeline = StepTimeline()
        self.alerts: list[dict[str, Any]] = []  # verdict transitions: {ts, kind, on}
        self._verdict_state = {"model": False, "performance": False}
        self.done: dict[str, float] = {}  # joined rid -> finish ts, to drop duplicate deliveries (pruned)
        self._done_order: deque[tuple[float, str]] = deque()  # (ts, rid) in insertion order, for pruning
        self._anchor_obj: Anchor | None = None
        self._held = False  # an advance was deferred to flush()
        self.out: list[dict[str, Any]] = []  # joined records not yet flushed to the sink
        self.last_event_wall_ts: float | None = None
        # speculative decoding: the accepted-length distribution learned from the log's `accept len` fields
        self.acceptance = OnlineAcceptance(max_len=int(cfg.settings.get("speculative_num_steps") or 3) + 1)

    # ---- read-only facts ----------------------------------------------------------------------------------------
    @property
    def model(self) -> str:
        return str(self.server_config.get("model") or self.cfg.model)

    @property
    def watermark(self) -> float:
        return self.max_ts - self.time_cfg.allowed_lateness_s

    @property
    def simulated_ts(self) -> float | None:
        """Event time up to which the free-running twin has simulated."""
        return self.engine.now_ts if self.engine is not None else None

    def applied_factors(self) -> dict[str, float]:
        """Online recalibration: a factor is applied only once it has left the performance band (inside it, the
        difference is more likely model bias than a change of the server), and only within ``factor_bounds``."""
        d = self.drift_cfg
        out = {}
        for c, f in self.calibrator.factors.items():
            moved = self.calibrator.counts.get(c, 0) >= d.min_factor_samples and abs(f - 1.0) > d.performance_band
            out[c] = min(max(f, d.factor_bounds[0]), d.factor_bounds[1]) if moved else 1.0
        return out

    def has_pending_work(self) -> bool:
        """Requests waiting for their length, or submitted to the simulator and not yet predicted."""
        # pending = waiting + simulated-not-predicted + predicted-waiting-for-actual; only the last is idle
        return len(self.pending) > len(self.predicted)

    def shadow_lag_s(self, now_wall: float) -> float | None:
        """Wall time minus the event time simulated. An instance that has simulated everything it was given is
        idle, not behind: its lag stays what it was when its last event was applied."""
        sim = self.simulated_ts
        if sim is None or self.last_event_wall_ts is None:
            return None
        ref = now_wall if self.has_pending_work() else self.last_event_wall_ts
        return max(0.0, ref - sim)

    def mape(self, mode: str) -> dict[str, float]:
        return {m: self.windows[(m, mode)].mape() for m in METRICS}

    def verdict(self) -> DriftVerdict:
        mode = self.drift_cfg.verdict_mode
        return decide(self.mape(mode), {m: len(self.windows[(m, mode)]) for m in METRICS},
                      self.drift_cfg.mape_threshold, self.drift_cfg.min_samples, self.calibrator.factors,
                      self.calibrator.counts, {c: 1.0 for c in self.calibrator.factors},
                      self.drift_cfg.performance_band, self.drift_cfg.min_factor_samples)

    # ---- the event handler ---------------------------------------------------------------------------------------
    def apply(self, ev: Any, *, defer: bool = False) -> None:
        """Apply one event of this instance, then advance the simulator as far as event time allows. Raises
        ``RecordRejected`` (state unchanged) for an event it refuses; any other exception may leave the twin
        half-changed (the service then rebuilds it)."""
        kind, ts = ev.kind, ev.ts
        if kind == "server_config":
            self._check_config(ev)
        stats = self.stats
        stats.events_processed += 1
        self.last_event_wall_ts = self._clock()
        if self.epoch_ts is None:
            self.epoch_ts = math.floor(ts)  # whole seconds keep the simulated clock's float precision high
        eng = self.engine
        if eng is not None and ts < eng.now_ts:
            stats.events_late += 1  # behind the simulated time: applied, but the simulator cannot go back
        if ts > self.max_ts:  # max(self.max_ts, ts)
            self.max_ts = ts
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, ev)
        if defer and not self._waiting:
            # advance(defer=True) when no request waits for its length (nearly every event): hold the simulator
            # at the watermark; the same steps as there, without the call and the property reads
            eng = self.engine  # (the handler may have built it)
            if eng is None:
                return
            if not self._recalibrate and getattr(eng, "speculative", None) is None:
                eng.hold(self.max_ts - self._lateness_s)
                self._held = True
                return
        self.advance(defer=defer)

    @staticmethod
    def _config_fields(ev: ServerConfig) -> dict[str, Any]:
        return ev.model_dump(exclude_none=True, exclude={"kind", "ts", "source", "event_id", "schema_version",
                                                         "instance_id"})

    def _check_config(self, ev: ServerConfig) -> None:
        check = getattr(self._factory, "check", None)
        if check is None:
            return
        merged = {**self.server_config, **self._config_fields(ev)}
        if merged == self.server_config:
            return
        try:
            check(self.cfg, merged)
        except Exception as exc:  # noqa: BLE001 - any reason the engine could not be built
            text = " ".join(str(exc).split())[:300]
            raise RecordRejected("invalid_server_config", f"{type(exc).__name__}: {text}") from exc

    def _on_config(self, ev: ServerConfig) -> None:
        self.server_config.update(self._config_fields(ev))
        if ev.speculative_num_steps is not None:  # the server's resolved draft depth bounds the accepted length
            self.acceptance.max_len = ev.speculative_num_steps + 1

    def _still_simulated(self, rid: str) -> bool:
        """A request the twin has forgotten (expired) that its simulator still runs or queues (an overloaded
        twin can trail by more than the expiry): a new arrival or finish under its id is a late duplicate, and
        submitting it again would be a second request of the same id in the simulator."""
        return self.engine is not None and self.engine.holds(rid)

    def _on_arrived(self, ev: RequestArrived) -> None:
        rid = ev.request_id
        if rid in self.pending or rid in self.predicted or rid in self.done or self._still_simulated(rid):
            return  # a duplicate delivery of the same request
        key: tuple[int, ...] | None = None
        unit = 1
        if ev.block_hashes:
            key, unit = tuple(ev.block_hashes), ev.block_size_tokens or 1
        elif ev.token_ids:
            key = tuple(ev.token_ids)
        p = Pending(ev.ts, max(ev.prompt_tokens, 1), key, unit, ev.max_new_tokens, ev.ignore_eos, ev.priority,
                    seq=self._next_seq())
        self._add_pending(ev.request_id, p)
        if ev.output_tokens_hint:  # a replayed trace knows the length: no need to wait
            self._submit(ev.request_id, p, ev.output_tokens_hint)
        else:
            heapq.heappush(self._waiting, (p.arrival_ts, ev.request_id))

    def _next_seq(self) -> int:
        self.arrival_seq += 1
        return self.arrival_seq

    def _on_first_token(self, ev: RequestFirstToken) -> None:
        p = self.pending.get(ev.request_id)
        if p is not None:
            p.first_token_ts = ev.ts

    def _on_finished(self, ev: RequestFinished) -> None:
        rid = ev.request_id
        if rid in self.actual or rid in self.done:
            return  # a duplicate delivery
        p = self.pending.get(rid)
        if p is None and self._still_simulated(rid):
            return  # the finish of a request that expired while its simulation still runs
        arrival = ev.arrival_ts if ev.arrival_ts is not None else (
            p.arrival_ts if p is not None else ev.ts - (ev.e2e_s or 0.0))
        if p is None:  # a source that only reports finished requests
            p = Pending(arrival, max(ev.prompt_tokens, 1), seq=self._next_seq())
            self._add_pending(rid, p)
        if not p.submitted and ev.output_tokens >= 1:
            self._submit(rid, p, ev.output_tokens)
        ttft = ev.ttft_s if ev.ttft_s is not None else (
            p.first_token_ts - arrival if p.first_token_ts is not None else None)
        e2e = ev.e2e_s if ev.e2e_s is not None else ev.ts - arrival
        tpot = (e2e - ttft) / (ev.output_tokens - 1) if ttft is not None and ev.output_tokens > 1 else None
        actual = {"ttft": ttft, "tpot": tpot, "e2e": e2e, "cached_tokens": ev.cached_tokens,
                  "prompt_tokens": ev.prompt_tokens, "output_tokens": ev.output_tokens, "finish_ts": ev.ts,
                  "arrival_ts": arrival}
        first_ts = arrival + ttft if ttft is not None else None
        anchor = self._anchor().predict(arrival, first_ts, arrival + e2e, ev.output_tokens) if self.engine else None
        actual["anchored"] = anchor
        self._count("actual", actual)
        self.output_sum += ev.output_tokens
        self.output_count += 1
        self.actual[rid] = actual
        if rid in self.predicted:
            self._join(rid)

    def _on_prefill(self, ev: PrefillBatch) -> None:
        f = ev.__dict__  # the fields (see Anchor.on_prefill_batch)
        _observe_line(self.observed, f)
        # Always fed, even before the first request is submitted (which builds the engine): a step dropped here is
        # missing from S() for every request in flight, e.g. the first seconds of a long-prompt trace.
        a = self._anchor_obj
        if a is None or a.timeline is not self.timeline:  # self._anchor(), its check read here
            a = self._anchor()
        a.on_prefill_batch(ev)

    def _on_decode(self, ev: DecodeBatch) -> None:
        f = ev.__dict__  # the fields (see Anchor.on_prefill_batch)
        _observe_line(self.observed, f)
        if f["accept_len"] is not None:  # one line averages running × decode_log_interval verify passes
            self.acceptance.observe(ev.accept_len, max(1, ev.running_reqs or 0) * DEFAULT_DECODE_LOG_INTERVAL)
        a = self._anchor_obj
        if a is None or a.timeline is not self.timeline:  # self._anchor(), its check read here
            a = self._anchor()
        a.on_decode_batch(ev)

    def _on_forward(self, ev: ForwardPass) -> None:
        if ev.queued_reqs is not None:
            self.observed["queue"] = float(ev.queued_reqs)
        self._anchor().on_forward_pass(ev)

    def _on_metrics(self, ev: MetricsSnapshot) -> None:
        self._observe(ev.running_reqs, ev.queue_reqs, ev.token_usage)

    def _observe(self, running: float | None, queue: float | None, usage: float | None) -> None:
        for k, v in (("running", running), ("queue", queue), ("kv_usage", usage)):
            if v is not None:
                self.observed[k] = float(v)

    # ---- simulation ---------------------------------------------------------------------------------------------
    def _ensure_engine(self) -> Engine:
        if self.engine is None:
            assert self.epoch_ts is not None
            self.engine_config = dict(self.server_config)
            self.engine = self._factory(self.cfg, dict(self.engine_config), self.epoch_ts, None)
            self._bound_queue()
        return self.engine

    def _bound_queue(self) -> None:
        if self.max_simulated_queue is not None and hasattr(self.engine, "max_queued"):
            self.engine.max_queued = self.max_simulated_queue  # type: ignore[union-attr]

    def _anchor(self) -> Anchor:
        a = self._anchor_obj
        if a is None or a.timeline is not self.timeline:
            eng = self._ensure_engine()
            # the unscaled (as-profiled) model: the factors measure the server against the profile, not against
            # themselves (with recalibration on, the free twin runs the scaled model)
            a = self._anchor_obj = Anchor(eng.base_latency, eng.graph_sizes, self.calibrator, self.timeline,
                                          eng.overlap)
        return a

    def _add_pending(self, rid: str, p: Pending) -> None:
        self.pending[rid] = p
        heapq.heappush(self._by_arrival, (p.arrival_ts, rid))

    def _oldest_pending_ts(self) -> float | None:
        h = self._by_arrival
        while h:
            ts, rid = h[0]
            p = self.pending.get(rid)
            if p is not None and p.arrival_ts == ts:
                return ts
            heapq.heappop(h)  # joined or expired since
        return None

    def _submit(self, rid: str, p: Pending, output_len: int) -> None:
        eng = self._ensure_engine()
        p.submitted = True
        # A late request (arrival behind the simulated clock) is simulated as arriving now.
        arrival = max(p.arrival_ts, eng.now_ts)
        eng.submit(rid, arrival, p.prompt_tokens, max(output_len, 1), key=p.key, key_unit=p.key_unit,
                   max_new_tokens=p.max_new_tokens, ignore_eos=p.ignore_eos, priority=p.priority, order=p.seq)

    def _estimate_len(self, p: Pending) -> int:
        if p.max_new_tokens:
            return min(p.max_new_tokens, MAX_ESTIMATE_TOKENS)
        if self.output_count:
            return max(1, round(self.output_sum / self.output_count))
        return self.time_cfg.default_output_tokens

    def advance(self, *, defer: bool = False) -> None:
        """Move the simulator to ``min(watermark, earliest arrival still waiting for its length)``.

        ``defer``: only *hold* the simulator there (``Engine.hold``: its clock and submissions behave as if it had
        run) and leave the run, the joins of what it completes and the expiry of windows and requests to
        ``flush()``, which the service calls once per poll batch. The simulation and the predictions are the same
        either way; verdict transitions (``alerts``) are evaluated at the flush. With ``recalibrate`` on, factors
        change with every event, so the run is never deferred."""
        wm = self.watermark
        while self._waiting:
            arrival, rid = self._waiting[0]
            p = self.pending.get(rid)
            if p is None or p.submitted:
                heapq.heappop(self._waiting)
                continue
            if arrival < wm - self.time_cfg.max_wait_s:
                heapq.heappop(self._waiting)
                p.estimated = True
                self.stats.requests_estimated += 1
                self._submit(rid, p, self._estimate_len(p))
                continue
            break
        if self.engine is None:
            return
        horizon = min(wm, self._waiting[0][0]) if self._waiting else wm
        speculative = getattr(self.engine, "speculative", None) is not None
        if speculative and self.acceptance.lines:
            # the free twin draws accepted lengths from what the log's `accept len` fields taught so far; like
            # the factors, the acceptance changes with events, so a speculative twin is never deferred
            self.engine.set_acceptance(self.acceptance.mean)  # type: ignore[attr-defined]
        if self.drift_cfg.recalibrate:
            self.engine.set_factors(self.applied_factors())
        elif defer and not speculative:
            self.engine.hold(horizon)
            self._held = True
            return
        self._held = False
        for c in self.engine.advance_to(horizon):
            self._on_completion(c)
        take_shed = getattr(self.engine, "take_shed", None)
        if take_shed is not None:
            for rid in take_shed():
                self._on_shed(rid)
        # Windows cover the last window_s of *simulated* time: samples join when the simulation reaches them, which
        # can trail the watermark by a long request's lifetime.
        for w in self.windows.values():
            w.expire(self.engine.now_ts)
        self._gc(wm)
        oldest = self._oldest_pending_ts()
        self.timeline.prune(min(oldest if oldest is not None else wm, wm) - 1.0)

    def flush(self) -> None:
        """Run a deferred advance (see ``advance``); a no-op when none is held."""
        if self._held:
            self.advance()

    def _on_completion(self, c: Completion) -> None:
        pred = {"ttft": c.ttft_s, "tpot": c.tpot_s if c.output_len > 1 else None, "e2e": c.e2e_s,
                "cached_tokens": c.cached_tokens, "prompt_tokens": c.input_len, "output_tokens": c.output_len}
        self._count("predicted", pred)
        if c.rid not in self.pending:
            return  # expired before its simulation finished: nothing will join it (kept, it would never leave)
        self.predicted[c.rid] = pred
        if c.rid in self.actual:
            self._join(c.rid)

    def _on_shed(self, rid: str) -> None:
        """The simulator refused the request at its full queue (``limits.max_simulated_queue``): it will never be
        predicted, so it is forgotten like an expired request (its id kept as done, so a late finish is dropped)
        and counted in ``requests_shed``."""
        if self.pending.pop(rid, None) is None:
            return  # forgotten already (expired, counted there)
        self.predicted.pop(rid, None)
        self.actual.pop(rid, None)
        self.stats.requests_shed += 1
        if self.stats.requests_shed == 1 or self.stats.requests_shed % 10_000 == 0:
            _log.warning("twin %s: the simulator's queue is full (limits.max_simulated_queue = %s): request %r and "
                         "%d in all were not simulated (shadowsim_requests_shed_total)", self.instance_id[:80],
                         self.max_simulated_queue, rid[:80], self.stats.requests_shed)
        self._mark_done(rid, self.watermark)

    def _count(self, source: str, v: dict[str, Any]) -> None:
        st = self.stats
        for m in METRICS:
            if v.get(m) is not None:
                st.latency[m][source].observe(v[m])
        st.counters["requests_finished"][source] += 1
        st.counters["output_tokens"][source] += int(v["output_tokens"])
        st.counters["prompt_tokens"][source] += int(v["prompt_tokens"])
        st.counters["cached_tokens"][source] += int(v.get("cached_tokens") or 0)

    def _join(self, rid: str) -> None:
        pred, act = self.predicted.pop(rid), self.actual.pop(rid)
        p = self.pending.pop(rid, None)
        ts = act["finish_ts"]
        self._mark_done(rid, ts)
        errors: dict[str, dict[str, float]] = {"free": {}, "anchored": {}}
        anchored = act.pop("anchored") or {}
        for m in METRICS:
            a = act.get(m)
            if a is None:
                continue
            for mode, src in (("free", pred), ("anchored", anchored)):
                if src.get(m) is None:
                    continue
                e = ape(src[m], a)
                if e is None:
                    continue
                errors[mode][m] = e
                self.stats.ape[m][mode].observe(e)
                self.windows[(m, mode)].add(ts, e)
        self.out.append({"instance": self.instance_id, "request_id": rid, "arrival_ts": act["arrival_ts"],
                         "finish_ts": ts, "estimated_length": bool(p.estimated) if p else False,
                         "predicted": pred, "anchored": anchored, "actual": act, "ape": errors})
        self._update_alerts(ts)

    def _update_alerts(self, ts: float) -> None:
        v = self.verdict()
        for kind, on in (("model", v.model), ("performance", v.performance)):
            if on != self._verdict_state[kind]:
                self._verdict_state[kind] = on
                self.alerts.append({"ts": ts, "kind": kind, "on": on,
                                    "mape": {k: round(x, 6) for k, x in v.mape.items()}})

    def _mark_done(self, rid: str, ts: float) -> None:
        self.done[rid] = ts
        self._done_order.append((ts, rid))

    def _gc(self, wm: float) -> None:
        """Bounded memory on lossy streams, in O(1) amortized work per event: a request that arrived more than
        ``max_wait_s + pending_expiry_margin_s`` before the watermark and is still not joined (its finish, or its
        simulation, never came) is forgotten and counted in ``requests_expired``; its id is remembered as done,
        so a finish that still arrives is dropped like a duplicate. Ids of joined requests are remembered for
        ``10 × max_wait_s`` of event time to drop duplicate deliveries."""
        tc = self.time_cfg
        expiry = tc.expiry_before(wm)
        h = self._by_arrival
        while h and h[0][0] < expiry:
            ts, rid = heapq.heappop(h)
            p = self.pending.get(rid)
            if p is None or p.arrival_ts != ts:
                continue
            del self.pending[rid]
            self.predicted.pop(rid, None)
            self.actual.pop(rid, None)
            self.stats.requests_expired += 1
            self._mark_done(rid, wm)
        horizon = wm - 10 * tc.max_wait_s
        order = self._done_order
        while order and order[0][0] < horizon:
            ts, rid = order.popleft()
            if self.done.get(rid) == ts:
                del self.done[rid]

    # ---- snapshot -----------------------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Domain state as plain JSON-able data (floats kept exactly: JSON round-trips Python floats)."""
        self.flush()
        return {
            "instance_id": self.instance_id,
            "server_config": self.server_config,
            "engine_config": self.engine_config,
            "epoch_ts": self.epoch_ts,
            "max_ts": self.max_ts if math.isfinite(self.max_ts) else None,
            "pending": {rid: vars(p) | {"key": list(p.key) if p.key is not None else None}
                        for rid, p in self.pending.items()},
            "predicted": self.predicted,
            "actual": self.actual,
            "observed": self.observed,
            "output_sum": self.output_sum,
            "output_count": self.output_count,
            "arrival_seq": self.arrival_seq,
            "stats": self.stats.snapshot(),
            "windows": {f"{m}/{mode}": w.snapshot() for (m, mode), w in self.windows.items()},
            "calibrator": self.calibrator.snapshot(),
            "timeline": self.timeline.snapshot(),
            "done": self.done,
            "alerts": self.alerts,
            "verdict_state": self._verdict_state,
            "engine": self.engine.snapshot() if self.engine is not None else None,
            "acceptance": self.acceptance.snapshot(),
        }

    def restore(self, data: dict[str, Any]) -> None:
        """Rebuild this twin from ``snapshot()`` output (the exporter-visible wall times restart empty)."""
        self.server_config = dict(data["server_config"])
        self.epoch_ts = data["epoch_ts"]
        self.max_ts = data["max_ts"] if data["max_ts"] is not None else -math.inf
        self.pending = {}
        for rid, d in data["pending"].items():
            d = dict(d)
            d["key"] = tuple(d["key"]) if d["key"] is not None else None
            self.pending[rid] = Pending(**d)
        self._waiting = [(p.arrival_ts, rid) for rid, p in self.pending.items() if not p.submitted]
        heapq.heapify(self._waiting)
        self._by_arrival = [(p.arrival_ts, rid) for rid, p in self.pending.items()]
        heapq.heapify(self._by_arrival)
        self.predicted, self.actual = dict(data["predicted"]), dict(data["actual"])
        self.observed = dict(data["observed"])
        self.output_sum, self.output_count = int(data["output_sum"]), int(data["output_count"])
        self.arrival_seq = int(data["arrival_seq"])
        self.stats = InstanceStats.restore(data["stats"])
        for key, samples in data["windows"].items():
            m, mode = key.split("/")
            self.windows[(m, mode)] = ErrorWindow.restore(self.drift_cfg.window_s, samples)
        self.calibrator.restore(data["calibrator"])
        self.timeline = StepTimeline.restore(data["timeline"])
        self.done = {k: float(v) for k, v in data["done"].items()}
        self._done_order = deque((t, k) for k, t in self.done.items())  # the dict keeps insertion order
        self._anchor_obj = None
        self.alerts = list(data["alerts"])
        self._verdict_state = dict(data["verdict_state"])
        if data.get("acceptance") is not None:  # snapshots before speculative support have none
            self.acceptance.restore(data["acceptance"])
        if data["engine"] is not None:
            assert self.epoch_ts is not None
            # snapshots written before engine_config was kept: the newest server_config is all there is
            built = data.get("engine_config")
            self.engine_config = dict(built if built is not None else data["server_config"])
            self.engine = self._factory(self.cfg, dict(self.engine_config), self.epoch_ts, data["engine"])
            self._bound_queue()


_HANDLERS: dict[str, Callable[[InstanceTwin, Any], None]] = {
    "server_config": InstanceTwin._on_config,
    "request_arrived": InstanceTwin._on_arrived,
    "request_first_token": InstanceTwin._on_first_token,
    "request_finished": InstanceTwin._on_finished,
    "prefill_batch": InstanceTwin._on_prefill,
    "decode_batch": InstanceTwin._on_decode,
    "forward_pass": InstanceTwin._on_forward,
    "metrics_snapshot": InstanceTwin._on_metrics,
}
