"""Helpers shared by the shadow tests (imported by conftest.py and test modules)."""
from __future__ import annotations

from collections import Counter
from functools import lru_cache

from shadowsim.demo.scenario import Scenario, as_events, build_scenario, scenario_events
from shadowsim.shadow.sources import Record

T0_TS = 1_800_000_000.0


@lru_cache(maxsize=4)
def scenario_log(duration_s: float, backend: str = "perf") -> tuple[Scenario, tuple[Record, ...]]:
    """The scenario's events, one record each, keyed by instance, one partition per instance."""
    sc = build_scenario(duration_s, latency_backend=backend)
    events = as_events(scenario_events(sc, T0_TS, latency_backend=backend))
    parts = {iid: i for i, iid in enumerate(sorted({e.instance_id for e in events}))}
    offsets: Counter[int] = Counter()
    recs = []
    for e in events:
        p = parts[e.instance_id]
        recs.append(Record("sglang.events", p, offsets[p], e.instance_id.encode(), [e]))
        offsets[p] += 1
    return sc, tuple(recs)
