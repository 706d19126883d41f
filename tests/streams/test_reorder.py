"""The reorder buffer merges instances into event-time order behind a watermark.

watermark = newest event time seen − allowed lateness + wall time elapsed since that newest event arrived.
The wall clock is injected, so these tests move time by hand.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.events import DecodeBatch
from streams.reorder import ReorderBuffer


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class Ev:
    instance_id: str
    ts: float
    n: int = 0


def test_events_wait_for_the_watermark_then_come_out_in_event_time_order() -> None:
    clock = FakeClock()
    buf: ReorderBuffer[Ev] = ReorderBuffer(allowed_lateness_s=2.0, clock=clock)
    assert buf.push(Ev("a", 10.0)) == []  # watermark 8.0
    assert buf.push(Ev("b", 9.0)) == []
    assert buf.watermark == 8.0
    out = buf.push(Ev("a", 11.5))  # watermark 9.5: releases b@9
    assert out == [Ev("b", 9.0)]
    out = buf.push(Ev("c", 13.0))  # watermark 11.0: releases a@10
    assert out == [Ev("a", 10.0)]
    assert len(buf) == 2
    assert buf.flush() == [Ev("a", 11.5), Ev("c", 13.0)]
    assert (buf.released, buf.late) == (4, 0)


def test_pending_lists_buffered_events_in_push_order_for_snapshots() -> None:
    clock = FakeClock()
    buf: ReorderBuffer[Ev] = ReorderBuffer(allowed_lateness_s=10.0, clock=clock)
    buf.push_many([Ev("b", 5.0, 1), Ev("a", 3.0, 2), Ev("b", 6.0, 3)])
    assert [e.n for e in buf.pending()] == [1, 2, 3]
    restored: ReorderBuffer[Ev] = ReorderBuffer(allowed_lateness_s=10.0, clock=clock)
    restored.push_many(buf.pending())
    assert restored.flush() == buf.flush()


def test_wall_clock_drains_an_idle_stream() -> None:
    clock = FakeClock()
    buf: ReorderBuffer[Ev] = ReorderBuffer(allowed_lateness_s=5.0, clock=clock)
    buf.push(Ev("a", 100.0))
    clock.now = 4.9
    assert buf.poll() == [] and buf.watermark == pytest.approx(99.9)
    clock.now = 5.0
    assert buf.poll() == [Ev("a", 100.0)]


def test_late_events_are_counted_and_delivered_or_dropped_per_policy() -> None:
    for policy, expect_out, dropped in (("deliver", [Ev("b", 5.0)], 0), ("drop", [], 1)):
        clock = FakeClock()
        buf: ReorderBuffer[Ev] = ReorderBuffer(allowed_lateness_s=1.0, clock=clock, late_policy=policy)
        buf.push(Ev("a", 10.0))  # watermark 9
        assert buf.push(Ev("b", 5.0)) == expect_out
        assert (buf.late, buf.dropped) == (1, dropped)


def test_per_instance_arrival_order_holds_even_when_its_times_go_backwards() -> None:
    clock = FakeClock()
    buf: ReorderBuffer[Ev] = ReorderBuffer(allowed_lateness_s=1.0, clock=clock)
    assert buf.push_many([Ev("a", 10.0, 1), Ev("a", 9.5, 2), Ev("b", 9.8, 3)]) == []  # watermark 9
    out = buf.push(Ev("c", 11.0, 4))  # watermark 10
    # b@9.8 goes first; a@9.5 must wait behind a@10, which pushed before it.
    assert [e.n for e in out] == [3, 1, 2]
    assert buf.late == 0


def test_capacity_bound_forces_the_oldest_out() -> None:
    buf: ReorderBuffer[Ev] = ReorderBuffer(allowed_lateness_s=100.0, clock=FakeClock(), max_buffered=2)
    assert buf.push_many([Ev("a", 1.0), Ev("b", 2.0)]) == []
    assert buf.push(Ev("c", 3.0)) == [Ev("a", 1.0)]
    assert (buf.forced, len(buf)) == (1, 2)


def test_works_on_real_events() -> None:
    buf = ReorderBuffer(allowed_lateness_s=0.5, clock=FakeClock())
    e1 = DecodeBatch(instance_id="x", ts=2.0, running_reqs=1)
    e2 = DecodeBatch(instance_id="y", ts=1.0, running_reqs=2)
    assert buf.push(e1) == []
    assert buf.push(e2) == [e2]
    assert buf.flush() == [e1]


streams_strategy = st.lists(
    st.tuples(st.sampled_from("abcd"), st.floats(0, 100, allow_nan=False), st.floats(0, 3)), max_size=60)


@settings(max_examples=150, deadline=None)
@given(streams_strategy, st.floats(0, 10), st.sampled_from(["deliver", "drop"]))
def test_properties_conservation_and_per_instance_order(items, lateness, policy) -> None:
    """Nothing is lost or duplicated except counted drops; each instance comes out in push order; with no
    late events, the whole output is in event-time order when each instance's own times are monotone."""
    clock = FakeClock()
    buf: ReorderBuffer[Ev] = ReorderBuffer(allowed_lateness_s=lateness, clock=clock, late_policy=policy)
    pushed: list[Ev] = []
    out: list[Ev] = []
    for n, (inst, ts, dt) in enumerate(items):
        clock.now += dt
        ev = Ev(inst, ts, n)
        pushed.append(ev)
        out.extend(buf.push(ev))
    out.extend(buf.flush())
    assert len(out) + buf.dropped == len(pushed)
    assert len({e.n for e in out}) == len(out)
    for inst in "abcd":
        ns = [e.n for e in out if e.instance_id == inst]
        assert ns == sorted(ns)
    monotone = all(
        [e.ts for e in pushed if e.instance_id == i] == sorted(e.ts for e in pushed if e.instance_id == i)
        for i in "abcd")
    if buf.late == 0 and monotone:
        assert [e.ts for e in out] == sorted(e.ts for e in out)
