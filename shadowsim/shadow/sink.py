"""Output of per-request predictions joined with actuals: an append-only JSONL file.

Delivery is at-least-once: records written after the last snapshot are written again when the service resumes
from that snapshot. Every record is keyed by ``(instance, request_id)`` and identical on replay, so readers
de-duplicate (``read_predictions`` does). A SIGKILL can leave a torn last line; ``PredictionSink`` cuts it off
before appending, so the file stays one JSON document per line.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any


class PredictionSink:
    """Appends records; ``flush()`` makes them durable (called before each snapshot)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _repair_tail(self.path)
        self._f = open(self.path, "ab")  # noqa: SIM115 - lives as long as the sink
        self.written = 0

    def write(self, records: Iterable[dict[str, Any]]) -> None:
        for r in records:
            self._f.write(json.dumps(r, separators=(",", ":"), sort_keys=True).encode() + b"\n")
            self.written += 1

    def flush(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        if not self._f.closed:
            self.flush()
            self._f.close()


def _repair_tail(path: Path) -> None:
    """Truncate a partial last line (a write cut by a crash)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 1))
        if f.read(1) == b"\n":
            return
        # Scan back for the last newline (records are small; read the tail in chunks).
        pos = size
        while pos > 0:
            step = min(65536, pos)
            pos -= step
            f.seek(pos)
            chunk = f.read(step)
            i = chunk.rfind(b"\n")
            if i >= 0:
                f.truncate(pos + i + 1)
                return
        f.truncate(0)


def read_predictions(path: Path | str) -> dict[tuple[str, str], dict[str, Any]]:
    """All records of a sink file, de-duplicated by (instance, request_id); a torn last line is ignored.
    Raises ValueError if two records of the same request differ (replay must be deterministic)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                break
            r = json.loads(line)
            k = (r["instance"], r["request_id"])
            if k in out and out[k] != r:
                raise ValueError(f"two different predictions for {k}: replay was not deterministic")
            out[k] = r
    return out
