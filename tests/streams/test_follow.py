"""Following a growing file like `tail -F`: appended lines, partial lines, rotation, truncation."""
from __future__ import annotations

import os
from pathlib import Path

from streams.follow import FileFollower


def _append(p: Path, data: bytes) -> None:
    with open(p, "ab") as f:
        f.write(data)


def test_appended_lines_come_out_once_and_partial_lines_wait_for_their_newline(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    f = FileFollower(log)
    assert f.read_available() == []  # not there yet: waited for
    _append(log, b"one\ntwo\r\nthr")
    assert f.read_available() == [b"one", b"two"]
    assert f.read_available() == []
    _append(log, b"ee\n")
    assert f.read_available() == [b"three"]


def test_rotation_reads_the_rest_of_the_old_file_then_the_new_one(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    _append(log, b"a1\na2\n")
    f = FileFollower(log)
    assert f.read_available() == [b"a1", b"a2"]
    _append(log, b"a3\na4-partial")  # written just before rotation
    os.rename(log, tmp_path / "server.log.1")
    assert f.read_available() == [b"a3"]  # rotated away, nothing new yet: keep reading the old file
    _append(log, b"b1\n")
    assert f.read_available() == [b"a4-partial", b"b1"]
    assert f.rotations == 1


def test_truncation_restarts_at_the_beginning(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    _append(log, b"old line 1\nold line 2\n")
    f = FileFollower(log)
    assert len(f.read_available()) == 2
    log.write_bytes(b"new\n")  # > server.log; echo new >> server.log
    assert f.read_available() == [b"new"]
    assert f.truncations == 1


def test_from_end_skips_what_was_there(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    _append(log, b"history\n")
    f = FileFollower(log, from_end=True)
    assert f.read_available() == []
    _append(log, b"fresh\n")
    assert f.read_available() == [b"fresh"]


def test_lines_stops_after_the_idle_timeout_without_real_sleeping(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    _append(log, b"x\ny\n")
    naps: list[float] = []
    out = list(FileFollower(log).lines(poll_interval_s=0.5, idle_timeout_s=1.0, sleep=naps.append))
    assert out == [b"x", b"y"] and naps == [0.5, 0.5]
