"""Crash-safe snapshot files: one JSON document per input partition, replaced atomically.

A snapshot holds the domain state of every twin whose events live on that partition, plus the partition's *next*
offset (the first record the snapshot does not reflect). Partitions are the unit of ownership in a consumer
group, so on a rebalance the new owner loads exactly the file of each partition it receives.

Write protocol (POSIX): write ``<name>.tmp`` → ``flush`` + ``fsync`` → ``rename`` over ``<name>`` → ``fsync`` the
directory. A crash at any point leaves either the old file or the new one, never a torn file. Only JSON is read
back: nothing from disk is ever unpickled.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

FORMAT = 1


class SnapshotError(RuntimeError):
    """A snapshot file exists but cannot be used (corrupt or from an incompatible version)."""


class SnapshotStore:
    """Snapshots under ``directory``, keyed by (topic, partition)."""

    def __init__(self, directory: Path | str) -> None:
        self.dir = Path(directory)

    def path(self, topic: str, partition: int) -> Path:
        return self.dir / f"{topic}-{partition}.json"

    def save(self, topic: str, partition: int, state: dict[str, Any]) -> Path:
        """Atomically replace the snapshot of ``topic``/``partition`` with ``state`` (must hold ``next_offset``)."""
        if "next_offset" not in state:
            raise ValueError("a snapshot must record the next offset to read")
        self.dir.mkdir(parents=True, exist_ok=True)
        final = self.path(topic, partition)
        tmp = final.with_suffix(".json.tmp")
        doc = {"format": FORMAT, "topic": topic, "partition": partition, **state}
        data = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        _fsync_dir(self.dir)  # make the rename itself durable
        return final

    def load(self, topic: str, partition: int) -> dict[str, Any] | None:
        """The last snapshot of ``topic``/``partition``, or None when there is none."""
        p = self.path(topic, partition)
        try:
            raw = p.read_bytes()
        except FileNotFoundError:
            return None
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError as exc:  # cannot happen with the rename protocol unless the disk lies
            raise SnapshotError(f"{p} is not valid JSON ({exc}); delete it to replay from the committed offset")
        if doc.get("format") != FORMAT:
            raise SnapshotError(f"{p} has format {doc.get('format')!r}, expected {FORMAT}; delete it to rebuild")
        return doc

    def partitions(self) -> list[tuple[str, int]]:
        out = []
        for p in sorted(self.dir.glob("*.json")):
            topic, _, part = p.stem.rpartition("-")
            if part.isdigit():
                out.append((topic, int(part)))
        return out


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # some filesystems do not allow opening directories; the rename is still atomic
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
