"""`shadowsim run`'s probes: /healthz is liveness (age of the consumer loop's last poll), /readyz readiness
(polled, with a partition). Served by the real metrics server; the loop's clock is injected."""
from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path

from simcore.events import RequestArrived
from shadowsim.shadow.config import ShadowConfig, SnapshotConfig
from shadowsim.shadow.runtime import LIVENESS_TIMEOUT_S, STARTUP_GRACE_S, ShadowRuntime
from shadowsim.shadow.sources import MemorySource, Record


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _probe(rt: ShadowRuntime, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{rt.metrics_port}{path}", timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _runtime(tmp_path: Path, clock: Clock, records: list[Record]) -> ShadowRuntime:
    cfg = ShadowConfig(snapshot=SnapshotConfig(dir=tmp_path / "state"), metrics_port=0)
    return ShadowRuntime(cfg, make_source=lambda a, r: MemorySource(records, a, r), monotonic=clock,
                         clock=lambda: 1.7e9)


def test_liveness_follows_the_last_poll_and_readiness_needs_a_partition(tmp_path: Path) -> None:
    clock = Clock()
    recs = [Record("sglang.events", 0, i, b"i-0", [RequestArrived(instance_id="i-0", ts=1.7e9 + i,
                                                                  request_id=f"r{i}", prompt_tokens=32)])
            for i in range(5)]
    rt = _runtime(tmp_path, clock, recs)
    try:
        code, body = _probe(rt, "/healthz")
        assert code == 200 and body["last_poll_age_s"] is None  # starting: within the grace period
        code, body = _probe(rt, "/readyz")
        assert code == 503 and body["status"] == "not polled yet"
        assert rt.run(idle_timeout_s=0) == 5
        code, body = _probe(rt, "/readyz")
        assert code == 200 and body["partitions"] == ["sglang.events-0"] and body["records_processed"] == 5
        clock.now += LIVENESS_TIMEOUT_S - 1
        assert _probe(rt, "/healthz")[0] == 200
        clock.now += 2  # the loop has not come back from a poll for longer than the liveness timeout
        code, body = _probe(rt, "/healthz")
        assert code == 503 and body["status"] == f"last poll {LIVENESS_TIMEOUT_S + 1:.1f} s ago"
        code, body = _probe(rt, "/readyz")
        assert code == 503 and body["status"].startswith("not live")
        rt.run(idle_timeout_s=0)  # polling again: alive and ready again
        assert _probe(rt, "/healthz")[0] == 200 and _probe(rt, "/readyz")[0] == 200
    finally:
        rt.close()


def test_a_process_that_never_polls_stops_being_live_after_the_grace_period(tmp_path: Path) -> None:
    clock = Clock()
    rt = _runtime(tmp_path, clock, [])
    try:
        clock.now += STARTUP_GRACE_S + 1
        code, body = _probe(rt, "/healthz")
        assert code == 503 and body["status"].startswith("no poll yet")
    finally:
        rt.close()


def test_a_member_without_partitions_is_live_but_not_ready(tmp_path: Path) -> None:
    clock = Clock()
    rt = _runtime(tmp_path, clock, [])  # nothing assigned: a replica beyond the partition count
    try:
        stop = threading.Event()
        rt.run(stop=stop, on_batch=lambda svc: stop.set())  # one poll
        assert _probe(rt, "/healthz")[0] == 200
        code, body = _probe(rt, "/readyz")
        assert code == 503 and body["status"].startswith("no partition assigned")
    finally:
        rt.close()
