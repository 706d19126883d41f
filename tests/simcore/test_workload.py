"""Workloads: who sends what, when. Closed loop (fixed concurrency), open loop (Poisson/gamma), trace replay.

A workload talks to any server with ``submit(req) -> simpy.Event``; here a fake server finishes every request
after ``0.01 s × output_len``, which makes the timing of a closed loop easy to predict.
"""
from __future__ import annotations

import numpy as np
import pytest
import simpy

from simcore.request import RequestSpec
from simcore.errors import UserError
from simcore.workload import (ClosedLoop, Empirical, OpenLoop, TraceReplay, Uniform, bench_random,
                              common_key_unit, prefix_reuse_ceiling)


class FakeServer:
    def __init__(self, env: simpy.Environment, s_per_token: float = 0.01) -> None:
        self.env, self.s_per_token = env, s_per_token
        self.in_flight = self.max_in_flight = 0
        self.log: list[tuple[float, str]] = []

    def submit(self, req: RequestSpec) -> simpy.Event:
        self.log.append((self.env.now, req.rid))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        done = self.env.event()

        def finish(_: simpy.Event) -> None:
            self.in_flight -= 1
            done.succeed(req.rid)

        self.env.timeout(req.output_len * self.s_per_token).callbacks.append(finish)
        return done


def test_closed_loop_keeps_concurrency_and_sends_on_completion() -> None:
    env = simpy.Environment()
    srv = FakeServer(env)
    wl = ClosedLoop(concurrency=2, num_requests=5, input_len=100, output_len=100, seed=1)
    wl.start(env, srv)
    env.run()
    assert srv.log == [(0, "req-0"), (0, "req-1"), (1.0, "req-2"), (1.0, "req-3"), (2.0, "req-4")]
    assert srv.max_in_flight == 2 and wl.finished == 5
    assert [r.arrival_s for r in wl.submitted] == [0.0, 0.0, 1.0, 1.0, 2.0]
    r = wl.submitted[0]
    assert (r.input_len, r.output_len, r.max_new_tokens, r.ignore_eos, r.key) == (100, 100, 100, True, None)


def test_same_seed_same_requests_different_seed_different() -> None:
    def lengths(seed: int) -> list[tuple[int, int]]:
        wl = ClosedLoop(4, 50, Uniform(10, 1000), bench_random(500, 0.5), seed=seed)
        return [(t.input_len, t.output_len) for t in wl.templates]

    a = lengths(7)
    assert a == lengths(7) and a != lengths(8)
    assert all(10 <= i <= 1000 and 250 <= o <= 500 for i, o in a)
    assert bench_random(500, 1.0) == 500


def test_empirical_lengths_come_from_the_list() -> None:
    wl = ClosedLoop(1, 200, Empirical((3, 30, 300)), 5, seed=0)
    assert {t.input_len for t in wl.templates} == {3, 30, 300}
    with pytest.raises(ValueError):
        Empirical(())
    with pytest.raises(ValueError):
        Uniform(5, 2)


def test_shared_prefix_keys() -> None:
    wl = ClosedLoop(2, 3, input_len=10, output_len=1, seed=0, shared_prefix_len=4)
    keys = [t.key for t in wl.templates]
    assert all(k is not None and len(k) == 10 and k[:4] == (0, 1, 2, 3) for k in keys)
    assert len({k[4:] for k in keys if k}) == 3  # the rest is unique per request


def test_open_loop_poisson_rate_and_no_waiting() -> None:
    env = simpy.Environment()
    srv = FakeServer(env, s_per_token=10.0)  # every request takes 1000 s: an open loop does not care
    wl = OpenLoop(rate_per_s=10.0, num_requests=2000, input_len=10, output_len=100, seed=3)
    wl.start(env, srv)
    env.run(until=500)
    times = [t for t, _ in srv.log]
    assert len(times) == 2000 and times[0] == 0.0 and wl.finished == 0
    gaps = np.diff(times)
    assert gaps.mean() == pytest.approx(0.1, rel=0.06)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.1)  # exponential: CV = 1
    env.run()
    assert wl.finished == 2000


def test_open_loop_burstiness_changes_variance_not_rate() -> None:
    wl = OpenLoop(5.0, 4000, 10, 10, seed=1, burstiness=4.0)
    gaps = np.diff(wl.offsets_s)
    assert gaps.mean() == pytest.approx(0.2, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(0.5, rel=0.1)  # gamma shape k: CV = 1/sqrt(k)
    # the lengths do not depend on the rate
    assert [t.input_len for t in OpenLoop(1.0, 20, Uniform(1, 9), 1, seed=1).templates] == \
        [t.input_len for t in OpenLoop(50.0, 20, Uniform(1, 9), 1, seed=1).templates]


def test_trace_replay_time_scale_and_ids() -> None:
    reqs = [RequestSpec("b", 12.0, 5, 1), RequestSpec("a", 10.0, 5, 1, key=(1, 2), key_unit=1),
            RequestSpec("c", 13.5, 5, 1)]
    env = simpy.Environment(initial_time=100.0)
    srv = FakeServer(env)
    wl = TraceReplay(reqs, time_scale=2.0)
    wl.start(env, srv)
    env.run()
    assert srv.log == [(100.0, "a"), (104.0, "b"), (107.0, "c")]
    assert [r.arrival_s for r in wl.submitted] == [100.0, 104.0, 107.0] and wl.submitted[0].key == (1, 2)
    assert wl.finished == 3


def test_prefix_reuse_ceiling_block_keys() -> None:
    reqs = [
        RequestSpec("1", 0.0, 1000, 1, key=(1, 2), key_unit=512),
        RequestSpec("2", 1.0, 1100, 1, key=(1, 2, 3), key_unit=512),  # 2 seen blocks → 1024
        RequestSpec("3", 2.0, 1024, 1, key=(1, 2), key_unit=512),  # both seen, capped at 1023
        RequestSpec("4", 3.0, 600, 1, key=(9, 2), key_unit=512),  # first block unseen → 0
        RequestSpec("5", 4.0, 276, 1),  # no key
    ]
    assert prefix_reuse_ceiling(reqs) == pytest.approx((1024 + 1023) / 4000)


def test_prefix_reuse_ceiling_token_keys() -> None:
    reqs = [RequestSpec("1", 0.0, 4, 1, key=(1, 2, 3, 4)), RequestSpec("2", 1.0, 4, 1, key=(1, 2, 3, 4)),
            RequestSpec("3", 2.0, 2, 1, key=(1, 7))]
    assert prefix_reuse_ceiling(reqs) == pytest.approx((3 + 1) / 10)
    assert prefix_reuse_ceiling([]) == 0.0


def test_common_key_unit() -> None:
    blocks = RequestSpec("1", 0.0, 600, 1, key=(1, 2), key_unit=512)
    plain = RequestSpec("2", 0.0, 600, 1)
    assert common_key_unit([blocks, plain]) == 512 and common_key_unit([plain]) == 1
    with pytest.raises(UserError, match="key_unit"):
        common_key_unit([blocks, RequestSpec("3", 0.0, 2, 1, key=(1, 2))])


def test_with_arrival_is_replace_of_the_arrival_only() -> None:
    """``RequestSpec.with_arrival`` (trace replays retime every request with it) gives what
    ``dataclasses.replace(spec, arrival_s=...)`` gives, every field compared, and leaves the original alone."""
    import dataclasses

    from simcore.request import RequestSpec

    spec = RequestSpec("r7", 1.25, 300, 20, 64, (5, 6, 7), 512, True, -3)
    moved = spec.with_arrival(9.5)
    assert moved == dataclasses.replace(spec, arrival_s=9.5)
    assert dataclasses.astuple(moved) == ("r7", 9.5, 300, 20, 64, (5, 6, 7), 512, True, -3)
    assert spec.arrival_s == 1.25 and hash(moved) == hash(dataclasses.replace(spec, arrival_s=9.5))
