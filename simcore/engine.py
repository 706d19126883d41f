"""``simulate``: run one server on one workload to completion and collect the results.

A workload is anything with ``start(env, server)`` (the SimPy processes of :mod:`simcore.workload`), or a plain
sequence of :class:`RequestSpec`, which is replayed at the recorded arrival times.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

from simcore._simpy import simpy

from simcore.perf.base import LatencyModel
from simcore.request import RequestSpec
from simcore.rng import LazyGenerator
from simcore.results import RequestRecord, StepRecord, Summary, summarize
from simcore.server import Server
from simcore.settings import ServerSettings


class Workload(Protocol):
    def start(self, env: simpy.Environment, server: Any) -> Any: ...


class SimResult:
    """Everything a run produced. ``records`` are in finish order; ``wall_time_s`` is filled by the caller.
    (A plain class, not a dataclass: start-up, simcore/values.py.)"""

    def __init__(self, records: list[RequestRecord], steps: int, sim_time_s: float, kv_peak_usage: float,
                 num_retractions: int, itl_values_s: list[float] | None = None, itl_weights: list[int] | None = None,
                 wall_time_s: float = 0.0, unfinished: int = 0) -> None:
        self.records = records
        self.steps = steps
        self.sim_time_s = sim_time_s
        self.kv_peak_usage = kv_peak_usage
        self.num_retractions = num_retractions
        self.itl_values_s = itl_values_s if itl_values_s is not None else []
        self.itl_weights = itl_weights if itl_weights is not None else []
        self.wall_time_s = wall_time_s
        self.unfinished = unfinished

    def __repr__(self) -> str:
        return (f"SimResult({len(self.records)} records, steps={self.steps}, sim_time_s={self.sim_time_s}, "
                f"num_retractions={self.num_retractions}, unfinished={self.unfinished})")

    def summary(self) -> dict[str, Any]:
        """The ``shadowsim predict --json`` summary."""
        return summarize(self.records, Summary(self.sim_time_s, self.wall_time_s, self.kv_peak_usage,
                                               self.num_retractions, self.itl_values_s, self.itl_weights,
                                               self.steps))


class _Replay:
    """Submit each spec at its own ``arrival_s`` (absolute simulated time)."""

    def __init__(self, specs: Sequence[RequestSpec]) -> None:
        self.specs = sorted(specs, key=lambda r: r.arrival_s)
        self.submitted: list[RequestSpec] = []

    def _watch(self, ev: simpy.Event) -> None:
        pass

    def planned_arrivals(self, start_s: float) -> list[tuple[float, RequestSpec]]:
        """(submission time, spec) of everything :meth:`start` submits, at the float times it would."""
        out, now = [], start_s
        for r in self.specs:
            if r.arrival_s > now:
                now = now + (r.arrival_s - now)  # what env.timeout advances the clock to
            out.append((now, r))
        return out

    def start(self, env: simpy.Environment, server: Server):  # type: ignore[no-untyped-def]
        def run():  # type: ignore[no-untyped-def]
            for r in self.specs:
                if r.arrival_s > env.now:
                    yield env.timeout(r.arrival_s - env.now)
                server.submit(r)
        return env.process(run())


def simulate(settings: ServerSettings, latency: LatencyModel, workload: Workload | Sequence[RequestSpec], *,
             kv_capacity_tokens: int, key_unit: int = 1, seed: int = 0, until: float | None = None,
             progress: Callable[[float, int], None] | None = None, progress_every_s: float = 10.0,
             observer: Callable[[StepRecord], None] | None = None, fast: bool = True,
             **server_kw: Any) -> SimResult:
    """Simulate ``workload`` on one server until every request finished (or ``until`` simulated seconds).

    ``progress(sim_time_s, finished)`` is called every ``progress_every_s`` simulated seconds (it adds a SimPy
    event there, so leave it None in equivalence tests). ``seed`` feeds the only random choices (``random``
    policy). Extra keywords go to :class:`Server` (``max_running_requests``, ``tokenize_s``,
    ``decode_run_spacing``: 0 prices every decode step exactly, docs/architecture.md "Decode runs", ...).
    With ``fast`` and no ``until``, open-loop workloads (``planned_arrivals``) are handed to the server up front.
    """
    env = simpy.Environment()
    # the latency model's fixed front-end latency per request (HTTP, template, tokenizer; CalibrationProfile)
    # reaches the scheduler as tokenization delay, on top of any explicit ``tokenize_s``
    frontend_s = float(getattr(latency, "frontend_s", 0.0))
    if frontend_s > 0:
        server_kw["tokenize_s"] = server_kw.get("tokenize_s", 0.0) + frontend_s
    wl: Workload = workload if hasattr(workload, "start") else _Replay(list(workload))  # type: ignore[arg-type]
    planned = getattr(wl, "planned_arrivals", None) if fast and until is None else None
    # open loop, nobody watching: no finish event is needed at its time (the records are the result), so the
    # server spends no SimPy event on a finish and need not yield for it; the records are the same
    silent = planned is not None and progress is None and server_kw.get("on_finish") is None
    # DP attention (simcore.dp_attention): dp_size schedulers in lockstep, priced together; per-rank pool sizes
    cls: Any = Server
    if settings.enable_dp_attention:
        from simcore.dp_attention import DpAttentionServer
        cls = DpAttentionServer
    server = cls(env, settings, kv_capacity_tokens, latency, key_unit=key_unit,
                 rng=LazyGenerator(seed), observer=observer, fast=fast, signal_finishes=not silent, **server_kw)
    if planned is not None:
        # open loop: every arrival is known; handing them over now spares one SimPy event per request and lets
        # decode runs pass over arrivals that cannot be admitted (same results: the server ingests a request
        # only at the first iteration at or after its arrival either way)
        procs = None
        for at, spec in planned(env.now):
            wl.submitted.append(spec)  # type: ignore[attr-defined]
            wl._watch(server.submit(spec, at_s=at))  # type: ignore[attr-defined]
    else:
        procs = wl.start(env, server)
    if progress is not None:
        def tick():  # type: ignore[no-untyped-def]
            while True:
                yield env.timeout(progress_every_s)
                progress(env.now, len(server.records))
                if server.idle and not server.pending and env.peek() == float("inf"):
                    return
        env.process(tick())
    if until is not None:
        env.run(until=until)
    else:
        env.run()
    del procs
    if silent and hasattr(wl, "finished"):
        wl.finished = len(server.records)  # what the finish events' callbacks would have counted
    last = max((r.finish_s for r in server.records), default=env.now)
    return SimResult(server.records, server.steps, last if until is None else env.now, server.kv_peak_usage,
                     server.num_retractions, server.itl_vals, server.itl_w, 0.0, len(server.reqs))
