"""One twin: event-time rules, the predicted/actual join, estimates after max_wait, duplicates, late events."""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.events import parse_event
from shadowsim.shadow.config import DriftConfig, InstanceConfig, LinearLatencyConfig, TimeConfig
from shadowsim.shadow.engine import engine_factory
from shadowsim.shadow.twin import InstanceTwin

T = 1_000_000.0
LIN = LinearLatencyConfig(base_s=0.006, per_extend_token_s=6e-5, per_decode_req_s=1e-4, per_kv_token_s=0.0)


def make_twin(**time_kw: Any) -> InstanceTwin:
    cfg = InstanceConfig(latency_backend="linear", linear=LIN, settings={"disable_overlap_schedule": True, "chunked_prefill_size": 8192})
    return InstanceTwin("a", cfg, TimeConfig(**time_kw), DriftConfig(), engine_factory, lambda: 0.0)


def ev(kind: str, ts: float, **kw: Any) -> Any:
    return parse_event({"kind": kind, "instance_id": "a", "ts": ts, **kw})


def arrived(ts: float, rid: str, prompt: int = 1000) -> Any:
    return ev("request_arrived", ts, request_id=rid, prompt_tokens=prompt)


def finished(ts: float, rid: str, arrival: float, prompt: int = 1000, out: int = 11, ttft: float = 0.1) -> Any:
    return ev("request_finished", ts, request_id=rid, prompt_tokens=prompt, output_tokens=out, ttft_s=ttft,
              e2e_s=ts - arrival, arrival_ts=arrival, cached_tokens=0)


def test_a_lone_request_is_predicted_exactly_by_the_linear_model_and_joined_with_its_actual() -> None:
    t = make_twin(allowed_lateness_s=0.0)
    t.apply(arrived(T, "r1", prompt=1000))
    t.apply(finished(T + 1.0, "r1", T, prompt=1000, out=11, ttft=0.1))
    t.apply(ev("decode_batch", T + 5.0, running_reqs=0))  # moves the watermark past the predicted finish
    (rec,) = t.out
    pred = rec["predicted"]
    # prefill: 6 ms + 1000 × 60 µs = 66 ms; each decode step of one request: 6 ms + 0.1 ms = 6.1 ms
    assert pred["ttft"] == pytest.approx(0.066)
    assert pred["tpot"] == pytest.approx(0.0061)
    assert pred["e2e"] == pytest.approx(0.066 + 10 * 0.0061)
    assert rec["actual"]["ttft"] == pytest.approx(0.1) and rec["actual"]["e2e"] == pytest.approx(1.0)
    assert rec["ape"]["free"]["ttft"] == pytest.approx(0.34)
    assert t.stats.counters["requests_finished"] == {"predicted": 1, "actual": 1}
    assert t.stats.counters["output_tokens"] == {"predicted": 11, "actual": 11}
    assert t.engine.server.records == []  # a live shadow keeps no per-request history in the simulator
    assert t.pending == {} and t.predicted == {} and t.actual == {}  # joined requests leave no state behind


def test_the_simulator_never_passes_an_arrival_whose_length_is_unknown() -> None:
    t = make_twin(allowed_lateness_s=0.0, max_wait_s=60.0)
    t.apply(arrived(T, "r1"))
    t.apply(arrived(T + 1.0, "r2"))
    t.apply(finished(T + 3.0, "r2", T + 1.0))  # r2 is known, r1 still running on the real server
    assert t.simulated_ts is not None and t.simulated_ts <= T  # held at r1's arrival
    t.apply(finished(T + 8.0, "r1", T))
    assert t.simulated_ts == pytest.approx(T + 8.0)
    t.apply(ev("decode_batch", T + 20.0, running_reqs=0))
    assert sorted(r["request_id"] for r in t.out) == ["r1", "r2"]


def test_a_request_waiting_longer_than_max_wait_is_simulated_with_an_estimated_length() -> None:
    t = make_twin(allowed_lateness_s=0.0, max_wait_s=5.0, default_output_tokens=7)
    t.apply(arrived(T, "r1"))
    t.apply(arrived(T + 1.0, "r2"))
    t.apply(finished(T + 2.0, "r2", T + 1.0, out=3))
    t.apply(ev("decode_batch", T + 6.5, running_reqs=1))  # r1 has waited 6.5 s > 5 s
    assert t.stats.requests_estimated == 1
    assert t.pending["r1"].estimated and t.simulated_ts == pytest.approx(T + 6.5)
    t.apply(finished(T + 9.0, "r1", T, out=40))
    t.apply(ev("decode_batch", T + 20.0, running_reqs=0))
    r1 = next(r for r in t.out if r["request_id"] == "r1")
    assert r1["estimated_length"] is True
    assert r1["predicted"]["output_tokens"] == 3  # the mean output of finished requests (r2) stood in
    assert r1["actual"]["output_tokens"] == 40


def test_duplicate_deliveries_are_counted_once() -> None:
    t = make_twin(allowed_lateness_s=0.0)
    for e in (arrived(T, "r1"), arrived(T, "r1"), finished(T + 1, "r1", T), finished(T + 1, "r1", T)):
        t.apply(e)
    t.apply(ev("decode_batch", T + 5.0, running_reqs=0))
    t.apply(finished(T + 1, "r1", T))  # again, after the join
    t.apply(ev("decode_batch", T + 6.0, running_reqs=0))
    assert len(t.out) == 1
    assert t.stats.counters["requests_finished"] == {"predicted": 1, "actual": 1}
    assert t.stats.events_processed == 7


def test_an_event_behind_the_simulated_clock_is_counted_late() -> None:
    t = make_twin(allowed_lateness_s=0.0)
    t.apply(arrived(T, "r1"))
    t.apply(finished(T + 2.0, "r1", T))
    t.apply(ev("decode_batch", T + 10.0, running_reqs=0))
    assert t.stats.events_late == 0
    t.apply(arrived(T + 5.0, "r-late"))  # the twin has simulated up to T + 10
    assert t.stats.events_late == 1


def test_snapshot_restore_continues_exactly() -> None:
    events = [arrived(T + i * 0.3, f"r{i}", prompt=500 + 37 * i) for i in range(12)]
    events += [finished(T + 4 + i * 0.2, f"r{i}", T + i * 0.3, prompt=500 + 37 * i, out=5 + i) for i in range(12)]
    events.sort(key=lambda e: e.ts)
    events.append(ev("decode_batch", T + 30, running_reqs=0))
    whole = make_twin(allowed_lateness_s=0.5)
    for e in events:
        whole.apply(e)
    for cut in (1, 5, 13, 20):
        first = make_twin(allowed_lateness_s=0.5)
        for e in events[:cut]:
            first.apply(e)
        second = make_twin(allowed_lateness_s=0.5)
        second.restore(first.snapshot())
        for e in events[cut:]:
            second.apply(e)
        assert first.out + second.out == whole.out, cut
        assert second.stats.snapshot() == whole.stats.snapshot()


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 5), st.integers(1, 3000), st.integers(1, 60), st.floats(0.05, 3)),
                min_size=1, max_size=10),
       st.integers(0, 40))
def test_property_snapshot_at_any_event_then_replay_equals_one_pass(reqs: list[tuple[float, int, int, float]],
                                                                    cut: int) -> None:
    """Replaying the same log gives the same predictions and counters, whether in one pass or resumed from a
    snapshot taken after any event."""
    events = []
    for i, (arr, prompt, out, dur) in enumerate(reqs):
        events.append(arrived(T + arr, f"r{i}", prompt=prompt))
        events.append(finished(T + arr + dur, f"r{i}", T + arr, prompt=prompt, out=out, ttft=dur / 2))
    events.sort(key=lambda e: (e.ts, e.kind != "request_arrived"))
    events.append(ev("decode_batch", T + 100, running_reqs=0))
    cut = min(cut, len(events))
    whole = make_twin(allowed_lateness_s=0.3)
    for e in events:
        whole.apply(e)
    first = make_twin(allowed_lateness_s=0.3)
    for e in events[:cut]:
        first.apply(e)
    second = make_twin(allowed_lateness_s=0.3)
    second.restore(first.snapshot())
    for e in events[cut:]:
        second.apply(e)
    assert first.out + second.out == whole.out
    assert len(whole.out) == len(reqs)  # every request predicted and joined exactly once
    assert second.snapshot()["stats"] == whole.snapshot()["stats"]


def test_a_server_config_after_the_simulator_was_built_does_not_change_it_on_restore() -> None:
    """Regression (fuzzing, issue 11): a twin's simulator is built from the server_config seen at its first
    request; a later server_config (a page size of 16) is recorded but does not rebuild it. A restore rebuilt the
    simulator from the *newest* config instead: page size 16 on a KV pool accounted in single tokens, so the pool's
    private count went negative some steps later (``ValueError: free_tokens(34) with -127 private tokens
    allocated`` in simcore.kv_cache) — and did so on every rebuild from that checkpoint. The restored twin must run
    on the simulator it was snapshotted with, and continue like the uninterrupted one."""
    head = [ev("server_config", T, page_size=1, tp_size=1, max_running_requests=8),
            arrived(T + 0.1, "r0", prompt=700)]
    head.append(finished(T + 2.0, "r0", T + 0.1, prompt=700, out=40))
    tail = [ev("server_config", T + 2.1, page_size=16, tp_size=2, max_running_requests=3)]
    for i in range(1, 9):
        tail.append(arrived(T + 2 + i * 0.05, f"r{i}", prompt=333 + 17 * i))
    for i in range(1, 9):
        tail.append(finished(T + 5 + i * 0.4, f"r{i}", T + 2 + i * 0.05, prompt=333 + 17 * i, out=21 + 5 * i))
    tail.append(ev("decode_batch", T + 60, running_reqs=0))
    whole = make_twin(allowed_lateness_s=0.5)
    for e in head + tail:
        whole.apply(e)
    for cut in range(len(head), len(head) + len(tail)):
        events = head + tail
        first = make_twin(allowed_lateness_s=0.5)
        for e in events[:cut]:
            first.apply(e)
        second = make_twin(allowed_lateness_s=0.5)
        second.restore(first.snapshot())
        assert second.engine is not None and second.engine.server.page == 1, cut  # the simulator it was built as
        second.engine.server.check_invariants()
        for e in events[cut:]:
            second.apply(e)
            second.engine.server.check_invariants()
        assert first.out + second.out == whole.out, cut
        assert second.stats.snapshot() == whole.stats.snapshot(), cut
    assert len(whole.out) == 9
    assert whole.server_config["page_size"] == 16 and whole.engine.server.page == 1


def test_a_snapshot_written_before_engine_config_was_kept_still_restores() -> None:
    t = make_twin()
    t.apply(arrived(T, "r0"))
    t.apply(finished(T + 1.0, "r0", T))
    snap = t.snapshot()
    del snap["engine_config"]
    again = make_twin()
    again.restore(snap)
    assert again.engine_config == {} and again.engine is not None


def test_a_request_expired_while_still_simulated_is_not_submitted_twice() -> None:
    """Regression (fuzzing, issue 11): an overloaded twin trails its input; a request can expire (and its id be
    forgotten) while its simulation still queues. Its late finish, or a re-delivered arrival, created a new request
    of the same id and ``simcore.server.Server.submit`` refused it (``ValueError: duplicate request id``) on every
    rebuild of the twin. Now both are dropped as duplicates, and the old simulation's completion, which nothing
    will join any more, is not kept."""
    t = make_twin(allowed_lateness_s=0.0, max_wait_s=1.0, pending_expiry_margin_s=1.0)
    # five 150,000-token prompts on a 200,000-token pool: one at a time, ~9.5 s of prefill each (linear model)
    for i in range(5):
        t.apply(arrived(T + 0.001 * i, f"big{i}", prompt=150_000))
    for k in range(1, 21):
        t.apply(ev("decode_batch", T + k, running_reqs=1))
    assert t.stats.requests_expired == 5 and t.pending == {}
    assert "big4" not in t.done and t.engine.holds("big4")  # forgotten by the twin, still queued in the simulator
    t.apply(finished(T + 21.0, "big4", T, prompt=150_000, out=7))
    t.apply(arrived(T + 21.5, "big4", prompt=150_000))
    assert t.pending == {}
    for k in range(22, 80):
        t.apply(ev("decode_batch", T + k, running_reqs=0))
    assert not t.engine.holds("big4") and t.engine.server.reqs == {}
    assert t.predicted == {} and t.actual == {} and t.out == []  # nothing left behind
    assert t.stats.counters["requests_finished"]["predicted"] == 5  # each big request simulated exactly once
