"""Acceptance: `shadowsim run` killed with SIGKILL at random points and restarted gives the predictions of an
uninterrupted run; no event is lost and none is counted twice, with hostile records in the stream.

The event log is 20 s of the demo scenario (three EMULATED instances, ~5,000 events) on a 3-partition topic of the
embedded broker, mixed with 600 seeded hostile records (``benchmarks.hostile``: bad bytes and JSON, out-of-range
values, settings no engine accepts, which fail *inside* the twin's apply, unknown instances, duplicates, reordered
times). The reference is the clean events replayed in memory without interruption. Each trial uses its own consumer
group, state directory and predictions file; it kills the process when the predictions file has reached a random
size (so kills land mid-stream, between and during checkpoints and while failing records are applied), three
times, then lets a last run finish: 7 trials, 21 kills.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from shadowsim.shadow.config import SnapshotConfig
from shadowsim.shadow.engine import engine_factory
from shadowsim.shadow.service import ShadowService
from shadowsim.shadow.sink import PredictionSink, read_predictions
from shadowsim.shadow.snapshot import SnapshotStore
from shadowsim.shadow.sources import MemorySource

TRIALS = 7
HOSTILE = 600
RUN_DEADLINE_S = 600  # one run of `shadowsim run` (a few seconds idle; minutes on a loaded machine): only a hang
pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def _write_config(path: Path, sc: Any) -> None:
    import yaml

    data = sc.shadow.model_dump(mode="json", exclude={"kafka", "snapshot", "predictions_path", "metrics_port"})
    path.write_text(yaml.safe_dump(data))


def test_sigkill_at_random_points_then_resume_equals_uninterrupted(short_log: Any, shadow_broker: Any,
                                                                   tmp_path: Path) -> None:
    sc, recs = short_log
    # reference: uninterrupted, in memory
    ref_sink = PredictionSink(tmp_path / "ref.jsonl")
    ref_cfg = sc.shadow.model_copy(update={"snapshot": SnapshotConfig(dir=tmp_path / "ref-state")})
    ref = ShadowService(ref_cfg, lambda a, r: MemorySource(recs, a, r), engine_factory, sink=ref_sink)
    ref.run(idle_timeout_s=0)
    ref.close()
    want = read_predictions(tmp_path / "ref.jsonl")
    want_stats = {iid: t.stats.snapshot() for iid, t in ref.twins.items()}

    from streams.kafka_io import EventProducer

    topic = f"crash-{os.getpid()}-{time.time_ns()}"
    shadow_broker.create_topics({topic: 3, topic + ".dlq": 1})
    from benchmarks.hostile import hostile_records

    healthy = sorted(want_stats)
    bad = hostile_records(HOSTILE, seed=20261201, healthy=healthy, huge_every=0)
    every = len(recs) // HOSTILE
    with EventProducer(shadow_broker.bootstrap_servers, topic) as prod:
        for i, r in enumerate(recs):
            for ev in r.events:
                prod.send(ev)
            if i % every == 0 and bad:
                key, value, _ = bad.pop()
                prod.send_raw(value, key)
    cfg_path = tmp_path / "shadow.yaml"
    _write_config(cfg_path, sc)

    rng = random.Random(20261130)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    kills = 0
    for trial in range(TRIALS):
        state, preds = tmp_path / f"state{trial}", tmp_path / f"preds{trial}.jsonl"
        argv = [sys.executable, "-m", "shadowsim", "run", "--bootstrap-servers", shadow_broker.bootstrap_servers,
                "--topic", topic, "--dead-letter-topic", topic + ".dlq", "--group", f"g{trial}",
                "--config", str(cfg_path), "--metrics-port", "0", "--metrics-host", "127.0.0.1",
                "--state-dir", str(state), "--predictions", str(preds), "--snapshot-every-events", "300",
                "--snapshot-every-s", "0.3", "--exit-when-idle-s", "5", "--quiet",
                # a killed member holds its partitions until its session expires: keep that short here
                "--session-timeout-ms", "1500"]
        for attempt in range(4):
            # stderr to a file, not a pipe: a pipe nobody reads until the end blocks the process once its log (a
            # warning per failing record) outgrows the pipe buffer
            err_path = tmp_path / f"stderr{trial}-{attempt}.log"
            with open(err_path, "wb") as err_file:
                proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err_file, env=env)
            target = rng.randint(1, int(len(want) * 0.9)) if attempt < 3 else None
            # wait for the condition (the predictions file reached the target, or the process ended), however
            # slowly a loaded machine gets there; the deadline only catches a process that hangs
            deadline = time.monotonic() + RUN_DEADLINE_S
            while proc.poll() is None:
                if target is not None and _lines(preds) >= target:
                    time.sleep(rng.uniform(0.0, 0.2))  # land anywhere: mid-batch, mid-checkpoint
                    proc.send_signal(signal.SIGKILL)
                    kills += 1
                    break
                if time.monotonic() > deadline:
                    proc.kill()
                    proc.wait()
                    pytest.fail(f"trial {trial} attempt {attempt}: shadowsim run still running after "
                                f"{RUN_DEADLINE_S} s; stderr:\n{err_path.read_text()[-3000:]}")
                time.sleep(0.02)
            rc = proc.wait(timeout=RUN_DEADLINE_S)
            err = err_path.read_text()[-3000:]
            if target is None or rc == 0:
                assert rc == 0, err
                break
            assert rc == -signal.SIGKILL, err
        got = read_predictions(preds)  # raises if a replayed record differs from its first version
        got = {k: v for k, v in got.items() if k[0] in want_stats}  # the healthy instances
        assert got.keys() == want.keys(), (trial, len(got), len(want))
        assert got == want, trial
        store = SnapshotStore(state)
        stats: dict[str, Any] = {}
        for topic_, part in store.partitions():
            snap = store.load(topic_, part)
            assert snap is not None
            for iid, tstate in snap["twins"].items():
                if iid in want_stats:
                    stats[iid] = tstate["stats"]
        assert stats == want_stats, trial  # counters: every event applied exactly once
    assert kills >= 20  # the kills actually happened
