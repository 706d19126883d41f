"""Crash-safe files: atomic snapshots per partition and the de-duplicating predictions sink."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from shadowsim.shadow.sink import PredictionSink, read_predictions
from shadowsim.shadow.snapshot import SnapshotError, SnapshotStore


def test_snapshot_round_trip_and_atomic_replace(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "state")
    assert store.load("sglang.events", 0) is None
    store.save("sglang.events", 0, {"next_offset": 7, "twins": {"a": {"x": 0.1 + 0.2}}})
    store.save("sglang.events", 0, {"next_offset": 9, "twins": {}})
    doc = store.load("sglang.events", 0)
    assert doc is not None and doc["next_offset"] == 9 and doc["partition"] == 0
    assert not list((tmp_path / "state").glob("*.tmp"))  # the temporary file was renamed away
    assert store.partitions() == [("sglang.events", 0)]


def test_snapshot_keeps_float_bits(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    x = 0.1 + 0.2
    store.save("t", 3, {"next_offset": 1, "x": x})
    assert store.load("t", 3)["x"] == x  # type: ignore[index]


def test_snapshot_requires_next_offset_and_rejects_corrupt_files(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    with pytest.raises(ValueError):
        store.save("t", 0, {"twins": {}})
    store.path("t", 1).write_text("{not json")
    with pytest.raises(SnapshotError, match="delete it"):
        store.load("t", 1)


def test_sink_repairs_a_torn_last_line_and_reader_deduplicates(tmp_path: Path) -> None:
    path = tmp_path / "pred.jsonl"
    s = PredictionSink(path)
    rec = {"instance": "a", "request_id": "r1", "ape": 0.1}
    s.write([rec, {"instance": "a", "request_id": "r2", "ape": 0.2}])
    s.close()
    with open(path, "ab") as f:
        f.write(b'{"instance": "a", "requ')  # a crash in the middle of a write
    s2 = PredictionSink(path)
    s2.write([rec])  # replayed after the restart: a duplicate
    s2.close()
    lines = path.read_bytes().splitlines()
    assert len(lines) == 3 and all(json.loads(x) for x in lines)
    got = read_predictions(path)
    assert sorted(got) == [("a", "r1"), ("a", "r2")]


def test_reader_rejects_two_different_predictions_for_one_request(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    s = PredictionSink(path)
    s.write([{"instance": "a", "request_id": "r", "v": 1}, {"instance": "a", "request_id": "r", "v": 2}])
    s.close()
    with pytest.raises(ValueError, match="not deterministic"):
        read_predictions(path)
