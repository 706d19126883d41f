"""Live-shadow benchmark: lag at a sustained event rate, memory per shadowed instance, maximum events/s.

Workload: the demo scenario (EMULATED instances: real arrival traces through a noisy reference twin, ~230 events/s
per 3 instances, mostly forward-pass and batch events), replicated under new instance ids until the event rate
reaches the target (default 2,000 events/s, 27 instances). The service runs in process on an in-memory source
(no Kafka: bench_kafka measures the transport), paced by the wall clock: a record is released when its event time
is due. Figures:

* ``apply_lag_p99_s``       — wall time at which an event was applied minus its event time (the processing
                              lag the service adds), p99 over all events;
* ``sim_lag_p99_s``         — wall time minus the simulated time of each twin (the ``shadowsim_shadow_lag_seconds``
                              gauge), sampled every 0.25 s; includes waiting for output lengths (live mode);
* ``sim_lag_hint_p99_s``    — the same when lengths are known at arrival (trace replay: ``output_tokens_hint``),
                              i.e. the lag the service itself adds: allowed lateness + processing;
* ``max_events_s``          — events applied per second when fed as fast as possible;
* ``memory_per_instance_kb``— traced Python memory of the service per shadowed instance after the run.

Run: ``python -m benchmarks.bench_shadow [RATE_EV_S] [SECONDS]``. Prints a table and one JSON line.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
import tracemalloc
from typing import Any

import numpy as np

RATE_DEFAULT = 2000.0
SECONDS_DEFAULT = 20.0


def _workload(rate: float, seconds: float, hint: bool) -> tuple[Any, list[Any], int]:
    from shadowsim.demo.scenario import as_events, build_scenario, scenario_events
    from shadowsim.shadow.config import InstanceConfig

    sc = build_scenario(seconds + 10.0, snapshot_dir=tempfile.mkdtemp())
    full = as_events(scenario_events(sc, 0.0))
    lengths = {e.request_id: e.output_tokens for e in full if e.kind == "request_finished"}
    base = [e for e in full if e.ts < seconds]
    per_copy = len(base) / seconds
    copies = max(1, round(rate / per_copy))
    events = []
    for c in range(copies):
        for e in base:
            upd: dict[str, Any] = {"instance_id": f"{e.instance_id}-c{c}"}
            if hint and e.kind == "request_arrived" and e.request_id in lengths:
                upd["output_tokens_hint"] = lengths[e.request_id]
            events.append(e.model_copy(update=upd))
    events.sort(key=lambda e: e.ts)
    instances = {e.instance_id: sc.shadow.instances[e.instance_id.rsplit("-c", 1)[0]] for e in events}
    cfg = sc.shadow.model_copy(update={"instances": dict[str, InstanceConfig](instances)})
    return cfg, events, copies * len(sc.instances)


def _records(events: list[Any]) -> list[Any]:
    from shadowsim.shadow.sources import Record

    parts: dict[str, int] = {}
    offs: dict[int, int] = {}
    out = []
    for e in events:
        p = parts.setdefault(e.instance_id, len(parts) % 8)
        out.append(Record("bench", p, offs.get(p, 0), None, [e]))
        offs[p] = offs.get(p, 0) + 1
    return out


class _Paced:
    """Memory source releasing records when wall time reaches their event time (+ ``t0``)."""

    def __init__(self, recs: list[Any], t0: float, on_assign: Any, paced: bool = True) -> None:
        self.recs, self.t0, self.i, self.paced = recs, t0, 0, paced
        self.on_assign, self.assigned = on_assign, False

    def poll_batch(self, timeout_s: float = 1.0, max_records: int | None = None) -> list[Any]:
        if not self.assigned:
            self.assigned = True
            self.on_assign({("bench", p) for p in range(8)})
        if self.i >= len(self.recs):
            time.sleep(0.01)
            return []
        now = time.time() - self.t0 if self.paced else float("inf")
        j = self.i
        while j < len(self.recs) and self.recs[j].events[0].ts <= now and j - self.i < 2000:
            j += 1
        if j == self.i:
            time.sleep(min(0.005, max(0.0, self.recs[j].events[0].ts - now)))
        out, self.i = self.recs[self.i:j], j
        return out

    def commit(self, offsets: Any) -> bool:
        return True

    def seek(self, tp: Any, off: int) -> None:
        pass

    def assignment(self) -> set[Any]:
        return {("bench", p) for p in range(8)} if self.assigned else set()

    def close(self) -> None:
        pass


def _run(cfg: Any, recs: list[Any], paced: bool) -> dict[str, Any]:
    from shadowsim.shadow.engine import engine_factory
    from shadowsim.shadow.service import ShadowService

    t0 = time.time() + 0.5 if paced else 0.0
    apply_lag: list[float] = []
    sim_lag: list[float] = []
    last_sample = [0.0]
    svc_box: list[Any] = []

    def make(on_assign: Any, on_revoke: Any) -> _Paced:
        return _Paced(recs, t0, on_assign, paced)

    from shadowsim.shadow.config import SnapshotConfig

    # a fresh state directory per run: a previous run's snapshots would make this one skip its records
    cfg = cfg.model_copy(update={"snapshot": SnapshotConfig(dir=tempfile.mkdtemp(), every_s=10.0)})
    svc = ShadowService(cfg, make, engine_factory)
    svc_box.append(svc)

    def on_batch(s: Any) -> None:
        now = time.time()
        src = s.source
        # every record released in this batch was applied by now: lag = now − its due wall time
        for r in src.recs[src.last_i:src.i] if hasattr(src, "last_i") else []:
            apply_lag.append(now - (t0 + r.events[0].ts))
        src.last_i = src.i
        if now - last_sample[0] >= 0.25:
            last_sample[0] = now
            for t in s.twins.values():
                # the exported gauge, with event time shifted onto the bench's wall clock
                t.last_event_wall_ts = None if t.last_event_wall_ts is None else t.last_event_wall_ts - t0
                lag = t.shadow_lag_s(now - t0)
                t.last_event_wall_ts = None if t.last_event_wall_ts is None else t.last_event_wall_ts + t0
                if lag is not None:
                    sim_lag.append(lag)

    import threading

    stop = threading.Event()

    def hook(s: Any) -> None:
        on_batch(s)
        if s.source.i >= len(recs):
            stop.set()

    src_start = time.time()
    svc.source.last_i = 0  # type: ignore[attr-defined]
    n = svc.run(stop=stop, on_batch=hook, poll_timeout_s=0.0)
    wall = time.time() - src_start
    assert n == len(recs), f"processed {n} of {len(recs)} records"  # a figure over a partial run would lie
    return {"events": sum(len(r.events) for r in recs), "records": n, "wall_s": wall,
            "apply_lag": apply_lag, "sim_lag": sim_lag, "service": svc}


def _p99(xs: list[float]) -> float:
    return float(np.percentile(xs, 99)) if xs else float("nan")


def bench(rate: float = RATE_DEFAULT, seconds: float = SECONDS_DEFAULT) -> dict[str, float]:
    res: dict[str, float] = {"target_events_s": rate, "seconds": seconds}
    cfg, events, n_inst = _workload(rate, seconds, hint=False)
    recs = _records(events)
    res["instances"] = n_inst
    res["events"] = len(events)
    res["offered_events_s"] = len(events) / seconds
    live = _run(cfg, recs, paced=True)
    res["apply_lag_p50_s"] = float(np.percentile(live["apply_lag"], 50))
    res["apply_lag_p99_s"] = _p99(live["apply_lag"])
    res["sim_lag_p50_s"] = float(np.percentile(live["sim_lag"], 50))
    res["sim_lag_p99_s"] = _p99(live["sim_lag"])
    cfg_h, events_h, _ = _workload(rate, seconds, hint=True)
    hint = _run(cfg_h, _records(events_h), paced=True)
    res["sim_lag_hint_p50_s"] = float(np.percentile(hint["sim_lag"], 50))
    res["sim_lag_hint_p99_s"] = _p99(hint["sim_lag"])
    # maximum throughput and memory: unpaced
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    fast = _run(cfg, recs, paced=False)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    res["max_events_s"] = fast["events"] / fast["wall_s"]  # (tracemalloc slows this; see max_events_s_untraced)
    fast2 = _run(cfg, recs, paced=False)
    res["max_events_s_untraced"] = fast2["events"] / fast2["wall_s"]
    res["memory_per_instance_kb"] = (after - before) / n_inst / 1024
    return res


def main(argv: list[str] | None = None) -> dict[str, float]:
    argv = list(sys.argv[1:] if argv is None else argv)
    rate = float(argv[0]) if argv else RATE_DEFAULT
    seconds = float(argv[1]) if len(argv) > 1 else SECONDS_DEFAULT
    res = bench(rate, seconds)
    print(f"shadow benchmark: {res['instances']:.0f} emulated instances, {res['offered_events_s']:.0f} events/s "
          f"offered for {seconds:.0f} s (in-memory source, one process)")
    rows = [("apply lag p50 / p99", f"{res['apply_lag_p50_s'] * 1000:.1f} / {res['apply_lag_p99_s'] * 1000:.1f} ms"),
            ("simulated-time lag p50 / p99 (live: waits for lengths)",
             f"{res['sim_lag_p50_s']:.2f} / {res['sim_lag_p99_s']:.2f} s"),
            ("simulated-time lag p50 / p99 (lengths known at arrival)",
             f"{res['sim_lag_hint_p50_s']:.2f} / {res['sim_lag_hint_p99_s']:.2f} s"),
            ("max events/s (untraced)", f"{res['max_events_s_untraced']:.0f}"),
            ("memory per shadowed instance", f"{res['memory_per_instance_kb']:.0f} KiB")]
    for k, v in rows:
        print(f"  {k:<58} {v}")
    print(json.dumps({"bench": "shadow", **{k: round(v, 6) for k, v in res.items()}}))
    return res


if __name__ == "__main__":
    main()
