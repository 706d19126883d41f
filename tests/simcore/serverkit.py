"""Helpers for the server tests: run a list of requests through one Server and keep every step."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import simpy

from simcore.perf.base import LinearLatencyModel
from simcore.request import RequestSpec
from simcore.results import RequestRecord, StepRecord
from simcore.server import Server
from simcore.settings import ServerSettings, resolve

GiB = 1024**3
# every GPU step 10 ms + 0.1 ms per extend token; no CPU time: easy numbers
LAT = LinearLatencyModel(base_s=0.01, per_extend_token_s=1e-4, per_prefix_token_s=0.0, per_decode_req_s=0.0,
                         per_kv_token_s=0.0, cpu_s=0.0)


@dataclass
class Run:
    server: Server
    steps: list[StepRecord] = field(default_factory=list)

    @property
    def records(self) -> dict[str, RequestRecord]:
        return {r.rid: r for r in self.server.records}


def req(rid: str, at: float, input_len: int, output_len: int, max_new: int | None = -1,
        key: Sequence[int] | None = None, **kw: Any) -> RequestSpec:
    """A request; ``max_new=-1`` means max_new_tokens = output_len (finishes by length)."""
    mn = output_len if max_new == -1 else max_new
    return RequestSpec(rid, at, input_len, output_len, mn, tuple(key) if key is not None else None, **kw)


def run(reqs: Sequence[RequestSpec], *, cap: int = 100_000, lat: Any = LAT, fast: bool = True,
        check: bool = True, seed: int = 0, gpu_mem: int = 80 * GiB, server_kw: dict[str, Any] | None = None,
        observe: Any = None, **settings: Any) -> Run:
    """Simulate ``reqs`` (submitted at their arrival times); ``check`` recounts all state after every step."""
    s = resolve(ServerSettings(**settings), gpu_mem)
    env = simpy.Environment()
    out = Run(None)  # type: ignore[arg-type]

    extra = observe

    def observe(step: StepRecord) -> None:
        out.steps.append(step)
        if extra is not None:
            extra(step, out.server)
        if check:
            out.server.check_invariants()
            assert step.kv_used <= step.kv_capacity

    kw = {k: v for k, v in (server_kw or {}).items() if k != "observer"}
    out.server = Server(env, s, cap, lat, rng=np.random.default_rng(seed), observer=observe, fast=fast, **kw)

    def feed():  # type: ignore[no-untyped-def]
        for r in sorted(reqs, key=lambda q: q.arrival_s):
            if r.arrival_s > env.now:
                yield env.timeout(r.arrival_s - env.now)
            out.server.submit(r)

    env.process(feed())
    env.run()
    if check:
        out.server.check_invariants()
        assert out.server.kv.used == 0, "KV still held after every request finished"
    return out


def mixed_workload() -> list[RequestSpec]:
    """120 requests every 10 ms, 10–700-token prompts sharing four prefixes, half EOS-finished: a busy server."""
    import random

    rnd = random.Random(7)
    out = []
    for i in range(120):
        n = rnd.randint(10, 700)
        base = (i % 4) * 10_000
        m = rnd.randint(1, 500)
        out.append(req(f"r{i}", i * 0.01, n, m, max_new=m + 50 if i % 2 else -1,  # odd: EOS finishes
                       key=list(range(base, base + n))))
    return out


@dataclass
class Resumed:
    whole: Server  # the uninterrupted run
    first: Server  # the run up to the cut
    second: Server  # restored from the first's snapshot and run to the end
    snapshot: dict[str, Any]

    @property
    def resumed_records(self) -> list[RequestRecord]:
        return sorted(self.first.records + self.second.records, key=lambda r: r.rid)

    @property
    def whole_records(self) -> list[RequestRecord]:
        return sorted(self.whole.records, key=lambda r: r.rid)


def snapshot_and_resume(settings: ServerSettings, reqs: Sequence[RequestSpec], cut_s: float, *, cap: int = 2500,
                        lat: Any = None) -> Resumed:
    """Run ``reqs`` whole; run them again to ``cut_s``, snapshot (through JSON: no pickles), restore into a fresh
    environment and continue. Callers assert that the resumed run equals the whole one."""
    import json

    lat = lat if lat is not None else LinearLatencyModel(cpu_s=0.001)

    def feed(env, srv, start):  # type: ignore[no-untyped-def]
        for r in reqs[start:]:
            if r.arrival_s > env.now:
                yield env.timeout(r.arrival_s - env.now)
            srv.submit(r)

    env = simpy.Environment()
    whole = Server(env, settings, cap, lat, rng=np.random.default_rng(1))
    env.process(feed(env, whole, 0))
    env.run()

    env = simpy.Environment()
    first = Server(env, settings, cap, lat, rng=np.random.default_rng(1))
    env.process(feed(env, first, 0))
    env.run(until=cut_s)
    snap = json.loads(json.dumps(first.snapshot()))
    env2 = simpy.Environment(initial_time=env.now)
    second = Server.restore(env2, snap, settings, lat)
    env2.process(feed(env2, second, sum(1 for r in reqs if r.arrival_s < cut_s)))
    env2.run()
    return Resumed(whole, first, second, snap)
