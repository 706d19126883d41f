"""Crash-safe files: atomic snapshots per partition and the de-duplicating predictions sink."""
from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from shadowsim.shadow.sink import PredictionSink, read_predictions
from shadowsim.shadow.snapshot import UNCHANGED, SnapshotStore


def test_snapshot_round_trip_and_atomic_replace(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "state")
    assert store.load("sglang.events", 0) is None
    store.save("sglang.events", 0, {"next_offset": 7, "twins": {"a": {"x": 0.1 + 0.2}}})
    store.save("sglang.events", 0, {"next_offset": 9, "twins": {}})
    doc = store.load("sglang.events", 0)
    assert doc is not None and doc["next_offset"] == 9 and doc["partition"] == 0 and doc["twins"] == {}
    assert not list((tmp_path / "state").rglob("*.tmp"))  # the temporary files were renamed away
    assert store.partitions() == [("sglang.events", 0)]


def test_snapshot_keeps_float_bits(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    x = 0.1 + 0.2
    store.save("t", 3, {"next_offset": 1, "x": x, "twins": {"a": {"y": x}}})
    doc = store.load("t", 3)
    assert doc is not None and doc["x"] == x and doc["twins"]["a"]["y"] == x


def test_snapshot_requires_next_offset(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        SnapshotStore(tmp_path).save("t", 0, {"twins": {}})


def test_checkpoints_write_only_changed_twins_keep_k_and_are_private(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path, keep=2)
    store.save("t", 0, {"next_offset": 1, "twins": {"a": {"v": 1}, "b": {"v": 1}}})
    pdir = store.partition_dir("t", 0)
    store.save("t", 0, {"next_offset": 2, "twins": {"a": {"v": 2}, "b": UNCHANGED}})
    store.save("t", 0, {"next_offset": 3, "twins": {"a": {"v": 3}, "b": UNCHANGED}})
    # only a changed: generations 2 and 3 wrote a alone; b's state stays in generation 1's file, which both kept
    # manifests (keep=2) still name, so it is kept
    names = sorted(p.name for p in pdir.iterdir())
    assert [n for n in names if n.startswith("manifest-")] == ["manifest-000000000002.json",
                                                               "manifest-000000000003.json"]
    assert [n for n in names if n.startswith("twins-")] == ["twins-000000000001.json", "twins-000000000002.json",
                                                            "twins-000000000003.json"]
    assert json.loads((pdir / "twins-000000000003.json").read_text())["twins"] == {"a": {"v": 3}}
    doc = store.load("t", 0)
    assert doc is not None and doc["next_offset"] == 3 and doc["twins"] == {"a": {"v": 3}, "b": {"v": 1}}
    for p in pdir.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    assert stat.S_IMODE(pdir.stat().st_mode) == 0o700


def test_a_corrupt_newest_snapshot_falls_back_to_the_previous_one_naming_the_file(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = SnapshotStore(tmp_path, keep=3)
    store.save("t", 1, {"next_offset": 5, "twins": {"a": {"v": 5}}})
    newest = store.save("t", 1, {"next_offset": 9, "twins": {"a": {"v": 9}}})
    newest.write_text("{not json")
    doc = SnapshotStore(tmp_path).load("t", 1)
    assert doc is not None and doc["next_offset"] == 5 and doc["twins"] == {"a": {"v": 5}}
    assert str(newest) in caplog.text and "not valid JSON" in caplog.text
    # a manifest whose twin file is missing is unusable as well
    store.save("t", 2, {"next_offset": 3, "twins": {"a": {"v": 3}}})
    for p in store.partition_dir("t", 2).glob("twins-*"):
        p.unlink()
    assert SnapshotStore(tmp_path).load("t", 2) is None
    # wrong structure: a manifest without an offset
    store.save("t", 3, {"next_offset": 1, "twins": {}})
    bad = store.save("t", 3, {"next_offset": 2, "twins": {}})
    doc3 = json.loads(bad.read_text())
    del doc3["next_offset"]
    bad.write_text(json.dumps(doc3))
    got = SnapshotStore(tmp_path).load("t", 3)
    assert got is not None and got["next_offset"] == 1
    assert "next_offset is None" in caplog.text


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
