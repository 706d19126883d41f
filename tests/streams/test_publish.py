"""`shadowsim publish`: files into Kafka as canonical events or raw lines, paced replay, tail -F."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from shadowsim.cli import main
from simcore.events import Event, parse_event
from streams.broker import EmbeddedBroker
from streams.kafka_io import EventConsumer
from streams.publish import FilePublisher, Pacer

LOG = "sglang_logs/issue6949_v0.4.6.post1_qwq32b_tp8_h20_no-eagle_decode.log"


class ListProducer:
    """Collects what would be sent."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.raw: list[tuple[bytes, bytes | None]] = []
        self.flushes = 0

    def send(self, event: Event) -> None:
        self.events.append(event)

    def send_raw(self, value: bytes, key: bytes | None = None) -> None:
        self.raw.append((value, key))

    def flush(self, timeout_s: float | None = None) -> None:
        self.flushes += 1


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(round(s, 6))
        self.now += s


def test_a_real_log_becomes_events_keyed_by_instance(shared_dir: Path) -> None:
    prod = ListProducer()
    stats = FilePublisher(prod, instance_id="node-1").publish_file(shared_dir / "data" / LOG)
    assert (stats.records, stats.events, stats.dead_letters) == (12, 12, 0)
    assert [e.kind for e in prod.events] == ["decode_batch"] * 12
    assert {e.instance_id for e in prod.events} == {"node-1"}
    assert prod.events[0].kv_tokens == 9322 and prod.events[0].ts == 1749331514.0
    assert prod.flushes == 1


def test_speed_replays_at_n_times_the_recorded_timing(tmp_path: Path) -> None:
    lines = [f'{{"schema_version":1,"kind":"decode_batch","ts":{t},"running_reqs":1}}' for t in (10, 12, 11, 16)]
    src = tmp_path / "events.jsonl"
    src.write_text("\n".join(lines) + "\n")
    ft = FakeTime()
    prod = ListProducer()
    FilePublisher(prod, fmt="events", speed=2.0, clock=ft.clock, sleep=ft.sleep).publish_file(src)
    # 10 -> now; 12 -> +1 s wall at 2x; 11 is behind: no wait; 16 -> 3 s after start, 2 s after the last wait.
    assert ft.sleeps == [1.0, 2.0]
    assert [e.ts for e in prod.events] == [10, 12, 11, 16]


def test_pacer_rejects_non_positive_speed() -> None:
    from simcore.errors import UserError

    with pytest.raises(UserError, match="--speed"):
        Pacer(0)


def test_raw_mode_sends_lines_unchanged_with_the_instance_key(shared_dir: Path) -> None:
    prod = ListProducer()
    src = shared_dir / "data" / LOG
    FilePublisher(prod, raw=True, instance_id="node-1").publish_file(src)
    assert [v for v, _ in prod.raw] == src.read_bytes().rstrip(b"\n").split(b"\n")
    assert {k for _, k in prod.raw} == {b"node-1"}


def test_follow_publishes_appended_lines_across_rotation(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    line = ("[2025-06-07 21:25:{s:02d} TP0] Decode batch. #running-req: {n}, #token: 9322, token usage: 0.00, "
            "gen throughput (token/s): 97.52, #queue-req: 0\n")
    log.write_text(line.format(s=1, n=1))
    prod = ListProducer()
    pub = FilePublisher(prod, instance_id="n1")
    writes = [
        lambda: log.open("a").write(line.format(s=2, n=2) + "not sglang\n"),
        lambda: (log.rename(tmp_path / "server.log.1"), log.write_text(line.format(s=3, n=3))),
    ]

    def nap(_s: float) -> None:  # the follower's idle sleep drives the "writer"
        if writes:
            writes.pop(0)()

    stats = pub.follow(log, idle_timeout_s=1.0, poll_interval_s=0.25, sleep=nap)
    assert [e.running_reqs for e in prod.events] == [1, 2, 3]
    assert (stats.events, stats.skipped, stats.rotations) == (3, 1, 1)


@pytest.mark.kafka
def test_cli_publish_into_the_embedded_broker(kafka_broker: EmbeddedBroker, unique_topic: str, shared_dir: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    bs = kafka_broker.bootstrap_servers
    rc = main(["publish", str(shared_dir / "data" / LOG), "--bootstrap-servers", bs, "--topic", unique_topic,
               "--instance-id", "node-9", "--json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["records"], summary["events"], summary["topic"]) == (12, 12, unique_topic)
    consumer = EventConsumer(bs, unique_topic, "g-" + unique_topic, dead_letter_topic=None, session_timeout_ms=6000)
    got = []
    end = time.monotonic() + 30
    while len(got) < 12 and time.monotonic() < end:
        got.extend(consumer.poll_batch(0.3))
    consumer.close()
    assert len(got) == 12 and len({r.partition for r in got}) == 1  # one instance, one partition
    assert [r.events[0].kv_tokens for r in sorted(got, key=lambda r: r.offset)][:3] == [9322, 9362, 9402]
    assert all(r.key == b"node-9" for r in got)


def test_cli_errors_name_the_field(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["publish", str(tmp_path / "x.log")]) == 2
    assert "--bootstrap-servers: required" in capsys.readouterr().err
    assert main(["publish", str(tmp_path / "missing.log"), "--bootstrap-servers", "127.0.0.1:1"]) == 2
    assert "FILE:" in capsys.readouterr().err
    assert main(["publish", "--zmq", "tcp://127.0.0.1:5557", "--bootstrap-servers", "127.0.0.1:1"]) == 2
    assert "--zmq-kind: required" in capsys.readouterr().err


def test_parse_event_round_trip_of_published_json(shared_dir: Path) -> None:
    from simcore.events import event_to_json

    prod = ListProducer()
    FilePublisher(prod).publish_file(shared_dir / "data" / LOG)
    assert [parse_event(event_to_json(e)) for e in prod.events] == prod.events


@pytest.mark.kafka
def test_cli_follow_ships_the_file_then_stops_when_idle(kafka_broker: EmbeddedBroker, unique_topic: str,
                                                       tmp_path: Path, shared_dir: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "server.log"
    log.write_bytes((shared_dir / "data" / LOG).read_bytes())
    rc = main(["publish", str(log), "--follow", "--raw", "--instance-id", "n1", "--idle-timeout-s", "0.5",
               "--bootstrap-servers", kafka_broker.bootstrap_servers, "--topic", unique_topic, "--json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["records"], summary["events"], summary["rotations"]) == (12, 0, 0)


def _mooncake_head(shared_dir: Path, tmp_path: Path, n: int = 50) -> Path:
    lines = (shared_dir / "data" / "mooncake" / "conversation_trace.jsonl").read_text().splitlines()[:n]
    out = tmp_path / "mooncake_head.jsonl"
    out.write_text("\n".join(lines) + "\n")
    return out


def test_relative_trace_is_anchored_at_now(shared_dir: Path, tmp_path: Path) -> None:
    """A Mooncake trace counts milliseconds from 0; published as it was, the shadow saw 1970 (a 57-year lag)."""
    trace = _mooncake_head(shared_dir, tmp_path)
    recorded_s = [json.loads(ln)["timestamp"] / 1000.0 for ln in trace.read_text().splitlines()]
    prod = ListProducer()
    FilePublisher(prod, instance_id="mc-0", wall_clock=lambda: 1_767_225_600.0).publish_file(trace)
    arrivals = [e for e in prod.events if e.kind == "request_arrived"]
    assert len(arrivals) == 50
    # First request at "now", the rest keep the trace's own spacing.
    assert [round(e.ts - 1_767_225_600.0, 6) for e in arrivals] == [round(s - recorded_s[0], 6) for s in recorded_s]


def test_start_ts_places_a_relative_trace_and_leaves_clock_times_alone(shared_dir: Path, tmp_path: Path) -> None:
    trace = _mooncake_head(shared_dir, tmp_path, 5)
    prod = ListProducer()
    FilePublisher(prod, instance_id="mc-0", start_ts=1_700_000_000.0).publish_file(trace)
    assert min(e.ts for e in prod.events) == 1_700_000_000.0
    # An SGLang log has its own dates: anchoring does not move them.
    prod = ListProducer()
    FilePublisher(prod, instance_id="node-1", start_ts=1_000.0).publish_file(shared_dir / "data" / LOG)
    assert prod.events[0].ts == 1749331514.0


def test_cli_start_ts_forms(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from shadowsim.commands.publish import parse_start_ts

    assert parse_start_ts("1767225600") == 1767225600.0
    assert parse_start_ts("2026-01-01T00:00:00Z") == 1767225600.0
    f = tmp_path / "t.jsonl"
    f.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5}\n')
    assert main(["publish", str(f), "--bootstrap-servers", "127.0.0.1:1", "--start-ts", "yesterday"]) == 2
    assert "--start-ts" in capsys.readouterr().err
